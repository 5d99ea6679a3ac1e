package bpfrec

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

type rec struct {
	A    uint32
	B    uint64
	Comm [8]int8
}

func TestReadAllAndDecode(t *testing.T) {
	var buf bytes.Buffer
	for i := range 3 {
		r := rec{A: uint32(i), B: uint64(i) << 40}
		copy(r.Comm[:], []int8{'s', 'h', 0, 'x'})
		if err := binary.Write(&buf, binary.NativeEndian, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadAll[rec](bytes.NewReader(buf.Bytes()))
	if err != nil || len(got) != 3 || got[2].B != 2<<40 || CString(got[1].Comm[:]) != "sh" {
		t.Fatalf("%+v, %v", got, err)
	}
	// A torn last record is an error, with what came before it.
	got, err = ReadAll[rec](bytes.NewReader(buf.Bytes()[:buf.Len()-3]))
	if err == nil || len(got) != 2 || !strings.Contains(err.Error(), "rec") {
		t.Fatalf("torn: %d records, %v", len(got), err)
	}
	if _, err := Decode[rec]([]byte{1, 2}); err == nil {
		t.Fatal("short record decoded")
	}
	full := [4]int8{'a', 'b', 'c', 'd'}
	if CString(full[:]) != "abcd" || CString(nil) != "" {
		t.Fatal("CString")
	}
}
