package hist

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"
)

// FromBPF decodes a struct wolf_hist (bpf/include/wolf.h) read from a BPF
// map. bpf2go generates one Go type for it in every package whose programs
// use it (softirqWolfHist, schedWolfHist, …), and Go converts between none
// of them: each carries its own package's blank HostLayout field. They
// share one layout, Log2's, which FromBPF checks once per type (and panics
// on a type that is not a struct wolf_hist: a programming error) before it
// reads v as a Log2.
func FromBPF[T any](v *T) Log2 {
	checkLayout(reflect.TypeFor[T]())
	h := *(*Log2)(unsafe.Pointer(v))
	if h.Count == 0 { // a histogram that only fills its slots
		for _, c := range h.Slots {
			h.Count += c
		}
	}
	return h
}

var layoutOK sync.Map // reflect.Type → true, once checked

func checkLayout(t reflect.Type) {
	if _, ok := layoutOK.Load(t); ok {
		return
	}
	want := reflect.TypeFor[Log2]()
	if t.Kind() != reflect.Struct || t.Size() != want.Size() {
		panic(fmt.Sprintf("hist.FromBPF: %v is not a struct wolf_hist (%d bytes, want %d)", t, t.Size(), want.Size()))
	}
	for i := range want.NumField() {
		w := want.Field(i)
		f, ok := t.FieldByName(w.Name)
		if !ok || f.Type != w.Type || f.Offset != w.Offset {
			panic(fmt.Sprintf("hist.FromBPF: %v is not a struct wolf_hist (field %s)", t, w.Name))
		}
	}
	layoutOK.Store(t, true)
}
