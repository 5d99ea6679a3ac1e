// Package perfsample attaches a BPF perf_event program to a CPU-clock
// sampling event on every online CPU, the way `perf record -F 99 -a` samples,
// so investigators can keep kernel stacks only in the moments they care about
// (a thread holding its mmap_lock, a CPU inside NET_RX).
package perfsample

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Sampler holds one link per CPU; Close detaches them all. The kernel
// drops the events with the links, so a killed wolf leaves nothing behind.
type Sampler struct {
	links []link.Link
	CPUs  []int
}

// Attach opens a software CPU-clock event sampling freqHz times a second on
// each online CPU and runs prog (of type PerfEvent) on every sample.
func Attach(prog *ebpf.Program, freqHz int) (*Sampler, error) {
	if prog == nil {
		return nil, errors.New("perfsample: no program")
	}
	if freqHz <= 0 || freqHz > 10000 {
		return nil, fmt.Errorf("perfsample: frequency %d Hz out of range (1..10000)", freqHz)
	}
	cpus, err := OnlineCPUs()
	if err != nil {
		return nil, err
	}
	s := &Sampler{CPUs: cpus}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: uint64(freqHz),
			Bits:   unix.PerfBitFreq,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			s.Close()
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				return nil, fmt.Errorf("perfsample: perf_event_open on CPU %d: %w (kernel.perf_event_paranoid or missing CAP_PERFMON)", cpu, err)
			}
			return nil, fmt.Errorf("perfsample: perf_event_open on CPU %d: %w", cpu, err)
		}
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
		// The link holds its own reference to the event.
		_ = unix.Close(fd)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("perfsample: attach to CPU %d's clock: %w", cpu, err)
		}
		s.links = append(s.links, l)
	}
	return s, nil
}

// Close detaches every CPU's program and closes its event. The links are
// released side by side: each waits for an RCU-tasks grace period, and
// waiting for them one after another would add those waits up.
func (s *Sampler) Close() {
	var wg sync.WaitGroup
	for _, l := range s.links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.Close()
		}()
	}
	wg.Wait()
	s.links = nil
}

// OnlineCPUs lists the online CPUs (/sys/devices/system/cpu/online,
// "0-3,6"); without sysfs it falls back to 0..NumCPU-1.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		cpus := make([]int, runtime.NumCPU())
		for i := range cpus {
			cpus[i] = i
		}
		return cpus, nil
	}
	return ParseCPUList(strings.TrimSpace(string(b)))
}

// ParseCPUList parses the kernel's CPU list format ("0-3,6,8-9").
func ParseCPUList(s string) ([]int, error) {
	var cpus []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
