// Command startuptime measures how soon wolf is at work: the time from
// exec to the first progress line of `wolf doctor`, which doctor draws
// once an investigator has its BPF programs loaded, verified and attached.
// The progress line is drawn on a terminal only, so wolf's standard error
// is a pseudo-terminal here. Each run is stopped with SIGINT as soon as
// the line appears (wolf detaches and exits); the binary's size is
// printed beside the times.
//
//	go run ./release/startuptime -n 10 dist/wolf-linux-amd64   # as root
//
// The README keeps the numbers it printed.
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
	var times []time.Duration
	for i := 0; i < *n; i++ {
		d, err := once(bin, *timeout)
		if err != nil {
			fail(fmt.Errorf("run %d: %w", i+1, err))
		}
		times = append(times, d)
		fmt.Printf("run %2d: %v\n", i+1, d.Round(time.Millisecond))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	fmt.Printf("binary %s: %d bytes (%.1f MiB)\n", bin, st.Size(), float64(st.Size())/(1<<20))
	fmt.Printf("exec to first progress line of wolf doctor, %d runs: median %v, min %v, max %v\n",
		len(times), median(times).Round(time.Millisecond), times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
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

// once starts wolf doctor with its standard error on a pseudo-terminal and
// returns the time from just before exec to the first byte of the first
// progress line ("\r[" followed by the bar).
func once(bin string, timeout time.Duration) (time.Duration, error) {
	master, slave, err := openPTY()
	if err != nil {
		return 0, err
	}
	defer master.Close()
	cmd := exec.Command(bin, "doctor", "--duration", "30s")
	cmd.Stdout = nil // /dev/null: the report is not what is measured
	cmd.Stderr = slave
	start := time.Now()
	if err := cmd.Start(); err != nil {
		slave.Close()
		return 0, err
	}
	slave.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	seen := make(chan time.Time, 1)
	go func() {
		var got []byte
		buf := make([]byte, 4096)
		for {
			k, err := master.Read(buf)
			if k > 0 {
				got = append(got, buf[:k]...)
				if bytes.Contains(got, []byte("\r[")) {
					seen <- time.Now()
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case t := <-seen:
		_ = cmd.Process.Signal(syscall.SIGINT)
		if err := waitExit(done, timeout); err != nil {
			return 0, err
		}
		return t.Sub(start), nil
	case err := <-done:
		return 0, fmt.Errorf("wolf doctor exited before its first progress line: %v", err)
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return 0, fmt.Errorf("no progress line within %v", timeout)
	}
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
