package fusestall

// The FUSE wire protocol, as far as this lab speaks it. Layouts follow
// include/uapi/linux/fuse.h (protocol 7.38, the version we answer INIT with);
// every structure is 64-bit aligned and in host byte order.

import (
	"encoding/binary"
	"errors"
	"strconv"
)

var ne = binary.NativeEndian

// Protocol version we implement. The kernel offers its own (7.44 or so on
// 6.18) in INIT; we answer min(kernel, ours), so the kernel lays out every
// structure the 7.38 way.
const (
	kernelVersion      = 7
	kernelMinorVersion = 38
)

// Opcodes (enum fuse_opcode).
const (
	opLookup      = 1
	opForget      = 2 // no reply
	opGetattr     = 3
	opSetattr     = 4
	opOpen        = 14
	opRead        = 15
	opWrite       = 16
	opStatfs      = 17
	opRelease     = 18
	opGetxattr    = 22
	opListxattr   = 23
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opAccess      = 34
	opCreate      = 35
	opInterrupt   = 36 // no reply (unless EAGAIN)
	opDestroy     = 38
	opBatchForget = 42 // no reply
)

var opNames = map[uint32]string{
	opLookup: "LOOKUP", opForget: "FORGET", opGetattr: "GETATTR", opSetattr: "SETATTR",
	opOpen: "OPEN", opRead: "READ", opWrite: "WRITE", opStatfs: "STATFS", opRelease: "RELEASE",
	opGetxattr: "GETXATTR", opListxattr: "LISTXATTR", opFlush: "FLUSH", opInit: "INIT",
	opOpendir: "OPENDIR", opReaddir: "READDIR", opReleasedir: "RELEASEDIR", opAccess: "ACCESS",
	opCreate: "CREATE", opInterrupt: "INTERRUPT", opDestroy: "DESTROY", opBatchForget: "BATCH_FORGET",
}

func opName(op uint32) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return "op" + strconv.FormatUint(uint64(op), 10)
}

// SETATTR valid bits (FATTR_*).
const (
	fattrMode = 1 << 0
	fattrSize = 1 << 3
)

const rootID = 1 // FUSE_ROOT_ID

// Sizes of the wire structures (protocol 7.38 layout); TestWireSizes holds
// the encoders to them.
const (
	inHeaderSize  = 40 // struct fuse_in_header
	outHeaderSize = 16 // struct fuse_out_header
	attrSize      = 88 // struct fuse_attr
	entryOutSize  = 40 + attrSize
	attrOutSize   = 16 + attrSize
	openOutSize   = 16 // struct fuse_open_out
	initOutSize   = 64 // struct fuse_init_out (minor >= 23)
	kstatfsSize   = 80 // struct fuse_kstatfs
	writeInSize   = 40 // struct fuse_write_in (minor >= 9)
	readInSize    = 40 // struct fuse_read_in
	createInSize  = 16 // struct fuse_create_in (minor >= 12)
	setattrInSize = 88 // struct fuse_setattr_in
	direntHdrSize = 24 // struct fuse_dirent without its name
	interruptIn   = 8  // struct fuse_interrupt_in
)

// maxWrite is the largest WRITE payload we accept (max_write in INIT); the
// read buffer must hold it plus the headers. 1 MiB + a page is plenty, and
// far above FUSE_MIN_READ_BUFFER (8 KiB).
const (
	maxWrite       = 128 << 10
	readBufferSize = 1<<20 + 4096
)

// inHeader is struct fuse_in_header.
type inHeader struct {
	Len         uint32
	Opcode      uint32
	Unique      uint64
	NodeID      uint64
	UID, GID    uint32
	PID         uint32 // the requesting task (thread id in the mount's pid namespace); 0 for background requests
	TotalExtlen uint16 // length of trailing extensions, in 8-byte units
}

var errShort = errors.New("short request")

func parseInHeader(b []byte) (inHeader, error) {
	if len(b) < inHeaderSize {
		return inHeader{}, errShort
	}
	h := inHeader{
		Len:         ne.Uint32(b[0:]),
		Opcode:      ne.Uint32(b[4:]),
		Unique:      ne.Uint64(b[8:]),
		NodeID:      ne.Uint64(b[16:]),
		UID:         ne.Uint32(b[24:]),
		GID:         ne.Uint32(b[28:]),
		PID:         ne.Uint32(b[32:]),
		TotalExtlen: ne.Uint16(b[36:]),
	}
	if int(h.Len) > len(b) || h.Len < inHeaderSize {
		return h, errShort
	}
	return h, nil
}

// attr is the part of struct fuse_attr we keep per node.
type attr struct {
	ino, size uint64
	mode      uint32
	nlink     uint32
	mtime     uint64
}

func appendAttr(b []byte, a attr) []byte {
	b = ne.AppendUint64(b, a.ino)
	b = ne.AppendUint64(b, a.size)
	b = ne.AppendUint64(b, (a.size+511)/512) // blocks
	b = ne.AppendUint64(b, a.mtime)          // atime
	b = ne.AppendUint64(b, a.mtime)          // mtime
	b = ne.AppendUint64(b, a.mtime)          // ctime
	b = ne.AppendUint32(b, 0)                // atimensec
	b = ne.AppendUint32(b, 0)                // mtimensec
	b = ne.AppendUint32(b, 0)                // ctimensec
	b = ne.AppendUint32(b, a.mode)
	b = ne.AppendUint32(b, a.nlink)
	b = ne.AppendUint32(b, 0)    // uid
	b = ne.AppendUint32(b, 0)    // gid
	b = ne.AppendUint32(b, 0)    // rdev
	b = ne.AppendUint32(b, 4096) // blksize
	b = ne.AppendUint32(b, 0)    // flags
	return b
}

// Cache lifetimes we hand the kernel for entries and attributes (1 s, like
// libfuse's default): short enough that the kernel keeps asking, so the
// daemon stays visibly in the loop, long enough not to flood it.
const validSec = 1

func appendEntryOut(b []byte, a attr) []byte {
	b = ne.AppendUint64(b, a.ino) // nodeid
	b = ne.AppendUint64(b, 1)     // generation
	b = ne.AppendUint64(b, validSec)
	b = ne.AppendUint64(b, validSec)
	b = ne.AppendUint32(b, 0)
	b = ne.AppendUint32(b, 0)
	return appendAttr(b, a)
}

func appendAttrOut(b []byte, a attr) []byte {
	b = ne.AppendUint64(b, validSec)
	b = ne.AppendUint32(b, 0)
	b = ne.AppendUint32(b, 0)
	return appendAttr(b, a)
}

const (
	fopenKeepCache = 1 << 1 // FOPEN_KEEP_CACHE
	fopenNoFlush   = 1 << 5 // FOPEN_NOFLUSH
)

func appendOpenOut(b []byte, fh uint64) []byte {
	b = ne.AppendUint64(b, fh)
	// No FOPEN_DIRECT_IO: writes take the page-cache path
	// (fuse_cache_write_iter), the one that holds i_rwsem across the WRITE
	// request.
	// FOPEN_KEEP_CACHE: without it fuse_open invalidates the page cache
	// (invalidate_inode_pages2), which sleeps on the folio the offender
	// keeps locked across its WRITE (fuse_fill_write_pages leaves a
	// partially written, not uptodate folio locked until the reply). The
	// victims would then wait in __folio_lock at open(2), never reaching
	// the i_rwsem.
	// FOPEN_NOFLUSH: before 6.x's rework, fuse_flush took inode_lock, so a
	// victim's shell, closing the fd it dup2'ed before writing, blocked in
	// fuse_flush (seen on Debian's 6.1) instead of in the write path.
	b = ne.AppendUint32(b, fopenKeepCache|fopenNoFlush)
	b = ne.AppendUint32(b, 0)
	return b
}

// appendDirent appends one struct fuse_dirent, padded to 8 bytes.
func appendDirent(b []byte, ino, off uint64, typ uint32, name string) []byte {
	b = ne.AppendUint64(b, ino)
	b = ne.AppendUint64(b, off)
	b = ne.AppendUint32(b, uint32(len(name)))
	b = ne.AppendUint32(b, typ)
	b = append(b, name...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

func direntSize(name string) int { return (direntHdrSize + len(name) + 7) &^ 7 }

// cstring returns b up to its first NUL.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
