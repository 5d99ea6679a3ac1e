package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Some labs run a part of themselves in a process of its own: the coredump
// lab's crasher, the mmap-lock lab's process whose lock is fought over,
// the memcg lab's worker (and tests run whole labs that way, to kill -9
// them). They re-execute their own binary, /proc/self/exe, which then runs
// the part instead of its program: the part is registered with Child from
// an init function, and runs there, before main or TestMain, when the
// environment names it. Any binary that links the lab can so start it, and
// none needs a hook in main.
const (
	childEnv    = "WOLF_LAB_CHILD"     // the part's name
	childArgEnv = "WOLF_LAB_CHILD_ARG" // its configuration, as the part reads it
)

// Child registers part name. When this process was started by
// ChildCommand(…, name, …), Child runs run with the command's arg instead
// of returning, and exits: with 0, or with 1 after printing run's error.
// Call it from an init function of the package that owns the part.
func Child(name string, run func(arg string) error) {
	if os.Getenv(childEnv) != name {
		return
	}
	if err := run(os.Getenv(childArgEnv)); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// ChildCommand returns the command that runs part name in a new process:
// this binary again, named comm (its argv[0], so ps shows what it is),
// in /, with env as its only other environment. The child dies with the
// thread that started it (Pdeathsig: don't start it from a goroutine that
// unlocks its thread and exits) and has a process group of its own, so that
// a Ctrl-C at the terminal is the lab's to handle, not the child's.
func ChildCommand(ctx context.Context, name, comm, arg string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{comm}
	cmd.Dir = "/"
	cmd.Env = append([]string{childEnv + "=" + name, childArgEnv + "=" + arg}, env...)
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}
