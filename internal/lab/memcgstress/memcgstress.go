// Package memcgstress is the lab for memory-cgroup reclaim at the limit,
// the stress_memcg of ClickHouse's "The case of the vanishing CPU" scaled to a 2-CPU machine: a memory cgroup with a
// small limit (256 MiB by default), a worker process inside it whose r_file
// threads map files nearly as large as the limit and read them page by page
// without end (phase 1), then whose r_memory threads touch anonymous memory
// at random, unmapping and mapping it again (phase 2). With no swap (the
// cgroup's swappiness or swap.max is set to 0, as ClickHouse runs), only
// file pages can go, and they are all being referenced: every new charge
// makes the charging thread reclaim in the cgroup, scanning pages that are
// often found referenced and kept or activated, while 64 threads share 2
// CPUs, so each reclaim call waits for the CPU.
//
// What it does on Linux 6.18 (classic LRU, per-VMA locks), measured: the
// cgroup hits its limit ~20,000 times a second, its threads make ~500
// reclaim calls a second that stall 1-2 threads on average and last up to
// 100-250 ms, and reclaim frees 40-50 % of the pages it scans. That is
// steady reclaim at the limit (wolf: warning), not the write-up's livelock
// (under 1 % freed, calls of seconds), which needed the COS kernels'
// reclaim under mmap_lock and 1000 threads per 4 CPUs.
//
// What it leaves behind, and when. Close stops the worker, waits for it and
// removes the cgroup; the files are unlinked as soon as they are mapped, so
// they vanish with the worker however it ends. A kill -9 of the lab kills
// the worker too (Pdeathsig), but leaves the empty cgroup directory
// (wolf-lab-memcg-PID) and the files directory (TMPDIR/wolf-memcg-PID-*,
// empty unless the worker was still writing its files). Both are in the
// lab's ledger (lab.Ledger), written before they are made: the next lab to
// start, or `wolf lab clean`, removes them once PID is dead.
//
// Safety on a shared machine: the worker can never use more than the
// cgroup's limit; the files use about as much disk, only while it runs. The
// worker exits on its own after MaxLife, should the lab vanish without
// killing it.
package memcgstress

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/sysctl"
)

// Config sizes the lab. Zero fields take the defaults.
type Config struct {
	LimitBytes  int64         // the cgroup's memory limit
	FileBytes   int64         // files the r_file threads map and read
	AnonBytes   int64         // anonymous memory the r_memory threads touch, all together
	FileSize    int           // bytes per file: small, so readahead brings in few pages nobody asked for
	FileThreads int           // r_file threads
	AnonThreads int           // r_memory threads (lab.Options.Victims overrides)
	Phase1      time.Duration // how long the r_file threads run alone
	Dir         string        // where the files are written; a disk, not tmpfs
	MaxLife     time.Duration // the worker exits after this long whatever happens
	// Populate makes the r_memory threads map with MAP_POPULATE: the
	// kernel then faults their pages in under the process's mmap_lock, so
	// their reclaim runs with it held, as faults did in the write-up's kernel
	// (on 6.18 an ordinary fault holds only the VMA's lock).
	Populate bool
}

// Defaults: 256 MiB limit, files 7/8 of it, anonymous memory 3/16, 32 + 32
// threads (the write-up ran 1000 + 1000 on 4 CPUs; 64 on 2 keep each CPU's run
// queue long enough that a reclaiming thread waits for its turn). The write-up's
// files were a page each; 16 KiB files reclaim alike here (about 45 % of
// the pages scanned are freed either way) but are a quarter as many inodes
// to create and, when the worker exits, to free: seconds, not tens.
var Defaults = Config{
	LimitBytes:  256 << 20,
	FileBytes:   224 << 20,
	AnonBytes:   48 << 20,
	FileSize:    16384,
	FileThreads: 32,
	AnonThreads: 32,
	Phase1:      2 * time.Second,
	MaxLife:     24 * time.Hour,
}

const (
	cgroupPrefix = "wolf-lab-memcg-"
	dirPrefix    = "wolf-memcg-"
	maxThreads   = 256
	stepTimeout  = 60 * time.Second
	tmpfsMagic   = 0x01021994
)

type memcgLab struct{ cfg Config }

// New returns the lab with the defaults.
func New() lab.Lab { return memcgLab{Defaults} }

// NewWithConfig returns the lab sized by c (zero fields: the defaults).
func NewWithConfig(c Config) lab.Lab {
	d := Defaults
	if c.LimitBytes > 0 {
		d.LimitBytes = c.LimitBytes
	}
	if c.FileBytes > 0 {
		d.FileBytes = c.FileBytes
	}
	if c.AnonBytes > 0 {
		d.AnonBytes = c.AnonBytes
	}
	if c.FileSize > 0 {
		d.FileSize = c.FileSize
	}
	if c.FileThreads > 0 {
		d.FileThreads = c.FileThreads
	}
	if c.AnonThreads > 0 {
		d.AnonThreads = c.AnonThreads
	}
	if c.Phase1 > 0 {
		d.Phase1 = c.Phase1
	}
	if c.Dir != "" {
		d.Dir = c.Dir
	}
	if c.MaxLife > 0 {
		d.MaxLife = c.MaxLife
	}
	d.Populate = c.Populate
	return memcgLab{d}
}

// NewPopulate is the lab named mmap-lock-reclaim: memcg-stress whose
// r_memory threads populate their mappings, reclaiming under mmap_lock.
func NewPopulate() lab.Lab {
	d := Defaults
	d.Populate = true
	return memcgLab{d}
}

func (l memcgLab) Name() string {
	if l.cfg.Populate {
		return "mmap-lock-reclaim"
	}
	return "memcg-stress"
}

func (l memcgLab) Summary() string {
	if l.cfg.Populate {
		return "memcg-stress whose anonymous mappings are populated under the mmap_lock: the cgroup's reclaim runs with the lock held (as in \"The case of the vanishing CPU\")"
	}
	return "a memory cgroup at its limit whose threads read mmap'd files and fault anonymous memory: reclaim scans hot pages and frees few (as in \"The case of the vanishing CPU\")"
}

// Instance is a running lab. Start returns it as a lab.Instance; type-assert
// to *Instance for the cgroup and the worker.
type Instance struct {
	cfg  Config
	logf func(string, ...any)
	h    memcg.Hierarchy

	cgPath string // relative to the hierarchy, "/wolf-lab-memcg-PID"
	dir    string // the files' directory
	led    *lab.Ledger
	pid    int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	done   chan struct{} // closed once the worker is reaped
	werr   error         // from Wait, valid after done
	stderr *capped

	mu        sync.Mutex
	phase     string
	closeOnce sync.Once
	closeErr  error
}

// Hierarchy is where the lab's cgroup lives.
func (in *Instance) Hierarchy() memcg.Hierarchy { return in.h }

// Cgroup is the lab's cgroup path within its hierarchy, as wolf reports it.
func (in *Instance) Cgroup() string { return in.cgPath }

// PID is the worker's process id.
func (in *Instance) PID() int { return in.pid }

// Config is the lab's sizing.
func (in *Instance) Config() Config { return in.cfg }

// Start creates the cgroup, starts the worker in it, and returns once both
// phases run and the cgroup has hit its limit. Options.Victims, when set,
// is the number of r_memory threads.
func (l memcgLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	cfg := l.cfg
	if opt.Victims > 0 {
		cfg.AnonThreads = opt.Victims
	}
	if cfg.FileThreads+cfg.AnonThreads > maxThreads || cfg.FileThreads < 1 || cfg.AnonThreads < 1 {
		return nil, fmt.Errorf("memcgstress: %d r_file + %d r_memory threads: want 1 to %d in all", cfg.FileThreads, cfg.AnonThreads, maxThreads)
	}
	if cfg.FileBytes+cfg.AnonBytes <= cfg.LimitBytes {
		return nil, fmt.Errorf("memcgstress: files %d MiB + anonymous %d MiB fit in the %d MiB limit: nothing would reclaim", cfg.FileBytes>>20, cfg.AnonBytes>>20, cfg.LimitBytes>>20)
	}
	if cfg.AnonBytes >= cfg.LimitBytes/2 {
		return nil, fmt.Errorf("memcgstress: anonymous %d MiB is half the %d MiB limit or more: the cgroup would OOM rather than reclaim", cfg.AnonBytes>>20, cfg.LimitBytes>>20)
	}
	if cfg.FileSize < pageSize || cfg.FileSize%pageSize != 0 {
		return nil, fmt.Errorf("memcgstress: file size %d: want a multiple of %d", cfg.FileSize, pageSize)
	}
	// One mapping per file; the runtime needs some more.
	if mmc, err := sysctl.ReadInt("vm.max_map_count"); err == nil && cfg.FileBytes/int64(cfg.FileSize) > mmc-4096 {
		return nil, fmt.Errorf("memcgstress: %d files of %d bytes need more mappings than vm.max_map_count (%d) allows: use larger files", cfg.FileBytes/int64(cfg.FileSize), cfg.FileSize, mmc)
	}
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	h, err := memcg.Find(ctx, procfs.Reader{})
	if err != nil {
		return nil, fmt.Errorf("memcgstress: %w", err)
	}
	in := &Instance{cfg: cfg, logf: logf, h: h, done: make(chan struct{}), lines: make(chan string, 16), stderr: &capped{max: 8 << 10}}
	close(in.done) // until a worker runs, there is none to wait for
	defer func() {
		if err != nil {
			if cerr := in.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	if in.led, err = lab.NewLedger(l.Name(), logf); err != nil {
		return nil, fmt.Errorf("memcgstress: %w", err)
	}
	if err := in.makeCgroup(); err != nil {
		return nil, err
	}
	if err := in.makeDir(); err != nil {
		return nil, err
	}
	if err := in.startWorker(ctx); err != nil {
		return nil, err
	}
	if err := in.waitLine(ctx, filesLine); err != nil {
		return nil, err
	}
	in.setPhase("phase 1: r_file threads read their mapped files")
	logf("memcgstress: phase 1, %d MiB of files mapped by %d r_file threads", cfg.FileBytes>>20, cfg.FileThreads)
	if err := in.waitLine(ctx, phase2Line); err != nil {
		return nil, err
	}
	in.setPhase("phase 2: r_memory threads fault anonymous memory; the cgroup reclaims")
	logf("memcgstress: phase 2, %d r_memory threads touch %d MiB", cfg.AnonThreads, cfg.AnonBytes>>20)
	before, err := h.Read(in.cgPath)
	if err != nil {
		return nil, fmt.Errorf("memcgstress: %w", err)
	}
	err = lab.WaitFor(ctx, stepTimeout, "the cgroup to hit its limit", func() (bool, error) {
		select {
		case <-in.done:
			return false, fmt.Errorf("worker exited: %v %s", in.werr, in.stderr.head())
		default:
		}
		s, err := h.Read(in.cgPath)
		return err == nil && s.LimitHits > before.LimitHits, err
	})
	if err != nil {
		return nil, fmt.Errorf("memcgstress: %w", err)
	}
	return in, nil
}

func (in *Instance) makeCgroup() error {
	in.cgPath = "/" + cgroupPrefix + strconv.Itoa(os.Getpid())
	dir := in.h.Dir(in.cgPath)
	if in.h.Version == 2 {
		b, err := os.ReadFile(filepath.Join(in.h.Mount, "cgroup.subtree_control"))
		if err != nil || !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " memory ") {
			return fmt.Errorf("memcgstress: the memory controller is not enabled for children of %s (cgroup.subtree_control %q); wolf does not change that", in.h.Mount, strings.TrimSpace(string(b)))
		}
	}
	if err := in.led.Add(lab.Cgroup(dir)); err != nil {
		in.cgPath = ""
		return fmt.Errorf("memcgstress: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		_ = in.led.Done(lab.Cgroup(dir))
		in.cgPath = ""
		return fmt.Errorf("memcgstress: create cgroup: %w", err)
	}
	limit := strconv.FormatInt(in.cfg.LimitBytes, 10)
	var writes [][2]string
	if in.h.Version == 1 {
		// swappiness 0: memcg reclaim leaves anonymous pages alone even
		// on a host with swap, as on the write-up's swapless hosts.
		writes = [][2]string{{"memory.limit_in_bytes", limit}, {"memory.swappiness", "0"}}
	} else {
		writes = [][2]string{{"memory.max", limit}, {"memory.swap.max", "0"}}
	}
	for _, w := range writes {
		if err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0); err != nil {
			if w[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist) {
				continue // no swap accounting: no swap to worry about either
			}
			return fmt.Errorf("memcgstress: set %s: %w", w[0], err)
		}
	}
	in.logf("memcgstress: cgroup %s (v%d), limit %d MiB", dir, in.h.Version, in.cfg.LimitBytes>>20)
	return nil
}

// makeDir makes the files' directory on a disk: pages of files on tmpfs
// are swap-backed, and without swap reclaim could not free them at all.
func (in *Instance) makeDir() error {
	cands := []string{in.cfg.Dir}
	if in.cfg.Dir == "" {
		cands = []string{os.TempDir(), "/var/tmp"}
	}
	for _, base := range cands {
		var fs unix.Statfs_t
		if err := unix.Statfs(base, &fs); err != nil || fs.Type == tmpfsMagic {
			continue
		}
		d := filepath.Join(base, lab.Name("memcg"))
		if err := in.led.Add(lab.Tree(d)); err != nil {
			return fmt.Errorf("memcgstress: %w", err)
		}
		if err := os.Mkdir(d, 0o700); err != nil {
			_ = in.led.Done(lab.Tree(d))
			return fmt.Errorf("memcgstress: files directory: %w", err)
		}
		in.dir = d
		return nil
	}
	return fmt.Errorf("memcgstress: no disk-backed directory among %v for the files (tmpfs pages cannot be reclaimed without swap); set Config.Dir", cands)
}

func (in *Instance) startWorker(ctx context.Context) error {
	conf, err := json.Marshal(workerConfig{
		Dir: in.dir, FileBytes: in.cfg.FileBytes, AnonBytes: in.cfg.AnonBytes,
		FileThreads: in.cfg.FileThreads, AnonThreads: in.cfg.AnonThreads,
		FileSize: in.cfg.FileSize, Phase1: in.cfg.Phase1, MaxLife: in.cfg.MaxLife,
		Populate: in.cfg.Populate,
	})
	if err != nil {
		return fmt.Errorf("memcgstress: %w", err)
	}
	// The worker dies with the lab: Pdeathsig fires when the thread that
	// forked exits, and Go threads outlive their goroutines unless locked.
	cmd := lab.ChildCommand(context.Background(), workerPart, workerComm, string(conf), "GOTRACEBACK=none")
	cmd.Stderr = in.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("memcgstress: worker stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("memcgstress: worker stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("memcgstress: start worker: %w", err)
	}
	done := make(chan struct{})
	in.mu.Lock()
	in.cmd, in.pid, in.stdin, in.done = cmd, cmd.Process.Pid, stdin, done
	in.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case in.lines <- sc.Text():
			default: // nobody listens any more
			}
		}
	}()
	go func() {
		in.werr = cmd.Wait()
		close(done)
	}()
	if err := in.waitLine(ctx, readyLine); err != nil {
		return err
	}
	// Into the cgroup before it allocates anything: charges stay with the
	// cgroup that was current when they were made.
	if err := os.WriteFile(filepath.Join(in.h.Dir(in.cgPath), "cgroup.procs"), []byte(strconv.Itoa(in.pid)), 0); err != nil {
		return fmt.Errorf("memcgstress: move worker %d into %s: %w", in.pid, in.cgPath, err)
	}
	if _, err := io.WriteString(stdin, goLine+"\n"); err != nil {
		return fmt.Errorf("memcgstress: start worker: %w", err)
	}
	in.logf("memcgstress: worker pid %d in %s", in.pid, in.cgPath)
	return nil
}

// waitLine waits for the worker to print a line starting with want.
func (in *Instance) waitLine(ctx context.Context, want string) error {
	timeout := lab.Scaled(stepTimeout) // writing the files is slow on an emulated machine
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l := <-in.lines:
			if strings.HasPrefix(l, workerFailed) {
				return fmt.Errorf("memcgstress: worker: %s", l)
			}
			if strings.HasPrefix(l, want) {
				return nil
			}
		case <-in.done:
			return fmt.Errorf("memcgstress: worker exited while the lab waited for %q: %v %s", want, in.werr, in.stderr.head())
		case <-ctx.Done():
			return fmt.Errorf("memcgstress: waiting for %q: %w", want, ctx.Err())
		case <-t.C:
			return fmt.Errorf("memcgstress: waiting for %q: %w after %s", want, lab.ErrTimeout, timeout)
		}
	}
}

func (in *Instance) setPhase(p string) {
	in.mu.Lock()
	in.phase = p
	in.mu.Unlock()
}

// Describe implements lab.Instance.
func (in *Instance) Describe() string {
	in.mu.Lock()
	phase := in.phase
	in.mu.Unlock()
	return fmt.Sprintf("memory cgroup %s (v%d at %s), limit %d MiB; worker pid %d: %d r_file threads reading %d MiB of mapped files, %d r_memory threads touching %d MiB of anonymous memory\n%s",
		in.cgPath, in.h.Version, in.h.Mount, in.cfg.LimitBytes>>20, in.pid, in.cfg.FileThreads, in.cfg.FileBytes>>20, in.cfg.AnonThreads, in.cfg.AnonBytes>>20, phase)
}

// Tasks implements lab.Instance: the worker is the offender, the process
// that reclaims in its own cgroup.
func (in *Instance) Tasks() lab.Tasks { return lab.Tasks{Offender: in.pid} }

// Close stops the worker and removes the cgroup and the files' directory.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() { in.closeErr = in.close() })
	return in.closeErr
}

func (in *Instance) close() error {
	var errs []error
	in.mu.Lock()
	cmd, stdin, done := in.cmd, in.stdin, in.done
	in.phase = "closed"
	in.mu.Unlock()
	if cmd != nil {
		// The worker has nothing to save (its files are already unlinked):
		// SIGKILL, which a thread deep in reclaim also answers soonest.
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			errs = append(errs, fmt.Errorf("memcgstress: worker %d did not exit 30 s after SIGKILL", in.pid))
		}
	}
	if in.cgPath != "" {
		dir := in.h.Dir(in.cgPath)
		// The cgroup is busy until the worker's exit is complete.
		err := lab.WaitFor(context.Background(), 10*time.Second, "the lab's cgroup to empty", func() (bool, error) {
			err := os.Remove(dir)
			return err == nil || errors.Is(err, os.ErrNotExist), nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("memcgstress: remove cgroup %s: %w", dir, err))
		} else {
			in.logf("memcgstress: removed %s", dir)
			in.undone(lab.Cgroup(dir))
		}
	}
	if in.dir != "" {
		if err := os.RemoveAll(in.dir); err != nil {
			errs = append(errs, fmt.Errorf("memcgstress: %w", err))
		} else {
			in.undone(lab.Tree(in.dir))
		}
	}
	if in.led != nil {
		if err := in.led.Close(); err != nil {
			errs = append(errs, fmt.Errorf("memcgstress: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (in *Instance) undone(it lab.Item) {
	if err := in.led.Done(it); err != nil {
		in.logf("memcgstress: %v", err)
	}
}

// WhyRoot implements lab.Privileged.
func (memcgLab) WhyRoot() string {
	return "creates a memory cgroup with a limit and moves its worker into it"
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *capped) head() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.TrimSpace(string(c.b))
}
