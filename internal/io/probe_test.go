package io

import (
	"bytes"
	"testing"

	"github.com/cilium/ebpf/btf"
)

// specOf is a BTF spec of types, as the kernel would ship them.
func specOf(t *testing.T, types ...btf.Type) *btf.Spec {
	t.Helper()
	b, err := btf.NewBuilder(types, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestQueueStatsBit(t *testing.T) {
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	flags := &btf.Enum{Size: 4, Values: []btf.EnumValue{
		{Name: "QUEUE_FLAG_DYING", Value: 0}, {Name: "QUEUE_FLAG_STATS", Value: 7}, {Name: "QUEUE_FLAG_MAX", Value: 17}}}
	// A named enum with the same enumerator name is not the kernel's.
	other := &btf.Enum{Name: "other", Size: 4, Values: []btf.EnumValue{{Name: "QUEUE_FLAG_STATS", Value: 3}}}
	if bit, ok := queueStatsBit(specOf(t, u32, other, flags)); !ok || bit != 7 {
		t.Errorf("queueStatsBit = %d, %v; want 7, true", bit, ok)
	}
	// 5.10 and 5.15 define the flags: nothing in BTF.
	if bit, ok := queueStatsBit(specOf(t, u32, other)); ok {
		t.Errorf("queueStatsBit without the enum = %d, true; want not found", bit)
	}
}

// A CPU's batch adds to the procs reading: its counts, bytes, sums and
// maxima, and both histograms from their slots.
func TestAddBatch(t *testing.T) {
	key := ioIoKey{Dev: 7 << 20, Tgid: 42, Cgid: 9}
	procs := map[ioIoKey]procRead{}
	addBatch(procs, &ioBatch{Key: key}) // empty: nothing
	if len(procs) != 0 {
		t.Fatalf("an empty batch added %v", procs)
	}
	b := ioBatch{Key: key, Count: 3, Timed: 2, Ops: [3]uint64{2, 0, 1}, Bytes: [3]uint64{8192, 0, 0},
		SumTotalNs: 30000, SumDeviceNs: 20000, MaxTotalNs: 20000, MaxDeviceNs: 15000}
	b.TotalSlots[15], b.DeviceSlots[15] = 1, 2 // 16384..32767 ns
	b.TotalSlots[14] = 1
	addBatch(procs, &b)
	addBatch(procs, &b)
	pr := procs[key]
	if pr.s.Ops != [3]uint64{4, 0, 2} || pr.s.Bytes[0] != 16384 {
		t.Errorf("ops %v bytes %v", pr.s.Ops, pr.s.Bytes)
	}
	if pr.total.Count != 4 || pr.total.Slots[15] != 2 || pr.total.Slots[14] != 2 || pr.total.Sum != 60000 || pr.total.Max != 20000 {
		t.Errorf("total %+v", pr.total)
	}
	if pr.device.Count != 4 || pr.device.Slots[15] != 4 || pr.device.Slots[14] != 0 || pr.device.Sum != 40000 || pr.device.Max != 15000 {
		t.Errorf("device %+v", pr.device)
	}
}
