package pshang

// The daemon: a read-only FUSE filesystem with one file, served over
// /dev/fuse by a goroutine of the lab's own process. Every READ of the file
// is parked (read from /dev/fuse, never answered) until the lab releases
// or aborts, so the page-cache folios that READ fills stay locked.
//
// Wire layouts are include/uapi/linux/fuse.h's (protocol 7.31 answered, all
// structures 64-bit aligned, host byte order).

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
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opOpen        = 14
	opRead        = 15
	opStatfs      = 17
	opRelease     = 18
	opGetxattr    = 22
	opListxattr   = 23
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReleasedir  = 29
	opAccess      = 34
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42

	inHeaderSize = 40
	rootID       = 1
	fileID       = 2
	fileName     = "data"
	fileSize     = 4 << 20
	protoMinor   = 31
	// FUSE_ASYNC_READ, as libfuse grants by default: readahead sends its
	// READ in the background and the faulting task then waits on the
	// folio lock (filemap_fault -> __folio_lock), not in the request.
	fuseAsyncRead = 1 << 0
)

// parked is a READ the daemon owes.
type parked struct {
	unique uint64
	pid    int // fuse_in_header pid: the task that sent it
	offset uint64
	size   uint32
	since  time.Time
}

type server struct {
	fd      int
	logf    func(string, ...any)
	writeMu sync.Mutex
	closed  bool

	mu       sync.Mutex
	released bool
	parked   []parked
	reads    chan parked   // one per parked READ, never blocks the reader
	initDone chan error    // INIT answered (nil) or failed
	done     chan struct{} // the reader returned
	tid      int
}

func newServer(fd int, logf func(string, ...any)) *server {
	return &server{fd: fd, logf: logf, reads: make(chan parked, 16), initDone: make(chan error, 1), done: make(chan struct{})}
}

// serve reads requests until the connection ends (ENODEV after an abort
// or unmount).
func (s *server) serve() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(s.done)
	s.tid = unix.Gettid()
	buf := make([]byte, 1<<20+4096)
	for {
		n, err := unix.Read(s.fd, buf)
		switch {
		case err == nil:
			s.dispatch(buf[:n])
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.ENODEV):
			s.initFailed(errors.New("connection ended"))
			return
		default:
			s.initFailed(err)
			return
		}
	}
}

func (s *server) initFailed(err error) {
	select {
	case s.initDone <- err:
	default:
	}
}

func (s *server) dispatch(b []byte) {
	if len(b) < inHeaderSize {
		return
	}
	op, unique, node, pid := ne.Uint32(b[4:]), ne.Uint64(b[8:]), ne.Uint64(b[16:]), ne.Uint32(b[32:])
	body := b[inHeaderSize:]
	reply := func(errno unix.Errno, payload []byte) {
		if err := s.write(packReply(unique, errno, payload)); err != nil {
			s.logf("pshang: daemon: reply to op %d: %v", op, err)
		}
	}
	switch op {
	case opInit:
		if len(body) < 16 || ne.Uint32(body[0:]) != 7 || ne.Uint32(body[4:]) < protoMinor {
			reply(unix.EPROTO, nil)
			s.initFailed(fmt.Errorf("INIT: kernel FUSE protocol too old"))
			return
		}
		out := make([]byte, 0, 64)
		out = ne.AppendUint32(out, 7)
		out = ne.AppendUint32(out, protoMinor)
		out = ne.AppendUint32(out, ne.Uint32(body[8:])) // max_readahead: the kernel's
		out = ne.AppendUint32(out, fuseAsyncRead)
		out = ne.AppendUint16(out, 16)      // max_background
		out = ne.AppendUint16(out, 12)      // congestion_threshold
		out = ne.AppendUint32(out, 128<<10) // max_write
		out = ne.AppendUint32(out, 1)       // time_gran
		out = append(out, make([]byte, 64-len(out))...)
		reply(0, out)
		s.initFailed(nil)
	case opLookup:
		if node != rootID || cstring(body) != fileName {
			reply(unix.ENOENT, nil)
			return
		}
		reply(0, entryOut(fileID))
	case opGetattr:
		if node != rootID && node != fileID {
			reply(unix.ENOENT, nil)
			return
		}
		out := ne.AppendUint64(nil, 1)
		out = ne.AppendUint64(out, 0)
		reply(0, append(out, attrOf(node)...))
	case opOpen, opOpendir:
		out := ne.AppendUint64(nil, 1)
		out = ne.AppendUint32(out, 1<<1) // FOPEN_KEEP_CACHE
		out = ne.AppendUint32(out, 0)
		reply(0, out)
	case opRead:
		if len(body) < 24 {
			reply(unix.EINVAL, nil)
			return
		}
		off, size := ne.Uint64(body[8:]), ne.Uint32(body[16:])
		s.mu.Lock()
		if !s.released && node == fileID {
			p := parked{unique: unique, pid: int(pid), offset: off, size: size, since: time.Now()}
			s.parked = append(s.parked, p)
			s.mu.Unlock()
			s.logf("pshang: daemon: READ of %d bytes at %d from tid %d parked (unique %d)", size, off, pid, unique)
			select {
			case s.reads <- p:
			default:
			}
			return
		}
		s.mu.Unlock()
		reply(0, content(off, size))
	case opStatfs:
		reply(0, make([]byte, 80))
	case opGetxattr, opListxattr:
		reply(unix.ENOSYS, nil) // the kernel remembers and stops asking
	case opFlush, opRelease, opReleasedir, opAccess, opDestroy:
		reply(0, nil)
	case opForget, opBatchForget, opInterrupt:
		// No reply. An INTERRUPT for a parked READ is ignored, as a stuck
		// daemon would.
	default:
		reply(unix.ENOSYS, nil)
	}
}

// release answers every parked READ and parks no more.
func (s *server) release() {
	s.mu.Lock()
	s.released = true
	ps := s.parked
	s.parked = nil
	s.mu.Unlock()
	for _, p := range ps {
		_ = s.write(packReply(p.unique, 0, content(p.offset, p.size)))
	}
}

func (s *server) write(b []byte) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.closed {
		return errors.New("connection closed")
	}
	n, err := unix.Write(s.fd, b)
	if err != nil {
		return fmt.Errorf("write /dev/fuse: %w", err)
	}
	if n != len(b) {
		return fmt.Errorf("write /dev/fuse: %d of %d bytes", n, len(b))
	}
	return nil
}

func (s *server) stopWrites() {
	s.writeMu.Lock()
	s.closed = true
	s.writeMu.Unlock()
}

func packReply(unique uint64, e unix.Errno, payload []byte) []byte {
	b := ne.AppendUint32(nil, uint32(16+len(payload)))
	b = ne.AppendUint32(b, uint32(-int32(e)))
	b = ne.AppendUint64(b, unique)
	return append(b, payload...)
}

// attrOf is struct fuse_attr (88 bytes) for the root or the file.
func attrOf(node uint64) []byte {
	mode, size, nlink := uint32(unix.S_IFDIR|0o755), uint64(0), uint32(2)
	if node == fileID {
		mode, size, nlink = unix.S_IFREG|0o444, fileSize, 1
	}
	b := ne.AppendUint64(nil, node)
	b = ne.AppendUint64(b, size)
	b = ne.AppendUint64(b, (size+511)/512)
	for range 3 {
		b = ne.AppendUint64(b, 0) // atime, mtime, ctime
	}
	for range 3 {
		b = ne.AppendUint32(b, 0) // their nanoseconds
	}
	b = ne.AppendUint32(b, mode)
	b = ne.AppendUint32(b, nlink)
	b = ne.AppendUint32(b, 0)    // uid
	b = ne.AppendUint32(b, 0)    // gid
	b = ne.AppendUint32(b, 0)    // rdev
	b = ne.AppendUint32(b, 4096) // blksize
	return ne.AppendUint32(b, 0) // flags
}

// entryOut is struct fuse_entry_out: node id, generation, validities, attr.
func entryOut(node uint64) []byte {
	b := ne.AppendUint64(nil, node)
	b = ne.AppendUint64(b, 1)
	b = ne.AppendUint64(b, 60)
	b = ne.AppendUint64(b, 60)
	b = ne.AppendUint32(b, 0)
	b = ne.AppendUint32(b, 0)
	return append(b, attrOf(node)...)
}

// content is the file's bytes: a pattern, so a read that does complete
// returns something checkable.
func content(off uint64, size uint32) []byte {
	if off >= fileSize {
		return nil
	}
	n := min(uint64(size), fileSize-off)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + (off+uint64(i))%26)
	}
	return b
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
