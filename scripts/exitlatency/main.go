// Command exitlatency measures how long wolf takes beyond the --duration it
// was asked for: the wall time of `wolf CMD --duration D` minus D, for
// doctor and every investigator command, on an idle machine and with the
// CPUs saturated (a burner of N busy threads per CPU, in a process group
// of its own, killed at the end whatever happens), several runs each, and
// where that time goes:
//
//	attach          from exec to the investigators attached and the
//	                window begun (wolf's progress bar, drawn on the
//	                terminal that the tool gives wolf as standard error,
//	                shows its first percentage)
//	deadline        attach + D
//	deadline->report  from the deadline to the report file's appearance
//	                (close or rename into place)
//	late            from the deadline to the last window's end (the bar
//	                at 100%): investigators that attached later, timers
//	                that fired late
//	report->exit    from the report on disk to the process's exit (the
//	                detach, when it comes after the report)
//
// and, from the nominal deadline to the exit, how wolf's threads spent it
// (summed over threads, from /proc/PID/task/TID/schedstat and stat,
// sampled every 10 ms): on a CPU, waiting on a run queue for one, and in
// uninterruptible sleep (D: some thread was in D at the sample).
//
// The timestamps are taken by one thread of this program running at
// SCHED_FIFO (when allowed), which sleeps in ppoll on an inotify watch of
// the report's directory and a pidfd of wolf: the measuring instrument
// must not queue behind the burner it measures under. Each configuration
// (-configs) starts wolf at a priority for the whole run (none, nice10:
// nice -n -10, nice20, fifo: chrt -f 1) with flags of its own, so that
// the effect of a priority can be measured before wolf is taught to take
// it, and after, against --nice=0. Configurations run side by side: run by
// run, one after the other.
//
// Usage (as root, with a wolf binary built from the tree under test):
//
//	go build -o /tmp/wolf ./cmd/wolf
//	go run ./scripts/exitlatency -wolf /tmp/wolf -runs 5 -duration 5s
//	go run ./scripts/exitlatency -wolf /tmp/wolf -commands doctor -loads busy -configs "none --nice=0;nice20 --nice=0;fifo --nice=0;none"
//
// The burner slows every other process on the machine for the length of
// the busy runs, so the tool holds /tmp/wolf-tests.lock (the lock that
// tests asserting on machine-wide state take) while it runs.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	burnerEnv = "WOLF_EXITLATENCY_BURNER"
	testsLock = "/tmp/wolf-tests.lock"
	// sampleEvery is how often the instrument looks at wolf's threads'
	// states.
	sampleEvery = 10 * time.Millisecond
	// runTimeout bounds one run: duration plus this.
	runTimeout = 120 * time.Second
)

func main() {
	if v := os.Getenv(burnerEnv); v != "" {
		burn(v)
		return
	}
	var (
		wolf     = flag.String("wolf", "", "wolf binary to measure (required)")
		commands = flag.String("commands", "doctor,hung,locks,reclaim,sched,softirq,bpf", "comma-separated wolf commands")
		duration = flag.Duration("duration", 5*time.Second, "--duration of every run")
		runs     = flag.Int("runs", 5, "runs per command, load and priority")
		loads    = flag.String("loads", "idle,busy", "comma-separated: idle, busy")
		perCPU   = flag.Int("busy-per-cpu", 32, "busy threads per CPU for the busy load")
		configs  = flag.String("configs", "none", "semicolon-separated configurations, run side by side (interleaved run by run): "+
			"PRIO[ WOLF-FLAGS...], PRIO the priority wolf is started at for the whole run (none, nice10: nice -n -10, nice20: nice -n -20, fifo: chrt -f 1), "+
			"then flags added to the wolf command (e.g. \"none --nice=0;none\")")
		raw    = flag.String("raw", "", "append every run as a JSON line to this file")
		noLock = flag.Bool("no-lock", false, "do not take "+testsLock)
	)
	flag.Parse()
	if *wolf == "" {
		fail("-wolf is required (go build -o /tmp/wolf ./cmd/wolf)")
	}
	bin, err := filepath.Abs(*wolf)
	if err != nil {
		fail("%v", err)
	}
	if *runs < 1 || *duration <= 0 || *perCPU < 1 {
		fail("-runs, -duration and -busy-per-cpu must be positive")
	}
	if !*noLock {
		unlock, err := lockTests()
		if err != nil {
			fail("%v", err)
		}
		defer unlock()
	}
	var rawOut *os.File
	if *raw != "" {
		if rawOut, err = os.OpenFile(*raw, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			fail("%v", err)
		}
		defer rawOut.Close()
	}
	rt := rtAvailable()
	fmt.Printf("wolf %s; %d CPUs; --duration %v; %d runs each; instrument at SCHED_FIFO: %v\n", bin, runtime.NumCPU(), *duration, *runs, rt)
	fmt.Println("seconds, median [min..max] of the runs. attach: exec to the first investigator attached (wolf's progress bar);")
	fmt.Println("the deadline is that plus --duration; late: the last window's end (the bar at 100%) after it;")
	fmt.Println("after the deadline: wolf's CPU time and run-queue wait (its threads summed), wall time with a thread in D")
	fmt.Printf("%-8s %-5s %-14s %4s  %-20s %6s  %-20s %6s  %-20s %6s %6s %6s %5s\n", "command", "load", "config", "ok",
		"wall - duration", "attach", "deadline->report", "late", "report->exit", "cpu", "rqwait", "D", "busy%")
	for _, load := range split(*loads) {
		var stopBurner func()
		if load == "busy" {
			stopBurner, err = startBurner(*perCPU * runtime.NumCPU())
			if err != nil {
				fail("burner: %v", err)
			}
		} else if load != "idle" {
			fail("unknown load %q", load)
		}
		cfgs := strings.Split(*configs, ";")
		for _, c := range split(*commands) {
			rs := make([][]result, len(cfgs))
			for i := 0; i < *runs; i++ {
				for k, cfg := range cfgs {
					f := strings.Fields(cfg)
					if len(f) == 0 {
						fail("empty configuration in %q", *configs)
					}
					r := measure(bin, c, *duration, f[0], f[1:], rt)
					r.Load = load
					if rawOut != nil {
						b, _ := json.Marshal(r)
						rawOut.Write(append(b, '\n'))
					}
					if r.Err != "" {
						fmt.Fprintf(os.Stderr, "  %s %s %s run %d: %s\n", c, load, cfg, i+1, r.Err)
					}
					rs[k] = append(rs[k], r)
				}
			}
			for k, cfg := range cfgs {
				printRow(c, load, cfg, rs[k])
			}
		}
		if stopBurner != nil {
			stopBurner()
		}
	}
}

// result is one run.
type result struct {
	Command     string  `json:"command"`
	Load        string  `json:"load"`
	Prio        string  `json:"prio"`
	WolfArgs    string  `json:"wolf_args,omitempty"`
	DurationS   float64 `json:"duration_s"`
	WallS       float64 `json:"wall_s"`
	OverrunS    float64 `json:"overrun_s"`          // wall - duration
	StartupS    float64 `json:"startup_s"`          // exec -> first investigator attached (progress bar)
	ToReportS   float64 `json:"to_report_s"`        // deadline (attached + duration) -> report on disk
	LateS       float64 `json:"last_window_late_s"` // deadline -> last window's end (100% on the bar)
	ReportExitS float64 `json:"report_to_exit_s"`   // report on disk -> exit
	// From the deadline to the exit, summed over wolf's threads.
	CPUAfterS   float64 `json:"cpu_after_deadline_s"`
	WaitAfterS  float64 `json:"runqueue_wait_after_deadline_s"`
	DAfterS     float64 `json:"d_after_deadline_s"` // wall time with some thread in D
	HostBusyPct float64 `json:"host_busy_pct"`      // all CPUs, over the run
	StealPct    float64 `json:"steal_pct"`
	Exit        int     `json:"exit"`
	Err         string  `json:"error,omitempty"`
}

func measure(bin, command string, d time.Duration, prio string, extra []string, rt bool) result {
	r := result{Command: command, Prio: prio, WolfArgs: strings.Join(extra, " "), DurationS: d.Seconds()}
	dir, err := os.MkdirTemp("", "wolf-exitlatency-")
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "report.json")
	args := append([]string{bin, command, "--duration", d.String(), "--format", "json", "--output", report}, extra...)
	switch prio {
	case "none":
	case "nice10":
		args = append([]string{"nice", "-n", "-10"}, args...)
	case "nice20":
		args = append([]string{"nice", "-n", "-20"}, args...)
	case "fifo":
		args = append([]string{"chrt", "-f", "1"}, args...)
	default:
		r.Err = "unknown prio " + prio
		return r
	}
	cpu0 := readCPU()
	obs, err := observe(args, dir, "report.json", rt, d+runTimeout)
	cpu1 := readCPU()
	r.HostBusyPct, r.StealPct = cpu1.busyPct(cpu0), cpu1.stealPct(cpu0)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.Exit = obs.exit
	r.WallS = obs.exited.Sub(obs.start).Seconds()
	r.OverrunS = r.WallS - d.Seconds()
	if obs.exit != 0 {
		r.Err = fmt.Sprintf("exit %d: %s", obs.exit, strings.TrimSpace(obs.stderr))
		return r
	}
	var rep struct {
		StartedAt time.Time `json:"started_at"`
	}
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		r.Err = fmt.Sprintf("report: %v", err)
		return r
	}
	if obs.reported.IsZero() {
		r.Err = "no inotify event for the report"
		return r
	}
	// The window starts when the investigators have attached (the
	// progress bar's first line); without a bar, at started_at.
	begin := obs.attached
	if begin.IsZero() {
		begin = rep.StartedAt
	}
	deadline := begin.Add(d)
	r.StartupS = begin.Sub(obs.start).Seconds()
	r.ToReportS = obs.reported.Sub(deadline).Seconds()
	if !obs.windowEnd.IsZero() {
		r.LateS = obs.windowEnd.Sub(deadline).Seconds()
	}
	r.ReportExitS = obs.exited.Sub(obs.reported).Seconds()
	r.CPUAfterS, r.WaitAfterS, r.DAfterS = obs.after(deadline)
	return r
}

type observation struct {
	start, reported, exited time.Time
	samples                 []sample
	// From wolf's progress bar: an investigator attached; the last
	// window ended.
	attached, windowEnd time.Time
	term                strings.Builder
	exit                int
	stderr              string
}

// observe starts args and watches it from a SCHED_FIFO thread (when rt):
// the report's appearance in dir, the process's exit, its threads' states.
func observe(args []string, dir, name string, rt bool, timeout time.Duration) (observation, error) {
	type out struct {
		o   observation
		err error
	}
	ch := make(chan out, 1)
	go func() {
		// The thread dies with this goroutine (never unlocked): its
		// real-time policy goes with it.
		runtime.LockOSThread()
		if rt {
			_ = setFIFO(0, 50)
		}
		o, err := observeLocked(args, dir, name, timeout)
		ch <- out{o, err}
	}()
	res := <-ch
	return res.o, res.err
}

func observeLocked(args []string, dir, name string, timeout time.Duration) (observation, error) {
	var o observation
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return o, fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, dir, unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO); err != nil {
		return o, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	// wolf's standard error is a terminal (a pty): wolf then draws its
	// progress bar there: "attaching" while it loads, the window's
	// percentage once its investigators have attached, 100% when the
	// last window has ended.
	master, slave, err := openPTY()
	if err != nil {
		return o, err
	}
	defer unix.Close(master)
	defer slave.Close()
	path, err := exec.LookPath(args[0])
	if err != nil {
		return o, err
	}
	// The instrument's FIFO policy is not inherited: setFIFO sets
	// SCHED_RESET_ON_FORK on this thread.
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, slave.Fd()}, Env: os.Environ(),
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	o.start = time.Now()
	pid, err := syscall.ForkExec(path, args, attr)
	if err != nil {
		return o, fmt.Errorf("start %s: %w", args[0], err)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		return o, fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(pidfd)
	deadline := o.start.Add(timeout)
	buf := make([]byte, 4096)
	smp := sampler{last: map[string][2]time.Duration{}}
	for o.exited.IsZero() {
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}, {Fd: int32(master), Events: unix.POLLIN}}
		ts := unix.NsecToTimespec(sampleEvery.Nanoseconds())
		_, err := unix.Ppoll(fds, &ts, nil)
		now := time.Now()
		if err != nil && !errors.Is(err, unix.EINTR) {
			return o, fmt.Errorf("ppoll: %w", err)
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			if n, _ := unix.Read(in, buf); n > 0 && o.reported.IsZero() && hasEvent(buf[:n], name) {
				o.reported = now
			}
		}
		if fds[2].Revents&unix.POLLIN != 0 {
			o.readTerminal(master, buf, now)
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			o.exited = now
			o.readTerminal(master, buf, now)
			break
		}
		o.samples = append(o.samples, smp.take(pid, now))
		if now.After(deadline) {
			_ = unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, 0, nil)
			return o, fmt.Errorf("run took longer than %v; killed", timeout)
		}
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
		return o, fmt.Errorf("wait4: %w", err)
	}
	o.exit = ws.ExitStatus()
	if ws.Signaled() {
		o.exit = 128 + int(ws.Signal())
	}
	o.stderr = stripBar(o.term.String())
	return o, nil
}

// readTerminal reads what wolf wrote to its terminal and notes the
// progress bar's first appearance and its first 100%.
func (o *observation) readTerminal(master int, buf []byte, now time.Time) {
	for {
		n, err := unix.Read(master, buf)
		if n <= 0 || err != nil {
			return
		}
		o.term.Write(buf[:n])
		s := o.term.String()
		// The window's bar ("…] 0% of 5s"), not the line wolf draws
		// while it is still attaching.
		if o.attached.IsZero() && strings.Contains(s, "% of") {
			o.attached = now
		}
		if o.windowEnd.IsZero() && strings.Contains(s, "100% of") {
			o.windowEnd = now
		}
	}
}

// stripBar drops the progress bar's redraws from what wolf wrote.
func stripBar(s string) string {
	var out []string
	for _, l := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if i := strings.LastIndexByte(l, '\r'); i >= 0 {
			l = l[i+1:]
		}
		l = strings.TrimPrefix(l, "\x1b[K")
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// openPTY returns a pseudo-terminal's master (non-blocking) and slave.
func openPTY() (int, *os.File, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(m)
		return -1, nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		unix.Close(m)
		return -1, nil, fmt.Errorf("pty number: %w", err)
	}
	sl, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		unix.Close(m)
		return -1, nil, err
	}
	// Raw output: no \n -> \r\n, so what wolf wrote reads back as is.
	if t, err := unix.IoctlGetTermios(int(sl.Fd()), unix.TCGETS); err == nil {
		t.Oflag &^= unix.OPOST
		_ = unix.IoctlSetTermios(int(sl.Fd()), unix.TCSETS, t)
	}
	return m, sl, nil
}

func hasEvent(b []byte, name string) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return false
		}
		n := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		if n == name {
			return true
		}
		b = b[end:]
	}
	return false
}

// sample is wolf's threads at one instant: whether one is in D, and their
// CPU and run-queue wait times so far (threads that exited count with
// their last values).
type sample struct {
	t         time.Time
	d         bool
	run, wait time.Duration
}

type sampler struct {
	last map[string][2]time.Duration // tid: run, wait
}

func (s *sampler) take(pid int, now time.Time) sample {
	out := sample{t: now}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, e := range ents {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, e.Name())
		if b, err := os.ReadFile(dir + "stat"); err == nil {
			st := string(b)
			if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] == 'D' {
				out.d = true
			}
		}
		if b, err := os.ReadFile(dir + "schedstat"); err == nil {
			f := strings.Fields(string(b))
			if len(f) >= 2 {
				run, _ := strconv.ParseInt(f[0], 10, 64)
				wait, _ := strconv.ParseInt(f[1], 10, 64)
				s.last[e.Name()] = [2]time.Duration{time.Duration(run), time.Duration(wait)}
			}
		}
	}
	for _, v := range s.last {
		out.run += v[0]
		out.wait += v[1]
	}
	return out
}

// after sums what wolf's threads did from deadline to the last sample: CPU
// time, run-queue wait, and wall time with some thread in D.
func (o *observation) after(deadline time.Time) (cpu, wait, d float64) {
	var base *sample
	for i := range o.samples {
		s := &o.samples[i]
		if s.t.Before(deadline) {
			base = s
			continue
		}
		if s.d && i > 0 {
			d += s.t.Sub(maxTime(o.samples[i-1].t, deadline)).Seconds()
		}
	}
	if base == nil || len(o.samples) == 0 {
		return 0, 0, d
	}
	last := o.samples[len(o.samples)-1]
	return (last.run - base.run).Seconds(), (last.wait - base.wait).Seconds(), d
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// setFIFO puts thread tid (0: the caller) at SCHED_FIFO prio, with
// SCHED_RESET_ON_FORK so that its children start as ordinary tasks.
func setFIFO(tid, prio int) error {
	return unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO,
		Flags: unix.SCHED_FLAG_RESET_ON_FORK, Priority: uint32(prio)}, 0)
}

// rtAvailable checks that this process may use SCHED_FIFO.
func rtAvailable() bool {
	ch := make(chan bool, 1)
	go func() {
		runtime.LockOSThread() // the thread dies with the goroutine
		ch <- setFIFO(0, 1) == nil
	}()
	return <-ch
}

// startBurner starts n busy threads in a child process of their own
// process group; the returned function kills the group and reaps it. The
// child dies with this process too (Pdeathsig), so nothing outlives it.
func startBurner(n int) (func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), burnerEnv+"="+strconv.Itoa(n), "GOMAXPROCS="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Pdeathsig fires when the thread that forked exits, and Go ends a
	// thread whenever a goroutine locked to it returns (observe's do):
	// fork from a thread of our own that lives until stop.
	started, quit, quitted := make(chan error), make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		started <- cmd.Start()
		<-quit
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		close(quitted)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	pgid := cmd.Process.Pid
	stop := func() {
		close(quit)
		<-quitted
	}
	// Wait until the threads run.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := runnable(pgid); r >= n {
			fmt.Printf("burner pid %d: %d busy threads (%d per CPU), own process group\n", pgid, r, n/runtime.NumCPU())
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("burner pid %d: %d of %d threads runnable after 10 s", pgid, runnable(pgid), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runnable(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'R' {
			n++
		}
	}
	return n
}

// burn is the burner process: n threads that spin until killed.
func burn(v string) {
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 4096 {
		fail("%s=%q", burnerEnv, v)
	}
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			x := uint64(i)
			for {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}()
	}
	// Ends with SIGKILL from the parent, or after an hour whatever
	// happens.
	time.Sleep(time.Hour)
	os.Exit(1)
}

// lockTests takes /tmp/wolf-tests.lock: tests that assert on machine-wide
// state (healthy host, nothing attached) must not run under the burner.
func lockTests() (func(), error) {
	f, err := os.OpenFile(testsLock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		fmt.Printf("waiting for %s (tests are running)\n", testsLock)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

type cpuTimes struct{ total, idle, steal float64 }

func readCPU() cpuTimes {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var t cpuTimes
	for i, s := range f[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		if i == 8 || i == 9 { // guest time is already in user
			continue
		}
		t.total += v
		if i == 3 || i == 4 { // idle, iowait
			t.idle += v
		}
		if i == 7 {
			t.steal = v
		}
	}
	return t
}

func (t cpuTimes) busyPct(prev cpuTimes) float64 {
	d := t.total - prev.total
	if d <= 0 {
		return 0
	}
	return 100 * (d - (t.idle - prev.idle)) / d
}

func (t cpuTimes) stealPct(prev cpuTimes) float64 {
	d := t.total - prev.total
	if d <= 0 {
		return 0
	}
	return 100 * (t.steal - prev.steal) / d
}

func printRow(command, load, prio string, rs []result) {
	var overrun, startup, toRep, late, repExit, cpu, wait, d, busy []float64
	ok := 0
	for _, r := range rs {
		if r.Err != "" {
			continue
		}
		ok++
		overrun = append(overrun, r.OverrunS)
		startup = append(startup, r.StartupS)
		toRep = append(toRep, r.ToReportS)
		late = append(late, r.LateS)
		repExit = append(repExit, r.ReportExitS)
		cpu = append(cpu, r.CPUAfterS)
		wait = append(wait, r.WaitAfterS)
		d = append(d, r.DAfterS)
		busy = append(busy, r.HostBusyPct)
	}
	fmt.Printf("%-8s %-5s %-14s %d/%d  %-20s %6s  %-20s %6s  %-20s %6s %6s %6s %5s\n", command, load, prio, ok, len(rs),
		spread(overrun), med(startup), spread(toRep), med(late), spread(repExit), med(cpu), med(wait), med(d), med(busy))
}

func spread(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.2f [%.2f..%.2f]", median(s), s[0], s[len(s)-1])
}

func med(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.2f", median(s))
}

func median(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "exitlatency: "+format+"\n", args...)
	os.Exit(2)
}
