package iolab

// slowfs: the slow-device lab's FUSE file system, served by a goroutine of
// the lab: a root directory holding one regular file, the loop device's
// backing file, whose every READ and WRITE the daemon answers after a
// fixed delay, one request at a time, as a slow disk would. Opened with
// FOPEN_DIRECT_IO, so that every read and write of the loop device reaches
// the daemon (no page cache in between).
//
// The wire format is include/uapi/linux/fuse.h's, protocol 7.23 and later
// (INIT answers min(kernel's, 7.31)); every structure is in host byte
// order.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

var ne = binary.NativeEndian

const (
	fuseMajor    = 7
	fuseMinor    = 31
	fuseRootID   = 1
	slowfsFileID = 2

	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opSetattr     = 4
	opOpen        = 14
	opRead        = 15
	opWrite       = 16
	opStatfs      = 17
	opRelease     = 18
	opFsync       = 20
	opGetxattr    = 22
	opListxattr   = 23
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opAccess      = 34
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42

	inHeaderSize = 40
	readInSize   = 40
	writeInSize  = 40
	attrSize     = 88
	initOutSize  = 64
	fopenDirect  = 1 << 0 // FOPEN_DIRECT_IO
	fopenNoFlush = 1 << 5 // FOPEN_NOFLUSH (5.16)
	slowChunk    = 64 << 10
	slowMaxWrite = 128 << 10
	slowReadBuf  = slowMaxWrite + 4096
)

// slowfs is the daemon.
type slowfs struct {
	fd    int
	name  string // the file's name
	size  uint64
	delay time.Duration
	mtime uint64

	mu     sync.Mutex
	chunks map[uint64][]byte // written data, by chunk (unwritten reads as zeros)
	closed bool              // no more replies: the fd is closing
	ops    map[uint32]int
	// own counts the requests a thread of this process waits on (by
	// opcode): none may be, see SlowInstance.bind.
	own map[uint32]int

	initDone chan error
	done     chan struct{}
}

func newSlowfs(fd int, name string, size uint64, delay time.Duration) *slowfs {
	return &slowfs{fd: fd, name: name, size: size, delay: delay, mtime: uint64(time.Now().Unix()),
		chunks: map[uint64][]byte{}, ops: map[uint32]int{}, own: map[uint32]int{}, initDone: make(chan error, 1), done: make(chan struct{})}
}

// serve answers requests one at a time until the connection ends.
func (s *slowfs) serve() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(s.done)
	buf := make([]byte, slowReadBuf)
	for {
		n, err := unix.Read(s.fd, buf)
		switch {
		case err == nil:
			s.dispatch(buf[:n])
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOENT):
		default:
			select {
			case s.initDone <- fmt.Errorf("read /dev/fuse: %w", err):
			default:
			}
			return
		}
	}
}

func (s *slowfs) dispatch(b []byte) {
	if len(b) < inHeaderSize {
		return
	}
	l, op, unique, node := ne.Uint32(b[0:]), ne.Uint32(b[4:]), ne.Uint64(b[8:]), ne.Uint64(b[16:])
	ext := int(ne.Uint16(b[36:])) * 8
	if int(l) > len(b) || l < inHeaderSize {
		return
	}
	body := b[inHeaderSize:l]
	if ext > 0 && ext <= len(body) {
		body = body[:len(body)-ext]
	}
	own := waitedOn(op) && isOwnThread(ne.Uint32(b[32:]))
	s.mu.Lock()
	s.ops[op]++
	if own {
		s.own[op]++
	}
	s.mu.Unlock()
	if op == opRead || op == opWrite {
		time.Sleep(s.delay) // the slow disk
	}
	reply, e := s.handle(op, node, body)
	switch op {
	case opForget, opBatchForget, opInterrupt:
		return // no reply
	}
	out := make([]byte, 0, 16+len(reply))
	out = ne.AppendUint32(out, uint32(16+len(reply)))
	out = ne.AppendUint32(out, uint32(-int32(e)))
	out = ne.AppendUint64(out, unique)
	out = append(out, reply...)
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		_, _ = unix.Write(s.fd, out)
	}
	if op == opInit {
		select {
		case s.initDone <- nil:
		default:
		}
	}
}

func (s *slowfs) attr(node uint64) []byte {
	b := make([]byte, 0, attrSize)
	mode, size, nlink := uint32(unix.S_IFDIR|0o755), uint64(0), uint32(2)
	if node == slowfsFileID {
		mode, size, nlink = unix.S_IFREG|0o600, s.size, 1
	}
	b = ne.AppendUint64(b, node)
	b = ne.AppendUint64(b, size)
	b = ne.AppendUint64(b, (size+511)/512)
	for range 3 {
		b = ne.AppendUint64(b, s.mtime)
	}
	for range 3 {
		b = ne.AppendUint32(b, 0)
	}
	b = ne.AppendUint32(b, mode)
	b = ne.AppendUint32(b, nlink)
	b = ne.AppendUint32(b, 0)    // uid
	b = ne.AppendUint32(b, 0)    // gid
	b = ne.AppendUint32(b, 0)    // rdev
	b = ne.AppendUint32(b, 4096) // blksize
	return ne.AppendUint32(b, 0) // flags
}

func (s *slowfs) handle(op uint32, node uint64, body []byte) ([]byte, unix.Errno) {
	switch op {
	case opInit:
		if len(body) < 16 || ne.Uint32(body[0:]) != fuseMajor || ne.Uint32(body[4:]) < 23 {
			return nil, unix.EPROTO
		}
		out := make([]byte, 0, initOutSize)
		out = ne.AppendUint32(out, fuseMajor)
		out = ne.AppendUint32(out, min(ne.Uint32(body[4:]), fuseMinor))
		out = ne.AppendUint32(out, ne.Uint32(body[8:])) // max_readahead
		out = ne.AppendUint32(out, 0)                   // flags: none
		out = ne.AppendUint16(out, 16)                  // max_background
		out = ne.AppendUint16(out, 12)                  // congestion_threshold
		out = ne.AppendUint32(out, slowMaxWrite)
		out = ne.AppendUint32(out, 1) // time_gran
		return append(out, make([]byte, initOutSize-len(out))...), 0
	case opLookup:
		if node != fuseRootID || cstr(body) != s.name {
			return nil, unix.ENOENT
		}
		b := ne.AppendUint64(nil, slowfsFileID)
		b = ne.AppendUint64(b, 1)
		b = ne.AppendUint64(b, 3600)
		b = ne.AppendUint64(b, 3600)
		b = ne.AppendUint32(b, 0)
		b = ne.AppendUint32(b, 0)
		return append(b, s.attr(slowfsFileID)...), 0
	case opGetattr, opSetattr:
		if node != fuseRootID && node != slowfsFileID {
			return nil, unix.ENOENT
		}
		b := ne.AppendUint64(nil, 3600)
		b = ne.AppendUint32(b, 0)
		b = ne.AppendUint32(b, 0)
		return append(b, s.attr(node)...), 0
	case opOpen, opOpendir:
		b := ne.AppendUint64(nil, 1)
		flags := uint32(0)
		if op == opOpen {
			if node != slowfsFileID {
				return nil, unix.EISDIR
			}
			// No FLUSH on close: the lab's own process closes its
			// descriptor of the file, and a request from the process
			// that serves the file system is one a kill -9 can leave
			// unanswered for ever (see slowdev.go).
			flags = fopenDirect | fopenNoFlush
		}
		b = ne.AppendUint32(b, flags)
		return ne.AppendUint32(b, 0), 0
	case opRead:
		if node != slowfsFileID || len(body) < readInSize {
			return nil, unix.EINVAL
		}
		off, size := ne.Uint64(body[8:]), uint64(ne.Uint32(body[16:]))
		if off >= s.size {
			return nil, 0
		}
		size = min(size, s.size-off)
		out := make([]byte, size)
		s.mu.Lock()
		for done := uint64(0); done < size; {
			c, in := (off+done)/slowChunk, (off+done)%slowChunk
			n := min(size-done, slowChunk-in)
			if ch := s.chunks[c]; ch != nil {
				copy(out[done:done+n], ch[in:in+n])
			}
			done += n
		}
		s.mu.Unlock()
		return out, 0
	case opWrite:
		if node != slowfsFileID || len(body) < writeInSize {
			return nil, unix.EINVAL
		}
		off, size := ne.Uint64(body[8:]), uint64(ne.Uint32(body[16:]))
		if size > uint64(len(body)-writeInSize) || off+size > s.size {
			return nil, unix.EINVAL
		}
		data := body[writeInSize : writeInSize+int(size)]
		s.mu.Lock()
		for done := uint64(0); done < size; {
			c, in := (off+done)/slowChunk, (off+done)%slowChunk
			n := min(size-done, slowChunk-in)
			ch := s.chunks[c]
			if ch == nil {
				ch = make([]byte, slowChunk)
				s.chunks[c] = ch
			}
			copy(ch[in:in+n], data[done:done+n])
			done += n
		}
		s.mu.Unlock()
		out := ne.AppendUint32(nil, uint32(size))
		return ne.AppendUint32(out, 0), 0
	case opStatfs:
		b := make([]byte, 0, 80)
		for _, v := range []uint64{s.size / 4096, 0, 0, 16, 0} {
			b = ne.AppendUint64(b, v)
		}
		b = ne.AppendUint32(b, 4096)
		b = ne.AppendUint32(b, 255)
		b = ne.AppendUint32(b, 4096)
		return append(b, make([]byte, 80-len(b))...), 0
	case opReaddir:
		return nil, 0 // an empty listing: nobody lists it
	case opFlush:
		// ENOSYS: the kernel sends no more (kernels older than
		// FOPEN_NOFLUSH's 5.16 ask once).
		return nil, unix.ENOSYS
	case opRelease, opReleasedir, opFsync, opAccess, opDestroy, opForget, opBatchForget, opInterrupt:
		return nil, 0
	case opGetxattr, opListxattr:
		return nil, unix.ENOSYS
	}
	return nil, unix.ENOSYS
}

// stop makes later replies no-ops, before the fd is closed.
func (s *slowfs) stop() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// waitedOn says whether the sender of a request with opcode op waits for
// its answer: INIT is answered in the background, RELEASE sent from the
// last fput without waiting, FORGET and INTERRUPT never answered.
func waitedOn(op uint32) bool {
	switch op {
	case opInit, opRelease, opReleasedir, opForget, opBatchForget, opInterrupt:
		return false
	}
	return true
}

// isOwnThread says whether tid (a request header's pid, the sending
// thread's id) is a thread of this process.
func isOwnThread(tid uint32) bool {
	return tid != 0 && unix.Access(fmt.Sprintf("/proc/self/task/%d", tid), unix.F_OK) == nil
}
