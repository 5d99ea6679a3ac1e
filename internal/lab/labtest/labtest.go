// Package labtest runs a lab in a child process of a test, so that the
// test can kill it with SIGKILL and check what a kill -9 leaves behind.
package labtest

import (
	"bufio"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
)

// Start runs part, which the test binary registers with lab.Child (from an
// init function of a _test.go file), with arg, and waits up to timeout for
// its first line of output, which must start with READY. It returns the
// line's other fields and kill, which kills the child with SIGKILL and
// waits for it to go. The child is killed at the end of t in any case.
func Start(t testing.TB, part, arg string, timeout time.Duration) (fields []string, kill func()) {
	t.Helper()
	cmd := lab.ChildCommand(context.Background(), part, part, arg, os.Environ()...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	kill = func() {
		if done {
			return
		}
		done = true
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Errorf("kill -9 of the lab: %v", err)
		}
		_ = cmd.Wait()
	}
	t.Cleanup(kill)
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		lines <- l
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(timeout):
		t.Fatalf("%s did not start the lab within %v", part, timeout)
	}
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "READY" {
		t.Fatalf("%s said %q, want READY …", part, line)
	}
	t.Logf("%s up (pid %d): %s", part, cmd.Process.Pid, strings.TrimSpace(line))
	return f[1:], kill
}
