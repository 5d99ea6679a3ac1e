package hist

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"
)

// wire is struct wolf_hist (bpf/include/wolf.h) as the kernel lays it
// out: Log2's slots, count and sum, then the maximum as a struct wolf_max,
// kept per window (two slots, each stamped with its window's number).
type wire struct {
	Slots [Slots]uint64
	Count uint64
	Sum   uint64
	Max   struct {
		V   [2]uint64
		Win [2]uint32
		Tag [2]uint32
	}
}

// FromBPF decodes a struct wolf_hist read from a BPF map, with window w's
// maximum (0 when the window had no value). Its slots, count and sum are
// the map's, cumulative: subtract an earlier reading (Sub) for a window's.
//
// bpf2go generates one Go type for the struct in every package whose
// programs use it (softirqWolfHist, schedWolfHist, …), and Go converts
// between none of them: each carries its own package's blank HostLayout
// field. They share one layout, which FromBPF checks once per type (and
// panics on a type that is not a struct wolf_hist: a programming error)
// before it reads v.
func FromBPF[T any](v *T, w uint32) Log2 {
	checkLayout(reflect.TypeFor[T]())
	x := (*wire)(unsafe.Pointer(v))
	h := Log2{Slots: x.Slots, Count: x.Count, Sum: x.Sum}
	if s := w & 1; x.Max.Win[s] == w {
		h.Max = x.Max.V[s]
	}
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
	if !sameLayout(t, reflect.TypeFor[wire]()) {
		panic(fmt.Sprintf("hist.FromBPF: %v is not a struct wolf_hist", t))
	}
	layoutOK.Store(t, true)
}

// sameLayout says whether t is laid out as want: the same size, and want's
// fields in t by name, at the same offsets, laid out alike (blank fields,
// bpf2go's HostLayout markers, take no room and are not compared).
func sameLayout(t, want reflect.Type) bool {
	if t.Size() != want.Size() || t.Kind() != want.Kind() {
		return false
	}
	switch want.Kind() {
	case reflect.Struct:
		for i := range want.NumField() {
			w := want.Field(i)
			f, ok := t.FieldByName(w.Name)
			if !ok || f.Offset != w.Offset || !sameLayout(f.Type, w.Type) {
				return false
			}
		}
	case reflect.Array:
		return t.Len() == want.Len() && sameLayout(t.Elem(), want.Elem())
	}
	return true
}
