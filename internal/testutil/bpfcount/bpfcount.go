// Package bpfcount is, for tests, the smallest BPF program that counts
// its own runs: an exact reference to hold wolf's counts against, with
// no object file to build. Nothing outside tests uses it.
package bpfcount

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Skip is the label that leaves a run uncounted: instructions passed to
// New jump to it to filter.
const Skip = "bpfcount_skip"

// Counter is a loaded program and its per-CPU count.
type Counter struct {
	Prog *ebpf.Program
	m    *ebpf.Map
}

// New loads a program of type typ that adds one to a per-CPU count each
// time it runs, after filter (which may jump to Skip; its registers are
// free, R1 holds the context). Both are closed when t ends; the caller
// attaches Prog.
func New(t testing.TB, typ ebpf.ProgramType, filter ...asm.Instruction) *Counter {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatalf("bpfcount: per-CPU array: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	insns := append(asm.Instructions{}, filter...)
	insns = append(insns,
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, Skip),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol(Skip),
		asm.Return(),
	)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: typ, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatalf("bpfcount: %v program: %v", typ, err)
	}
	t.Cleanup(func() { prog.Close() })
	return &Counter{Prog: prog, m: m}
}

// Count is the runs so far, every CPU's.
func (c *Counter) Count(t testing.TB) uint64 {
	t.Helper()
	var per []uint64
	if err := c.m.Lookup(uint32(0), &per); err != nil {
		t.Fatalf("bpfcount: read: %v", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}
