package buildinfo

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Object is one BPF ELF object compiled into the binary.
type Object struct {
	Source string `json:"source"` // the .bpf.c it was built from, e.g. hung.bpf.c
	File   string `json:"file"`   // the object's name as bpf2go writes it, e.g. hung_bpfel.o
	Size   int    `json:"size_bytes"`
	SHA256 string `json:"sha256"`
}

// Objects lists the BPF objects embedded in the executable at path
// (os.Executable for the running wolf).
//
// They are found in the binary itself rather than in a table kept beside
// the code: bpf2go's //go:embed stores each object verbatim, so scanning
// for BPF ELF headers names exactly what this binary will load, however it
// was built (make release, go build, go install), and no generated list
// can go stale when a .bpf.c changes.
func Objects(path string) ([]Object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the executable to list its BPF objects: %w", err)
	}
	return scanObjects(b), nil
}

const (
	emBPF     = 247 // ELF e_machine of BPF objects
	elf64Ehdr = 64  // size of an ELF64 file header
	elf64Shdr = 64  // size of an ELF64 section header
)

// scanObjects finds every complete BPF ELF64 object in b. clang writes the
// section header table last, so an object ends where that table ends.
func scanObjects(b []byte) []Object {
	var out []Object
	magic := []byte("\x7fELF")
	for off := 0; ; {
		i := bytes.Index(b[off:], magic)
		if i < 0 {
			break
		}
		start := off + i
		off = start + len(magic)
		h := b[start:]
		if len(h) < elf64Ehdr || h[4] != 2 /* ELFCLASS64 */ {
			continue
		}
		var bo binary.ByteOrder
		var suffix string
		switch h[5] {
		case 1:
			bo, suffix = binary.LittleEndian, "el"
		case 2:
			bo, suffix = binary.BigEndian, "eb"
		default:
			continue
		}
		if bo.Uint16(h[18:]) != emBPF {
			continue
		}
		shoff := bo.Uint64(h[0x28:])
		shentsize := uint64(bo.Uint16(h[0x3a:]))
		shnum := uint64(bo.Uint16(h[0x3c:]))
		if shentsize != elf64Shdr || shnum == 0 || shoff < elf64Ehdr || shoff > uint64(len(h)) {
			continue
		}
		end := shoff + shnum*shentsize
		if end > uint64(len(h)) {
			continue
		}
		obj := h[:end]
		sum := sha256.Sum256(obj)
		src := sourceName(obj)
		out = append(out, Object{
			Source: src,
			File:   strings.TrimSuffix(src, ".bpf.c") + "_bpf" + suffix + ".o",
			Size:   len(obj),
			SHA256: hex.EncodeToString(sum[:]),
		})
		off = start + int(end)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Source != out[j].Source {
			return out[i].Source < out[j].Source
		}
		return out[i].SHA256 < out[j].SHA256
	})
	return out
}

// sourceName is the .bpf.c file named in the object's BTF line
// information (a NUL-terminated string such as "././hung.bpf.c"), or
// "unknown.bpf.c" for an object built without it.
func sourceName(obj []byte) string {
	const ext = ".bpf.c\x00"
	i := bytes.Index(obj, []byte(ext))
	if i < 0 {
		return "unknown.bpf.c"
	}
	begin := bytes.LastIndexByte(obj[:i], 0) + 1
	return filepath.Base(string(obj[begin : i+len(ext)-1]))
}
