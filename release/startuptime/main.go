//go:build linux

// Command startuptime measures how soon wolf is at work, two ways:
//
//   - exec to the first progress line of `wolf doctor`: the line that
//     says it is attaching, drawn before any investigator loads, which
//     tells the person at the terminal that wolf is at work. The line is
//     drawn on a terminal only, so wolf's standard error is a
//     pseudo-terminal here.
//   - exec to every BPF link attached: /proc/PID/fd is polled every
//     millisecond for bpf_link descriptors (tracepoint, raw tracepoint,
//     perf event and uprobe attachments are all links), and the time their
//     count first reaches its maximum over the settle window is taken:
//     every investigator has loaded, verified and attached its programs.
//   - the CPU time wolf had used then (user and system, from
//     /proc/PID/stat, in clock ticks): what start-up costs the host, apart
//     from the window's cost; the kernel's verifier is most of the system
//     time.
//
// Each run is stopped with SIGINT after the settle window (wolf detaches
// and exits 0). The binary's size is printed beside the times.
//
//	go run ./release/startuptime -n 10 dist/wolf-linux-amd64   # as root
//
// docs/install.md keeps the numbers it printed.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	n := flag.Int("n", 10, "number of runs")
	timeout := flag.Duration("timeout", 60*time.Second, "give up on a run after this long")
	settle := flag.Duration("settle", 5*time.Second, "after the first progress line, watch the attachments this long")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: startuptime [-n RUNS] WOLF_BINARY\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *n < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "startuptime: wolf doctor needs root")
		os.Exit(3)
	}
	bin, err := filepath.Abs(flag.Arg(0))
	if err != nil {
		fail(err)
	}
	st, err := os.Stat(bin)
	if err != nil {
		fail(err)
	}
	var first, attached, user, sys, cpu []time.Duration
	links := 0
	for i := 0; i < *n; i++ {
		r, err := once(bin, *timeout, *settle)
		if err != nil {
			fail(fmt.Errorf("run %d: %w", i+1, err))
		}
		first, attached = append(first, r.firstLine), append(attached, r.allAttached)
		user, sys, cpu = append(user, r.user), append(sys, r.sys), append(cpu, r.user+r.sys)
		links = max(links, r.links)
		fmt.Printf("run %2d: first progress line %v, %d BPF links attached at %v, CPU then %v (user %v, system %v)\n", i+1, r.firstLine.Round(time.Millisecond), r.links, r.allAttached.Round(time.Millisecond), r.user+r.sys, r.user, r.sys)
	}
	fmt.Printf("binary %s: %d bytes (%.1f MiB)\n", bin, st.Size(), float64(st.Size())/(1<<20))
	fmt.Printf("wolf doctor, %d runs, from exec:\n", *n)
	fmt.Printf("  first progress line:     %s\n", summary(first))
	fmt.Printf("  all %3d BPF links attached: %s\n", links, summary(attached))
	fmt.Printf("  CPU used by then:        %s\n", summary(cpu))
	fmt.Printf("    user:                  %s\n", summary(user))
	fmt.Printf("    system:                %s\n", summary(sys))
}

func summary(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("median %v, min %v, max %v", median(s).Round(time.Millisecond), s[0].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "startuptime: %v\n", err)
	os.Exit(1)
}

func median(ds []time.Duration) time.Duration {
	m := len(ds) / 2
	if len(ds)%2 == 1 {
		return ds[m]
	}
	return (ds[m-1] + ds[m]) / 2
}

// result is one run's times, from just before exec.
type result struct {
	firstLine   time.Duration // first byte of the first progress line ("\r[")
	allAttached time.Duration // the bpf_link count first at its maximum
	links       int           // that maximum
	user, sys   time.Duration // wolf's CPU time at allAttached
}

// once starts wolf doctor with its standard error on a pseudo-terminal,
// waits for the first progress line, watches wolf's BPF links for settle
// more, then stops it with SIGINT.
func once(bin string, timeout, settle time.Duration) (result, error) {
	master, slave, err := openPTY()
	if err != nil {
		return result{}, err
	}
	defer master.Close()
	cmd := exec.Command(bin, "doctor", "--duration", "60s")
	cmd.Stdout = nil // /dev/null: the report is not what is measured
	cmd.Stderr = slave
	start := time.Now()
	if err := cmd.Start(); err != nil {
		slave.Close()
		return result{}, err
	}
	slave.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// The reader reports the first progress line, then keeps draining the
	// terminal so that wolf never blocks writing to it.
	seen := make(chan time.Time, 1)
	go func() {
		var got []byte
		buf := make([]byte, 4096)
		reported := false
		for {
			k, err := master.Read(buf)
			if !reported && k > 0 {
				got = append(got, buf[:k]...)
				if bytes.Contains(got, []byte("\r[")) {
					seen <- time.Now()
					reported, got = true, nil
				}
			}
			if err != nil {
				return
			}
		}
	}()

	var r result
	fdDir := fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid)
	deadline := time.After(timeout)
	var firstSeen time.Time
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case t := <-seen:
			firstSeen = t
			r.firstLine = t.Sub(start)
		case err := <-done:
			return r, fmt.Errorf("wolf doctor exited early: %v", err)
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			return r, fmt.Errorf("no progress line, or no end to attaching, within %v", timeout)
		case now := <-tick.C:
			if c := countLinks(fdDir); c > r.links {
				r.links, r.allAttached = c, now.Sub(start)
				if u, s, err := procCPU(cmd.Process.Pid); err == nil {
					r.user, r.sys = u, s
				}
			}
			if !firstSeen.IsZero() && now.Sub(firstSeen) > settle {
				_ = cmd.Process.Signal(syscall.SIGINT)
				if err := waitExit(done, timeout); err != nil {
					return r, err
				}
				if r.links == 0 {
					return r, fmt.Errorf("wolf doctor attached no BPF link within %v of its first progress line", settle)
				}
				return r, nil
			}
		}
	}
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every architecture wolf ships for.
const clockTick = 10 * time.Millisecond

// procCPU is a process's user and system CPU time so far, its threads'
// (the dead ones' too) summed by the kernel.
func procCPU(pid int) (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The name may hold spaces and parentheses: the fields start after
	// the last ')'. utime and stime are fields 14 and 15 of the line.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	u, err := strconv.ParseUint(string(f[11]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat utime: %w", pid, err)
	}
	s, err := strconv.ParseUint(string(f[12]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat stime: %w", pid, err)
	}
	return time.Duration(u) * clockTick, time.Duration(s) * clockTick, nil
}

// countLinks counts the bpf_link descriptors open in a /proc/PID/fd.
func countLinks(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if t, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && t == "anon_inode:bpf_link" {
			n++
		}
	}
	return n
}

// waitExit waits for wolf to finish after SIGINT; it exits 0 once it has
// detached and written its report.
func waitExit(done <-chan error, timeout time.Duration) error {
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("wolf doctor exited %d after SIGINT", ee.ExitCode())
		}
		return err
	case <-time.After(timeout):
		return fmt.Errorf("wolf doctor still running %v after SIGINT", timeout)
	}
}

// openPTY opens a pseudo-terminal pair (master, slave).
func openPTY() (*os.File, *os.File, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("unlocking the pty: %w", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, s, nil
}
