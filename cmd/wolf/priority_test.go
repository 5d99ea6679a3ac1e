//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// wolfNice starts wolf with args (through nice -n first when first > 0),
// waits until it has threads at work and returns the nice values of its
// threads.
func wolfNice(t *testing.T, first int, args ...string) map[int]bool {
	t.Helper()
	cmd := exec.Command(wolfBin, args...)
	if first != 0 {
		cmd = exec.Command("nice", append([]string{"-n", strconv.Itoa(first), wolfBin}, args...)...)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	// Past flag handling, into the window: a BPF program is loaded.
	loaded := func() bool {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
		for _, fd := range fds {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name()))
			if strings.HasPrefix(l, "anon_inode:bpf-prog") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); !loaded(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("wolf %v loaded no BPF program in 30 s", args)
		}
	}
	seen := map[int]bool{}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", cmd.Process.Pid, e.Name()))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		n, _ := strconv.Atoi(f[16])
		seen[n] = true
	}
	return seen
}

// TestNice: the investigations run at nice -20 by default, at what --nice
// says when given, and at the operator's own nice value when wolf was
// started under nice and --nice is not given.
func TestNice(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		first int
		args  []string
		want  int
	}{
		{0, []string{"hung", "--duration", "3s"}, -20},
		{0, []string{"hung", "--duration", "3s", "--nice", "0"}, 0},
		{0, []string{"hung", "--duration", "3s", "--nice", "-5"}, -5},
		{5, []string{"hung", "--duration", "3s"}, 5},
		{5, []string{"hung", "--duration", "3s", "--nice", "-20"}, -20},
	} {
		got := wolfNice(t, c.first, c.args...)
		if len(got) != 1 || !got[c.want] {
			t.Errorf("nice %d wolf %v: threads at %v, want all at %d", c.first, c.args, got, c.want)
		}
	}
}
