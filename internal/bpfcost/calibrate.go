package bpfcost

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// trapTarget is the function the calibration probes: wolf's own, so the
// uprobe's registration touches no other process's mmap_lock (only
// processes running this binary map it, and the probe is filtered to
// this one).
//
//go:noinline
func trapTarget(x uint64) uint64 { return x*3 + 1 }

// trapTargetOffset is trapTarget's offset in this process's executable
// file, where a uprobe goes. It is found from the function's address at
// run time (test binaries have no symbol table): minus the load bias
// (AT_PHDR from /proc/self/auxv, which takes no lock, against the file's
// program headers), then from virtual address to file offset.
func trapTargetOffset() (uint64, error) {
	pc := uint64(reflect.ValueOf(trapTarget).Pointer())
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var bias uint64
	if f.Type == elf.ET_DYN { // PIE: loaded at a random base
		auxv, err := os.ReadFile("/proc/self/auxv")
		if err != nil {
			return 0, err
		}
		var phdr uint64
		for i := 0; i+16 <= len(auxv); i += 16 {
			if binary.LittleEndian.Uint64(auxv[i:]) == 3 { // AT_PHDR
				phdr = binary.LittleEndian.Uint64(auxv[i+8:])
			}
		}
		var phVaddr uint64
		found := false
		for _, p := range f.Progs {
			if p.Type == elf.PT_PHDR {
				phVaddr, found = p.Vaddr, true
			}
		}
		if phdr == 0 || !found {
			return 0, errors.New("no program headers to find the load address")
		}
		bias = phdr - phVaddr
	}
	vaddr := pc - bias
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("address %#x not in an executable segment", vaddr)
}

// calibrationCalls is how many probed calls one timing makes: a few
// milliseconds even where a trap costs tens of microseconds.
const calibrationCalls = 200

// sink keeps the timed loop's result, so that the calls are made.
var sink atomic.Uint64

// timeCalls is the best of three timings of n calls, per call.
func timeCalls(n int) time.Duration {
	best := time.Duration(1 << 62)
	for range 3 {
		x := uint64(1)
		t0 := time.Now()
		for range n {
			x = trapTarget(x)
		}
		best = min(best, time.Since(t0)/time.Duration(n))
		sink.Add(x)
	}
	return best
}

// CalibrateTrap measures what one uprobe hit costs on this machine outside
// the program: wolf attaches an empty program (two instructions) to a
// function of its own, filtered to its own pid, times calls to it with and
// without the probe, and detaches. The trap is what differs: the int3,
// the uprobe lookup, the single-step, the program's dispatch. It varies
// tenfold between bare metal and some hypervisors, which is why wolf
// measures it rather than assume the published 1.7 µs.
func CalibrateTrap() (time.Duration, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "wolf_trap_calib",
		Type:    ebpf.Kprobe,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		return 0, fmt.Errorf("calibration program: %w", err)
	}
	defer prog.Close()
	ex, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("calibration: %w", err)
	}
	off, err := trapTargetOffset()
	if err != nil {
		return 0, fmt.Errorf("calibration: locating the probed function: %w", err)
	}
	// One thread for both timings: the pid filter is per process, and a
	// migration between them would add noise.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bare := timeCalls(calibrationCalls)
	l, err := ex.Uprobe("trapTarget", prog, &link.UprobeOptions{PID: unix.Getpid(), Address: off})
	if err != nil {
		return 0, fmt.Errorf("calibration uprobe: %w", err)
	}
	probed := timeCalls(calibrationCalls)
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("calibration detach: %w", err)
	}
	if probed <= bare {
		return 0, errors.New("calibration: probed calls were not slower (probe did not fire?)")
	}
	return probed - bare, nil
}
