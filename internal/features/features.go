// Package features answers "what does this kernel let wolf do, and if not,
// why not?" for `wolf check` and for investigators deciding at run time how
// to watch (ARCHITECTURE.md#degrade-and-say-so).
//
// Each probe tries the real thing where it can (loads and attaches a tiny
// BPF program, opens a perf event) rather than guessing from the kernel
// version, because configs, lockdown and backports make version checks lie:
// on the lab machine fentry is compiled in yet refused, and kprobes are
// simply not built. A probe that is not available says why in Detail
// ("CONFIG_KPROBES is not set in this kernel (/proc/config.gz)"); one that
// is available puts a useful value there.
//
// Probes are cached once per process: the answer does not change while
// wolf runs, and probes cost BPF loads. Every probe runs under a timeout and
// closes whatever it loaded or attached before it returns, so probing never
// leaves anything attached, even when the caller gave up waiting.
package features

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultTimeout bounds each probe.
const DefaultTimeout = 10 * time.Second

// Status is the answer of one probe.
type Status struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Detail says why not, in plain words, when Available is false, and a
	// useful value (a path, a setting) when it is true.
	Detail string `json:"detail,omitempty"`
}

func (s Status) String() string {
	word := "no"
	if s.Available {
		word = "yes"
	}
	if s.Detail == "" {
		return s.Name + ": " + word
	}
	return s.Name + ": " + word + " — " + s.Detail
}

// probeFunc returns a detail when the feature is available, or an error
// whose text is the plain-words reason when it is not.
type probeFunc func(ctx context.Context) (detail string, err error)

// fixed are the probes with fixed names.
var fixed = map[string]probeFunc{
	"btf":                probeBTF,
	"tracefs":            probeTracefs,
	"raw_tracepoint":     probeRawTracepoint,
	"tp_btf":             probeTPBTF,
	"perf_event":         probePerfEvent,
	"uprobes":            probeUprobes,
	"kprobes":            probeKprobes,
	"fentry":             probeFentry,
	"ringbuf":            probeRingbuf,
	"task_iter":          probeTaskIter,
	"task_file_iter":     probeTaskFileIter,
	"bpf_get_task_stack": probeGetTaskStack,
	"bpf_stats":          probeBPFStats,
	"psi":                probePSI,
	"cgroup_v1":          probeCgroupV1,
	"cgroup_v2":          probeCgroupV2,
	"hung_task_detector": probeHungTask,
	"task_blocker":       probeTaskBlocker,
}

// Families are the parameterised probe names, as patterns.
var Families = []string{"tracepoint:GROUP/NAME", "sysctl:NAME", "config:CONFIG_NAME"}

// Names lists the fixed probes, sorted. The families in Families come on
// top (e.g. "tracepoint:sched/sched_switch").
func Names() []string {
	names := make([]string, 0, len(fixed))
	for n := range fixed {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// lookup resolves a probe name, fixed or parameterised.
func lookup(name string) (probeFunc, error) {
	if fn, ok := fixed[name]; ok {
		return fn, nil
	}
	family, arg, ok := strings.Cut(name, ":")
	if ok && arg != "" {
		switch family {
		case "tracepoint":
			group, event, ok := strings.Cut(arg, "/")
			if !ok || group == "" || event == "" || strings.ContainsAny(event, "/") {
				return nil, fmt.Errorf("probe %q: want tracepoint:GROUP/NAME", name)
			}
			return func(ctx context.Context) (string, error) { return probeTracepoint(ctx, group, event) }, nil
		case "sysctl":
			return func(ctx context.Context) (string, error) { return probeSysctl(arg) }, nil
		case "config":
			return func(ctx context.Context) (string, error) { return probeConfig(arg) }, nil
		}
	}
	return nil, fmt.Errorf("unknown probe %q (known: %s, and %s)", name, strings.Join(Names(), ", "), strings.Join(Families, ", "))
}

// prober runs probes and caches their answers. The package has one; tests
// build their own with fake probes.
type prober struct {
	lookup  func(string) (probeFunc, error)
	timeout time.Duration
	cache   sync.Map // name -> *entry
}

type entry struct {
	mu   sync.Mutex // held while the probe runs: one run per name at a time
	done bool
	st   Status
}

var std = &prober{lookup: lookup, timeout: DefaultTimeout}

// Probe reports whether the named feature is available, running its probe
// the first time and answering from the cache afterwards. Names are those
// of Names and the families in Families. Results cut short because ctx
// ended are not cached; a probe that exceeds DefaultTimeout is reported
// unavailable and that is cached.
func Probe(ctx context.Context, name string) Status { return std.probe(ctx, name) }

// ProbeAll probes every name (all of Names when names is nil), a few at a
// time, and returns the answers in the order asked.
func ProbeAll(ctx context.Context, names []string) []Status { return std.probeAll(ctx, names) }

func (p *prober) probe(ctx context.Context, name string) Status {
	fn, err := p.lookup(name)
	if err != nil {
		return Status{Name: name, Detail: err.Error()}
	}
	v, _ := p.cache.LoadOrStore(name, &entry{})
	e := v.(*entry)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return e.st
	}
	st, cacheable := p.run(ctx, name, fn)
	if cacheable {
		e.done, e.st = true, st
	}
	return st
}

// run runs fn in a goroutine bounded by the timeout. If the timeout fires
// the goroutine is abandoned; it still closes what it opened when (if) the
// kernel returns.
func (p *prober) run(ctx context.Context, name string, fn probeFunc) (Status, bool) {
	pctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	type result struct {
		detail string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- result{err: fmt.Errorf("probe panicked: %v", r)}
			}
		}()
		d, err := fn(pctx)
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			if ctx.Err() != nil {
				return Status{Name: name, Detail: "probe interrupted: " + ctx.Err().Error()}, false
			}
			return Status{Name: name, Detail: r.err.Error()}, true
		}
		return Status{Name: name, Available: true, Detail: r.detail}, true
	case <-pctx.Done():
		if ctx.Err() != nil {
			return Status{Name: name, Detail: "probe interrupted: " + ctx.Err().Error()}, false
		}
		return Status{Name: name, Detail: fmt.Sprintf("probe did not finish within %v (the kernel may be stuck in it)", p.timeout)}, true
	}
}

func (p *prober) probeAll(ctx context.Context, names []string) []Status {
	if names == nil {
		names = Names()
	}
	names = slices.Clone(names)
	out := make([]Status, len(names))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = p.probe(ctx, n)
		}()
	}
	wg.Wait()
	return out
}

// joinReasons joins non-empty reasons with "; ".
func joinReasons(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
