package fusestall

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestWireSizes holds the encoders to the sizes of include/uapi/linux/fuse.h.
func TestWireSizes(t *testing.T) {
	a := attr{ino: 2, size: 5, mode: unix.S_IFREG | 0o644, nlink: 1}
	s := newServer(-1, kindRWSem, t.Logf)
	for _, c := range []struct {
		name string
		got  int
		want int
	}{
		{"fuse_attr", len(appendAttr(nil, a)), attrSize},
		{"fuse_entry_out", len(appendEntryOut(nil, a)), entryOutSize},
		{"fuse_attr_out", len(appendAttrOut(nil, a)), attrOutSize},
		{"fuse_open_out", len(appendOpenOut(nil, 1)), openOutSize},
		{"fuse_statfs_out", len(statfsOut()), kstatfsSize},
		{"fuse_write_out", len(writeOut(3)), 8},
		{"fuse_dirent data", len(appendDirent(nil, 2, 1, 8, "data")), direntSize("data")},
		{"fuse_out_header", len(packReply(1, 0, nil)), outHeaderSize},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, c.got, c.want)
		}
	}
	if direntSize("data") != 32 || direntSize("12345678") != 32 || direntSize("123456789") != 40 {
		t.Errorf("direntSize not 8-aligned: %d %d", direntSize("data"), direntSize("123456789"))
	}

	// INIT: 7.45 offered, 7.38 answered, no flags granted.
	in := make([]byte, inHeaderSize+64)
	ne.PutUint32(in[0:], uint32(len(in)))
	ne.PutUint32(in[4:], opInit)
	ne.PutUint64(in[8:], 7)
	ne.PutUint32(in[inHeaderSize:], 7)
	ne.PutUint32(in[inHeaderSize+4:], 45)
	ne.PutUint32(in[inHeaderSize+12:], 0xffffffff)
	h, err := parseInHeader(in)
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := s.handleInit(h, in[inHeaderSize:])
	if len(reply) != outHeaderSize+initOutSize {
		t.Fatalf("INIT reply %d bytes, want %d", len(reply), outHeaderSize+initOutSize)
	}
	out := reply[outHeaderSize:]
	if ne.Uint32(out[0:]) != 7 || ne.Uint32(out[4:]) != kernelMinorVersion || ne.Uint32(out[12:]) != 0 {
		t.Errorf("INIT reply: major %d minor %d flags %#x", ne.Uint32(out[0:]), ne.Uint32(out[4:]), ne.Uint32(out[12:]))
	}
	if ne.Uint32(out[20:]) != maxWrite {
		t.Errorf("INIT max_write %d", ne.Uint32(out[20:]))
	}

	// READDIR lists ., .., data with increasing offsets, and resumes.
	all := s.readdir(0, 4096)
	if len(all) != 3*32 {
		t.Fatalf("readdir: %d bytes, want 96", len(all))
	}
	if rest := s.readdir(2, 4096); len(rest) != 32 || string(rest[24:28]) != "data" {
		t.Errorf("readdir from 2: %q", rest)
	}
}
