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
