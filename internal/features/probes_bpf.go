package features

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	cfeatures "github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/sysctl"
	"github.com/wolf-investigator/wolf/internal/tracefs"
)

// removeMemlock lifts RLIMIT_MEMLOCK once per process. Kernels before 5.11
// charge BPF maps and programs to that limit (often 64 KiB or 8 MiB), and
// loads then fail with EPERM; newer kernels charge the memory cgroup, and
// cilium's RemoveMemlock detects that and does nothing.
var removeMemlock = sync.OnceValue(rlimit.RemoveMemlock)

// attachTarget is the kernel function the kprobe and fentry probes try. It
// is exported (so never inlined away) and on every kernel.
const attachTarget = "vfs_read"

// loadProbeProgram loads a program that returns 0, for probing only.
func loadProbeProgram(spec *ebpf.ProgramSpec) (*ebpf.Program, error) {
	if err := removeMemlock(); err != nil {
		return nil, fmt.Errorf("cannot lift the memlock limit BPF needs on this kernel: %w", err)
	}
	spec.License = "GPL"
	if spec.Instructions == nil {
		spec.Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	}
	return ebpf.NewProgramWithOptions(spec, ebpf.ProgramOptions{LogDisabled: true})
}

// plain makes an error from cilium/ebpf or the kernel readable: the errno
// is named, and cilium's memlock hint is dropped since the limit was lifted.
func plain(err error) string {
	msg := strings.Replace(err.Error(), " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", "", 1)
	var errno unix.Errno
	if errors.As(err, &errno) {
		msg += " (" + unix.ErrnoName(errno) + ")"
		if (errno == unix.EPERM || errno == unix.EACCES) && os.Geteuid() != 0 {
			msg += "; wolf is not running as root"
		}
	}
	return msg
}

// errnoText is the errno of err in words ("operation not permitted
// (EPERM)"), or plain(err) when it carries none.
func errnoText(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno.Error() + " (" + unix.ErrnoName(errno) + ")"
	}
	return plain(err)
}

func probeTracepoint(ctx context.Context, group, event string) (string, error) {
	root, err := tracefs.Ensure()
	if err != nil {
		return "", err
	}
	if !tracefs.HasEvent(group, event) {
		return "", fmt.Errorf("no tracepoint %s/%s in this kernel (%s/events/%s/%s does not exist)", group, event, root, group, event)
	}
	prog, err := loadProbeProgram(&ebpf.ProgramSpec{Type: ebpf.TracePoint})
	if err != nil {
		return "", fmt.Errorf("loading a tracepoint program failed: %s", plain(err))
	}
	defer prog.Close()
	l, err := link.Tracepoint(group, event, prog, nil)
	if err != nil {
		return "", fmt.Errorf("attaching to tracepoint %s/%s failed: %s", group, event, plain(err))
	}
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("detaching from tracepoint %s/%s failed: %s", group, event, plain(err))
	}
	return fmt.Sprintf("%s/events/%s/%s; a BPF program attached and detached", root, group, event), nil
}

func probeRawTracepoint(ctx context.Context) (string, error) {
	prog, err := loadProbeProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint})
	if err != nil {
		return "", fmt.Errorf("loading a raw_tracepoint program failed: %s", plain(err))
	}
	defer prog.Close()
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_switch", Program: prog})
	if err != nil {
		return "", fmt.Errorf("attaching a raw tracepoint to sched_switch failed: %s", plain(err))
	}
	l.Close()
	return "attached and detached on sched_switch", nil
}

func probeTPBTF(ctx context.Context) (string, error) {
	prog, err := loadProbeProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "sched_switch"})
	if err != nil {
		return "", fmt.Errorf("loading a tp_btf program for sched_switch failed: %s", plain(err))
	}
	defer prog.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		return "", fmt.Errorf("attaching a tp_btf program to sched_switch failed: %s", plain(err))
	}
	l.Close()
	return "attached and detached on sched_switch (typed arguments from BTF)", nil
}

func probePerfEvent(ctx context.Context) (string, error) {
	paranoid, _ := sysctl.Read("kernel.perf_event_paranoid")
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Bits:   unix.PerfBitDisabled | unix.PerfBitFreq,
		Sample: 49, // Hz; never enabled
	}
	attr.Size = uint32(unsafe.Sizeof(attr))
	// CPU-wide on CPU 0: what sampling every task needs.
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
		return fmt.Sprintf("software cpu-clock events open CPU-wide (kernel.perf_event_paranoid=%s)", paranoid), nil
	}
	reason := fmt.Sprintf("perf_event_open of a CPU-wide cpu-clock event refused: %s (kernel.perf_event_paranoid=%s)", plain(err), paranoid)
	if fd, err2 := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC); err2 == nil {
		unix.Close(fd)
		reason += "; only per-task events work"
	}
	return "", errors.New(reason)
}

func probeKprobes(ctx context.Context) (string, error) {
	var reasons []string
	if c, err := loadConfig(); err == nil && !c.Enabled("KPROBES") {
		reasons = append(reasons, c.Describe("KPROBES"))
	}
	const pmu = "/sys/bus/event_source/devices/kprobe/type"
	pmuType, pmuErr := os.ReadFile(pmu)
	if pmuErr != nil {
		reasons = append(reasons, "no kprobe PMU ("+pmu+": "+errnoText(pmuErr)+")")
	}
	// The decisive test: create one. cilium tries the kprobe PMU, then
	// tracefs kprobe_events.
	if _, err := tracefs.Ensure(); err != nil {
		reasons = append(reasons, err.Error())
	}
	prog, err := loadProbeProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe})
	if err != nil {
		reasons = append(reasons, "loading a kprobe program failed: "+plain(err))
		return "", errors.New(joinReasons(reasons...))
	}
	defer prog.Close()
	l, err := link.Kprobe(attachTarget, prog, nil)
	if err != nil {
		reasons = append(reasons, fmt.Sprintf("creating a kprobe on %s failed: %s", attachTarget, plain(err)))
		return "", errors.New(joinReasons(reasons...))
	}
	l.Close()
	detail := fmt.Sprintf("attached and detached a kprobe on %s", attachTarget)
	if pmuErr == nil {
		detail += fmt.Sprintf(" (kprobe PMU type %s)", strings.TrimSpace(string(pmuType)))
	}
	return detail, nil
}

func probeFentry(ctx context.Context) (string, error) {
	prog, err := loadProbeProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: attachTarget})
	if err != nil {
		return "", errors.New(joinReasons(
			fmt.Sprintf("fentry program load refused (target %s): %s", attachTarget, plain(err)),
			functionTracerReason()))
	}
	defer prog.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		return "", errors.New(joinReasons(
			fmt.Sprintf("fentry attach refused (target %s): %s", attachTarget, plain(err)),
			functionTracerReason()))
	}
	l.Close()
	return fmt.Sprintf("attached and detached an fentry program on %s (BPF trampolines work)", attachTarget), nil
}

// functionTracerReason explains why fentry cannot work when the function
// tracer (ftrace), which BPF trampolines patch through, is unusable; it is
// empty when nothing is found wrong.
func functionTracerReason() string {
	if c, err := loadConfig(); err == nil {
		for _, opt := range []string{"FUNCTION_TRACER", "DYNAMIC_FTRACE_WITH_DIRECT_CALLS"} {
			if !c.Enabled(opt) {
				return "the function tracer is not usable on this kernel: " + c.Describe(opt)
			}
		}
	}
	root, ok := tracefs.Find()
	if !ok {
		return ""
	}
	p := root + "/available_filter_functions"
	f, err := os.Open(p)
	if err != nil {
		return fmt.Sprintf("the function tracer is not usable on this kernel, although it is built in (opening %s: %s)", p, errnoText(err))
	}
	f.Close()
	return ""
}

func probeRingbuf(ctx context.Context) (string, error) {
	if err := removeMemlock(); err != nil {
		return "", fmt.Errorf("cannot lift the memlock limit BPF needs: %w", err)
	}
	if err := cfeatures.HaveMapType(ebpf.RingBuf); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return "", errors.New("BPF ring buffers are not supported by this kernel (they need Linux 5.8+); per-CPU perf buffers remain")
		}
		return "", fmt.Errorf("creating a BPF ring buffer failed: %s", plain(err))
	}
	return "BPF_MAP_TYPE_RINGBUF", nil
}

func probeTaskIter(ctx context.Context) (string, error) { return probeIter("task") }

// probeTaskFileIter: the iterator over every task's open files (5.8+).
func probeTaskFileIter(ctx context.Context) (string, error) { return probeIter("task_file") }

// probeIter loads, attaches, runs and closes an empty iterator of target.
func probeIter(target string) (string, error) {
	prog, err := loadProbeProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: target})
	if err != nil {
		return "", fmt.Errorf("loading an iter/%s program failed: %s", target, plain(err))
	}
	defer prog.Close()
	it, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		return "", fmt.Errorf("creating an iter/%s link failed: %s", target, plain(err))
	}
	defer it.Close()
	r, err := it.Open()
	if err != nil {
		return "", fmt.Errorf("opening the %s iterator failed: %s", target, plain(err))
	}
	_, err = io.Copy(io.Discard, r)
	r.Close()
	if err != nil {
		return "", fmt.Errorf("reading the %s iterator failed: %s", target, plain(err))
	}
	return "iter/" + target + " link created, run and closed", nil
}

func probeGetTaskStack(ctx context.Context) (string, error) {
	if err := removeMemlock(); err != nil {
		return "", fmt.Errorf("cannot lift the memlock limit BPF needs: %w", err)
	}
	if err := cfeatures.HaveProgramHelper(ebpf.TracePoint, asm.FnGetTaskStack); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return "", errors.New("the bpf_get_task_stack helper is not available to tracing programs on this kernel (it needs Linux 5.9+)")
		}
		return "", fmt.Errorf("probing the bpf_get_task_stack helper failed: %s", plain(err))
	}
	return "helper available to tracepoint programs", nil
}
