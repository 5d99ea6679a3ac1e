package fusestall

// The daemon side: a tiny in-memory filesystem (a root directory holding one
// regular file, "data") served over /dev/fuse by one goroutine of the lab's
// own process, which parks the requests the variant wants to stall.

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	dataName = "data"
	dataIno  = 2
	// maxFileSize bounds what a curious user can make the daemon hold.
	maxFileSize = 16 << 20
	// stallPrefix: in the mutex variant, LOOKUPs of names with this prefix
	// are parked.
	stallPrefix = "stall"
)

type node struct {
	attr attr
	name string
	data []byte
}

// parkedReq is a request the daemon received and deliberately has not
// answered: its sender sleeps in request_wait_answer until we do.
type parkedReq struct {
	Unique      uint64
	Op          uint32
	PID         int // requesting task, from fuse_in_header
	NodeID      uint64
	Name        string // LOOKUP: the name looked up
	Offset      uint64 // WRITE
	Data        []byte // WRITE: a copy of the payload
	Since       time.Time
	Interrupted bool // the kernel sent INTERRUPT for it (we ignore it, as a stuck daemon would)
}

type server struct {
	fd    int
	kind  kind
	logf  func(string, ...any)
	mtime uint64

	writeMu sync.Mutex // one reply at a time on /dev/fuse
	closed  bool       // under writeMu: no more writes to fd

	mu       sync.Mutex
	nodes    map[uint64]*node
	names    map[string]uint64 // children of the root
	nextIno  uint64
	nextFh   uint64
	released bool
	parked   map[uint64]*parkedReq
	ops      map[uint32]int // requests seen, by opcode
	minor    uint32

	initOnce sync.Once
	initDone chan struct{} // closed when INIT was answered
	initErr  error         // set before initDone is closed

	stalls chan parkedReq // one notification per parked request, never blocks the reader

	tid     atomic.Int32  // thread reading /dev/fuse
	done    chan struct{} // closed when the reader returns
	readErr error         // why the reader returned, if not a normal end
}

func newServer(fd int, k kind, logf func(string, ...any)) *server {
	now := uint64(time.Now().Unix())
	s := &server{
		fd: fd, kind: k, logf: logf, mtime: now,
		nodes:    map[uint64]*node{},
		names:    map[string]uint64{},
		nextIno:  dataIno + 1,
		nextFh:   1,
		parked:   map[uint64]*parkedReq{},
		ops:      map[uint32]int{},
		initDone: make(chan struct{}),
		stalls:   make(chan parkedReq, 64),
		done:     make(chan struct{}),
	}
	s.nodes[rootID] = &node{attr: attr{ino: rootID, mode: unix.S_IFDIR | 0o755, nlink: 2, mtime: now}}
	s.nodes[dataIno] = &node{name: dataName, attr: attr{ino: dataIno, mode: unix.S_IFREG | 0o666, nlink: 1, mtime: now}}
	s.names[dataName] = dataIno
	return s
}

// serve reads requests until the connection goes away (ENODEV: aborted or
// unmounted). It runs on a locked OS thread so that "the daemon thread" is
// one stable tid a person can look at.
func (s *server) serve() {
	runtime.LockOSThread()
	// Unlock before returning: a goroutine that exits locked takes its
	// thread down with it, and a child forked from that thread would get
	// its Pdeathsig.
	defer runtime.UnlockOSThread()
	defer close(s.done)
	s.tid.Store(int32(unix.Gettid()))

	buf := make([]byte, readBufferSize)
	for {
		n, err := unix.Read(s.fd, buf)
		switch {
		case err == nil:
			s.dispatch(buf[:n])
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
		case errors.Is(err, unix.ENOENT):
			// The request we were about to get was interrupted or
			// aborted after it woke us; nothing to do.
		case errors.Is(err, unix.ENODEV):
			s.failInit(errors.New("connection ended before INIT"))
			return
		default:
			s.readErr = fmt.Errorf("read /dev/fuse: %w", err)
			s.failInit(s.readErr)
			return
		}
	}
}

func (s *server) failInit(err error) {
	s.initOnce.Do(func() {
		s.initErr = err
		close(s.initDone)
	})
}

// stalls reports whether the variant parks this request; mu held.
func (s *server) shouldStall(h inHeader, name string) bool {
	if s.released {
		return false
	}
	switch s.kind {
	case kindRWSem:
		// The writer holds the inode's i_rwsem (inode_lock in
		// fuse_cache_write_iter) for as long as its WRITE is unanswered.
		return h.Opcode == opWrite && h.NodeID == dataIno
	case kindMutex:
		// Without FUSE_PARALLEL_DIROPS, fuse_lookup holds the directory's
		// fuse_inode mutex (fuse_lock_inode) across the LOOKUP request.
		return h.Opcode == opLookup && h.NodeID == rootID && strings.HasPrefix(name, stallPrefix)
	}
	return false
}

func (s *server) dispatch(b []byte) {
	h, err := parseInHeader(b)
	if err != nil {
		s.logf("fusestall: daemon: bad request of %d bytes: %v", len(b), err)
		return
	}
	body := b[inHeaderSize:h.Len]
	// Extensions (security context, supplementary groups) trail the
	// arguments; we negotiate none, but strip them if the kernel sends some.
	if ext := int(h.TotalExtlen) * 8; ext > 0 && ext <= len(body) {
		body = body[:len(body)-ext]
	}

	s.mu.Lock()
	s.ops[h.Opcode]++
	reply, after := s.handle(h, body)
	s.mu.Unlock()

	if reply != nil {
		if err := s.write(reply); err != nil {
			s.logf("fusestall: daemon: reply to %s (unique %d): %v", opName(h.Opcode), h.Unique, err)
		}
	}
	if after != nil {
		after()
	}
}

// handle answers one request; mu held. A nil reply means none is due (FORGET,
// INTERRUPT) or the request was parked. after, if set, runs once the reply is
// written.
func (s *server) handle(h inHeader, body []byte) (reply []byte, after func()) {
	errno := func(e unix.Errno) []byte { return packReply(h.Unique, e, nil) }
	ok := func(payload []byte) []byte { return packReply(h.Unique, 0, payload) }

	switch h.Opcode {
	case opInit:
		return s.handleInit(h, body)

	case opLookup:
		name := cstring(body)
		if h.NodeID != rootID {
			return errno(unix.ENOENT), nil
		}
		if s.shouldStall(h, name) {
			s.park(&parkedReq{Unique: h.Unique, Op: h.Opcode, PID: int(h.PID), NodeID: h.NodeID, Name: name})
			return nil, nil
		}
		if s.kind == kindMutex && strings.HasPrefix(name, stallPrefix) {
			// The stall-N files exist; the daemon is just slow to say
			// so. Once released, the victims' own LOOKUPs find them.
			return ok(appendEntryOut(nil, s.lookupOrCreate(name, 0o644).attr)), nil
		}
		ino, found := s.names[name]
		if !found {
			return errno(unix.ENOENT), nil
		}
		return ok(appendEntryOut(nil, s.nodes[ino].attr)), nil

	case opGetattr:
		n := s.nodes[h.NodeID]
		if n == nil {
			return errno(unix.ENOENT), nil
		}
		return ok(appendAttrOut(nil, n.attr)), nil

	case opSetattr:
		n := s.nodes[h.NodeID]
		if n == nil {
			return errno(unix.ENOENT), nil
		}
		if len(body) < setattrInSize {
			return errno(unix.EINVAL), nil
		}
		valid := ne.Uint32(body[0:])
		if valid&fattrSize != 0 {
			if n.attr.mode&unix.S_IFMT != unix.S_IFREG {
				return errno(unix.EISDIR), nil
			}
			size := ne.Uint64(body[16:])
			if size > maxFileSize {
				return errno(unix.EFBIG), nil
			}
			n.data = resize(n.data, int(size))
			n.attr.size = size
		}
		if valid&fattrMode != 0 {
			n.attr.mode = n.attr.mode&unix.S_IFMT | ne.Uint32(body[68:])&0o7777
		}
		return ok(appendAttrOut(nil, n.attr)), nil

	case opOpen, opOpendir:
		n := s.nodes[h.NodeID]
		if n == nil {
			return errno(unix.ENOENT), nil
		}
		isDir := n.attr.mode&unix.S_IFMT == unix.S_IFDIR
		if isDir && h.Opcode == opOpen {
			return errno(unix.EISDIR), nil
		}
		if !isDir && h.Opcode == opOpendir {
			return errno(unix.ENOTDIR), nil
		}
		s.nextFh++
		return ok(appendOpenOut(nil, s.nextFh)), nil

	case opCreate:
		if h.NodeID != rootID {
			return errno(unix.ENOENT), nil
		}
		if len(body) < createInSize+1 {
			return errno(unix.EINVAL), nil
		}
		mode, umask := ne.Uint32(body[4:]), ne.Uint32(body[8:])
		n := s.lookupOrCreate(cstring(body[createInSize:]), mode&0o7777&^umask)
		s.nextFh++
		return ok(appendOpenOut(appendEntryOut(nil, n.attr), s.nextFh)), nil

	case opRead:
		n := s.nodes[h.NodeID]
		if n == nil {
			return errno(unix.ENOENT), nil
		}
		if len(body) < readInSize {
			return errno(unix.EINVAL), nil
		}
		off, size := ne.Uint64(body[8:]), uint64(ne.Uint32(body[16:]))
		if off >= uint64(len(n.data)) {
			return ok(nil), nil
		}
		end := min(off+size, uint64(len(n.data)))
		return ok(n.data[off:end]), nil

	case opWrite:
		if len(body) < writeInSize {
			return errno(unix.EINVAL), nil
		}
		off, size := ne.Uint64(body[8:]), ne.Uint32(body[16:])
		if int(size) > len(body)-writeInSize {
			return errno(unix.EINVAL), nil
		}
		data := body[writeInSize : writeInSize+int(size)]
		if s.shouldStall(h, "") {
			s.park(&parkedReq{Unique: h.Unique, Op: h.Opcode, PID: int(h.PID), NodeID: h.NodeID,
				Offset: off, Data: append([]byte(nil), data...)})
			return nil, nil
		}
		if e := s.applyWrite(h.NodeID, off, data); e != 0 {
			return errno(e), nil
		}
		return ok(writeOut(size)), nil

	case opReaddir:
		n := s.nodes[h.NodeID]
		if n == nil || n.attr.mode&unix.S_IFMT != unix.S_IFDIR {
			return errno(unix.ENOTDIR), nil
		}
		if len(body) < readInSize {
			return errno(unix.EINVAL), nil
		}
		return ok(s.readdir(ne.Uint64(body[8:]), int(ne.Uint32(body[16:])))), nil

	case opFlush, opRelease, opReleasedir, opAccess, opDestroy:
		// Nothing to flush or free; ACCESS: this filesystem lets everyone
		// do everything (we mount without default_permissions, as root).
		return ok(nil), nil

	case opStatfs:
		return ok(statfsOut()), nil

	case opGetxattr, opListxattr:
		// ENOSYS rather than ENODATA: the kernel then remembers
		// (fc->no_getxattr, fc->no_listxattr) and stops asking, e.g. for
		// security.capability on every write (file_remove_privs).
		return errno(unix.ENOSYS), nil

	case opForget, opBatchForget:
		// No reply is expected. Nodes live as long as the mount.
		return nil, nil

	case opInterrupt:
		// No reply, and the parked request stays parked: a daemon that
		// is stuck does not react to interrupts either, which is why a
		// signal does not free the offender (after one it waits on,
		// killable, in D). Replying ENOSYS would set fc->no_interrupt
		// and make it wait killable, in D, from the start.
		if len(body) >= interruptIn {
			if p := s.parked[ne.Uint64(body[0:])]; p != nil {
				p.Interrupted = true
				s.logf("fusestall: daemon: INTERRUPT for parked %s from pid %d, ignored", opName(p.Op), p.PID)
			}
		}
		return nil, nil
	}
	// Everything else (MKDIR, UNLINK, RENAME, FSYNC, locks, ...) is not
	// part of the lab. ENOSYS also makes the kernel stop sending some of
	// them (FSYNC, LSEEK, POLL...).
	return errno(unix.ENOSYS), nil
}

func (s *server) handleInit(h inHeader, body []byte) ([]byte, func()) {
	if len(body) < 16 {
		err := errors.New("INIT: short request")
		return packReply(h.Unique, unix.EINVAL, nil), func() { s.failInit(err) }
	}
	major, minor, readahead := ne.Uint32(body[0:]), ne.Uint32(body[4:]), ne.Uint32(body[8:])
	if major != kernelVersion || minor < 23 {
		err := fmt.Errorf("INIT: kernel speaks FUSE %d.%d, we need 7.23 or later", major, minor)
		return packReply(h.Unique, unix.EPROTO, nil), func() { s.failInit(err) }
	}
	s.minor = min(minor, kernelMinorVersion)

	// We grant no capability flag at all, deliberately:
	//   - no FUSE_WRITEBACK_CACHE: write(2) must send WRITE synchronously
	//     while holding i_rwsem (fuse_cache_write_iter, fuse_perform_write);
	//     with a writeback cache it would only dirty the page cache and the
	//     stall would move to a flusher with no lock a person can name;
	//   - no FUSE_PARALLEL_DIROPS: LOOKUP and READDIR then run under the
	//     directory's fuse_inode mutex (fuse_lock_inode), the mutex variant;
	//   - no FUSE_DO_READDIRPLUS, FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS,
	//     FUSE_ASYNC_READ, FUSE_INIT_EXT (so no flags2, no security-context
	//     or supplementary-group extensions): fewer request kinds, fewer
	//     surprises.
	const flags = 0
	out := make([]byte, 0, initOutSize)
	out = ne.AppendUint32(out, kernelVersion)
	out = ne.AppendUint32(out, s.minor)
	out = ne.AppendUint32(out, readahead)
	out = ne.AppendUint32(out, flags)
	out = ne.AppendUint16(out, 16) // max_background
	out = ne.AppendUint16(out, 12) // congestion_threshold
	out = ne.AppendUint32(out, maxWrite)
	out = ne.AppendUint32(out, 1) // time_gran (ns)
	out = ne.AppendUint16(out, 0) // max_pages: not negotiated (no FUSE_MAX_PAGES)
	out = ne.AppendUint16(out, 0) // map_alignment
	out = ne.AppendUint32(out, 0) // flags2
	out = append(out, make([]byte, initOutSize-len(out))...)
	s.logf("fusestall: daemon: INIT kernel 7.%d, answering 7.%d, flags 0", minor, s.minor)
	return packReply(h.Unique, 0, out), func() { s.failInit(nil) }
}

// park records a request to leave unanswered; mu held.
func (s *server) park(p *parkedReq) {
	p.Since = time.Now()
	s.parked[p.Unique] = p
	s.logf("fusestall: daemon: parked %s from pid %d (unique %d)", opName(p.Op), p.PID, p.Unique)
	select {
	case s.stalls <- *p:
	default:
	}
}

// release stops stalling and answers every parked request, as if the daemon
// had come back to life.
func (s *server) release() {
	s.mu.Lock()
	s.released = true
	list := make([]*parkedReq, 0, len(s.parked))
	for _, p := range s.parked {
		list = append(list, p)
	}
	clear(s.parked)
	sort.Slice(list, func(i, j int) bool { return list[i].Unique < list[j].Unique })
	replies := make([][]byte, 0, len(list))
	for _, p := range list {
		switch p.Op {
		case opWrite:
			if e := s.applyWrite(p.NodeID, p.Offset, p.Data); e != 0 {
				replies = append(replies, packReply(p.Unique, e, nil))
			} else {
				replies = append(replies, packReply(p.Unique, 0, writeOut(uint32(len(p.Data)))))
			}
		case opLookup:
			n := s.lookupOrCreate(p.Name, 0o644)
			replies = append(replies, packReply(p.Unique, 0, appendEntryOut(nil, n.attr)))
		}
	}
	s.mu.Unlock()
	for _, r := range replies {
		if err := s.write(r); err != nil {
			// ENOENT: the kernel no longer waits for it (aborted).
			s.logf("fusestall: daemon: release: %v", err)
		}
	}
}

// lookupOrCreate returns the root's child name, creating a regular file; mu held.
func (s *server) lookupOrCreate(name string, perm uint32) *node {
	if ino, ok := s.names[name]; ok {
		return s.nodes[ino]
	}
	n := &node{name: name, attr: attr{ino: s.nextIno, mode: unix.S_IFREG | perm, nlink: 1, mtime: s.mtime}}
	s.nextIno++
	s.nodes[n.attr.ino] = n
	s.names[name] = n.attr.ino
	return n
}

// applyWrite stores data at off; mu held.
func (s *server) applyWrite(ino, off uint64, data []byte) unix.Errno {
	n := s.nodes[ino]
	if n == nil {
		return unix.ENOENT
	}
	end := off + uint64(len(data))
	if end > maxFileSize {
		return unix.EFBIG
	}
	if end > uint64(len(n.data)) {
		n.data = resize(n.data, int(end))
		n.attr.size = end
	}
	copy(n.data[off:], data)
	return 0
}

// readdir lists the root from index off (the kernel hands back the off of
// the last entry it consumed); mu held.
func (s *server) readdir(off uint64, size int) []byte {
	type ent struct {
		name string
		ino  uint64
		mode uint32
	}
	ents := []ent{{".", rootID, unix.S_IFDIR}, {"..", rootID, unix.S_IFDIR}}
	names := make([]string, 0, len(s.names))
	for name := range s.names {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := s.nodes[s.names[name]]
		ents = append(ents, ent{name, n.attr.ino, n.attr.mode})
	}
	var out []byte
	for i := off; i < uint64(len(ents)); i++ {
		e := ents[i]
		if len(out)+direntSize(e.name) > size {
			break
		}
		out = appendDirent(out, e.ino, i+1, (e.mode&unix.S_IFMT)>>12, e.name)
	}
	return out
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
		return fmt.Errorf("write /dev/fuse: short write %d of %d", n, len(b))
	}
	return nil
}

// stopWrites makes later replies no-ops, before the fd is closed.
func (s *server) stopWrites() {
	s.writeMu.Lock()
	s.closed = true
	s.writeMu.Unlock()
}

func packReply(unique uint64, e unix.Errno, payload []byte) []byte {
	b := make([]byte, 0, outHeaderSize+len(payload))
	b = ne.AppendUint32(b, uint32(outHeaderSize+len(payload)))
	b = ne.AppendUint32(b, uint32(-int32(e)))
	b = ne.AppendUint64(b, unique)
	return append(b, payload...)
}

func writeOut(size uint32) []byte {
	return ne.AppendUint32(ne.AppendUint32(nil, size), 0)
}

func statfsOut() []byte {
	b := make([]byte, 0, kstatfsSize)
	for _, v := range []uint64{1024, 1024, 1024, 1024, 1000} { // blocks, bfree, bavail, files, ffree
		b = ne.AppendUint64(b, v)
	}
	b = ne.AppendUint32(b, 4096) // bsize
	b = ne.AppendUint32(b, 255)  // namelen
	b = ne.AppendUint32(b, 4096) // frsize
	return append(b, make([]byte, kstatfsSize-len(b))...)
}

func resize(b []byte, n int) []byte {
	if n <= len(b) {
		return b[:n]
	}
	return append(b, make([]byte, n-len(b))...)
}
