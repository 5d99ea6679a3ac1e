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
	Max   uint64
}

func TestFromBPF(t *testing.T) {
	v := bpfHist{Count: 3, Sum: 12, Max: 7}
	v.Slots[2], v.Slots[3] = 1, 2
	h := FromBPF(&v)
	if h.Slots[2] != 1 || h.Slots[3] != 2 || h.Count != 3 || h.Sum != 12 || h.Max != 7 {
		t.Errorf("FromBPF = %+v", h)
	}
	v.Count = 0 // slots only: the count is theirs
	if h := FromBPF(&v); h.Count != 3 {
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
		Max   uint64
	}
	FromBPF(&other{})
}

// Every BPF object that keeps a struct wolf_hist lays it out as Log2 is
// laid out: checked in the objects' BTF, which is what the kernel reads.
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
		want := reflect.TypeFor[Log2]()
		if st.Size != uint32(want.Size()) || len(st.Members) != want.NumField() {
			t.Errorf("%s: struct wolf_hist is %d bytes with %d members; Log2 %d bytes, %d fields", o, st.Size, len(st.Members), want.Size(), want.NumField())
			continue
		}
		for i, m := range st.Members {
			f := want.Field(i)
			if !strings.EqualFold(m.Name, f.Name) || uint64(m.Offset.Bytes()) != uint64(f.Offset) {
				t.Errorf("%s: member %d is %s at %d, Log2 has %s at %d", o, i, m.Name, m.Offset.Bytes(), f.Name, f.Offset)
			}
		}
	}
	if seen < 4 {
		t.Errorf("struct wolf_hist found in %d objects (of %v), want softirq, sched, reclaim and locks", seen, objs)
	}
}
