// Package bpfrec decodes what BPF programs hand to user space: fixed-size
// records from a BPF iterator's stream or a ring buffer, and the C strings
// (comm, names) inside them. Every investigator reads these the same way.
package bpfrec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
)

// Decode reads one record of type T (a bpf2go-generated struct) from raw,
// in the machine's byte order, as the kernel wrote it.
func Decode[T any](raw []byte) (T, error) {
	var v T
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &v); err != nil {
		return v, fmt.Errorf("decode %T record: %w", v, err)
	}
	return v, nil
}

// ReadAll reads records of type T back to back until EOF, as a BPF
// iterator program writes them with bpf_seq_write. A partial record at the
// end is an error, with the whole records read before it.
func ReadAll[T any](r io.Reader) ([]T, error) {
	var zero T
	size := binary.Size(zero)
	if size <= 0 {
		return nil, fmt.Errorf("%T has no fixed size", zero)
	}
	buf := make([]byte, size)
	var out []T
	for {
		if _, err := io.ReadFull(r, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("read %T records: %w", zero, err)
		}
		v, err := Decode[T](buf)
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
}

// CString turns a fixed-size C char array (int8 in bpf2go's structs) into
// a string, ending at the first NUL.
func CString(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	s := make([]byte, n)
	for i := range n {
		s[i] = byte(b[i])
	}
	return string(s)
}

// SumPerCPU reads entry key of a per-CPU map of u64 counters and adds up
// the CPUs' copies.
func SumPerCPU(m *ebpf.Map, key uint32) (uint64, error) {
	var per []uint64
	if err := m.Lookup(key, &per); err != nil {
		return 0, fmt.Errorf("read counter %d of %s: %w", key, m, err)
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum, nil
}

// Counters reads a per-CPU array of u64 counters whose entries are named,
// in order, by names (the BPF side's enum), summed over the CPUs.
func Counters(m *ebpf.Map, names []string) (map[string]uint64, error) {
	out := make(map[string]uint64, len(names))
	for i, n := range names {
		v, err := SumPerCPU(m, uint32(i))
		if err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, nil
}
