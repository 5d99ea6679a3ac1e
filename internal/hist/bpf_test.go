package hist

import (
	"path/filepath"
	"reflect"
	"strings"
	"structs"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// bpfHist is what bpf2go generates for struct wolf_hist in each package.
type bpfHist struct {
	_     structs.HostLayout
	Slots [65]uint64
	Count uint64
	Sum   uint64
	Max   struct {
		_   structs.HostLayout
		V   [2]uint64
		Win [2]uint32
		Tag [2]uint32
	}
}

func TestFromBPF(t *testing.T) {
	v := bpfHist{Count: 3, Sum: 12}
	v.Slots[2], v.Slots[3] = 1, 2
	// Window 5's maximum in slot 1; slot 0 still holds window 2's.
	v.Max.V, v.Max.Win = [2]uint64{9, 7}, [2]uint32{2, 5}
	h := FromBPF(&v, 5)
	if h.Slots[2] != 1 || h.Slots[3] != 2 || h.Count != 3 || h.Sum != 12 || h.Max != 7 {
		t.Errorf("FromBPF = %+v", h)
	}
	if h := FromBPF(&v, 4); h.Max != 0 {
		t.Errorf("window 4 had no value, max %d", h.Max)
	}
	v.Count = 0 // slots only: the count is theirs
	if h := FromBPF(&v, 5); h.Count != 3 {
		t.Errorf("count %d from slots, want 3", h.Count)
	}
	defer func() {
		if recover() == nil {
			t.Error("a struct that is not a wolf_hist was read as one")
		}
	}()
	type other struct {
		Slots [65]uint64
		Sum   uint64
		Count uint64
		Max   struct {
			V   [2]uint64
			Win [2]uint32
			Tag [2]uint32
		}
	}
	FromBPF(&other{}, 0)
}

// Every BPF object that keeps a struct wolf_hist lays it out as FromBPF
// reads it: checked in the objects' BTF, which is what the kernel reads.
func TestWolfHistLayoutInObjects(t *testing.T) {
	objs, _ := filepath.Glob("../*/*_bpfel.o")
	seen := 0
	for _, o := range objs {
		spec, err := ebpf.LoadCollectionSpec(o)
		if err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		var st *btf.Struct
		if err := spec.Types.TypeByName("wolf_hist", &st); err != nil {
			continue // the object keeps no histogram
		}
		seen++
		checkStruct(t, o, st, reflect.TypeFor[wire]())
	}
	if seen < 4 {
		t.Errorf("struct wolf_hist found in %d objects (of %v), want softirq, sched, reclaim and locks", seen, objs)
	}
}

// checkStruct compares a BTF struct with a Go struct, member by member
// and into nested structs.
func checkStruct(t *testing.T, o string, st *btf.Struct, want reflect.Type) {
	t.Helper()
	if st.Size != uint32(want.Size()) || len(st.Members) != want.NumField() {
		t.Errorf("%s: struct %s is %d bytes with %d members; Go %d bytes, %d fields", o, st.Name, st.Size, len(st.Members), want.Size(), want.NumField())
		return
	}
	for i, m := range st.Members {
		f := want.Field(i)
		if !strings.EqualFold(m.Name, f.Name) || uint64(m.Offset.Bytes()) != uint64(f.Offset) {
			t.Errorf("%s: member %d of %s is %s at %d, Go has %s at %d", o, i, st.Name, m.Name, m.Offset.Bytes(), f.Name, f.Offset)
		}
		if inner, ok := btf.UnderlyingType(m.Type).(*btf.Struct); ok && f.Type.Kind() == reflect.Struct {
			checkStruct(t, o, inner, f.Type)
		}
	}
}
