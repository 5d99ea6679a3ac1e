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

// Sampler holds one attachment per CPU; Close detaches them all. The
// kernel drops the events with wolf's file descriptors, so a killed wolf
// leaves nothing behind.
type Sampler struct {
	links []link.Link
	// fds are the events the program was attached to by ioctl, on kernels
	// without BPF links for perf events (before 5.15).
	fds  []int
	CPUs []int
	// Legacy says the program was attached by PERF_EVENT_IOC_SET_BPF.
	Legacy bool
}

// Attach opens a software CPU-clock event sampling freqHz times a second on
// each online CPU and runs prog (of type PerfEvent) on every sample. It
// attaches through a BPF link where the kernel has them (5.15+), else
// through PERF_EVENT_IOC_SET_BPF on the event.
func Attach(prog *ebpf.Program, freqHz int) (*Sampler, error) {
	return attach(prog, freqHz, true)
}

func attach(prog *ebpf.Program, freqHz int, links bool) (*Sampler, error) {
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
		if links && !s.Legacy {
			l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
			if err == nil {
				// The link holds its own reference to the event.
				_ = unix.Close(fd)
				s.links = append(s.links, l)
				continue
			}
			// Only a kernel without perf-event links (EINVAL: no such
			// attach type) falls back; anything else is an error.
			if !errors.Is(err, unix.EINVAL) || len(s.links) > 0 {
				_ = unix.Close(fd)
				s.Close()
				return nil, fmt.Errorf("perfsample: attach to CPU %d's clock: %w", cpu, err)
			}
		}
		s.Legacy = true
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
			_ = unix.Close(fd)
			s.Close()
			return nil, fmt.Errorf("perfsample: attach to CPU %d's clock (ioctl PERF_EVENT_IOC_SET_BPF, the kernel has no perf-event links): %w", cpu, err)
		}
		s.fds = append(s.fds, fd)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			s.Close()
			return nil, fmt.Errorf("perfsample: enable CPU %d's clock: %w", cpu, err)
		}
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
	for _, fd := range s.fds {
		// Disabled first: the program stops running at once, not when the
		// last reference to the event goes.
		_ = unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
		_ = unix.Close(fd)
	}
	s.fds = nil
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
