// Package pace says how slow this machine is compared with an ordinary one,
// at what wolf's deadlines and thresholds assume: starting a process, which
// is kernel work (fork, exec, page faults). Under QEMU's TCG it is 6-8x
// slower than on the development VM; labs stretch their start-up deadlines
// by it, and investigators grade the durations they measure (a softirq
// run, a lock wait or hold) as an ordinary machine would take them.
package pace

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/human"
)

// Start-up deadlines (a victim to block, processes to start, a cgroup to
// fill) are written for a machine like the one wolf is developed on. An
// emulated machine (QEMU without KVM) starts processes several times more
// slowly, and a lab that gives up there proves nothing. Scaled stretches a
// deadline by how slow this machine is at what labs do most: starting a
// process. It never shortens one, and labs never stretch what bounds a
// stall (the watchdogs that end a held lock or a D-state task keep their
// limits).

// refSpawn is what starting and reaping `/bin/sh -c :` takes on an
// ordinary machine (1-2 ms measured on the development VM, under load).
const refSpawn = 3 * time.Millisecond

// maxSlowdown bounds the factor: a 5 s deadline becomes at most 40 s.
const maxSlowdown = 8

var slowOnce struct {
	sync.Once
	f float64
}

// Slowdown is how many times slower than an ordinary machine this one
// starts a process (1 or more, at most maxSlowdown): the best of three
// tries, measured once per process. WOLF_LAB_SLOWDOWN overrides it.
func Slowdown() float64 {
	slowOnce.Do(func() {
		if v, err := strconv.ParseFloat(os.Getenv("WOLF_LAB_SLOWDOWN"), 64); err == nil && v >= 1 {
			slowOnce.f = min(v, 100)
			return
		}
		slowOnce.f = measureSlowdown()
	})
	return slowOnce.f
}

func measureSlowdown() float64 {
	best := time.Duration(-1)
	for range 3 {
		t0 := time.Now()
		if err := exec.Command("/bin/sh", "-c", ":").Run(); err != nil {
			return 1
		}
		if d := time.Since(t0); best < 0 || d < best {
			best = d
		}
	}
	return min(max(float64(best)/float64(refSpawn), 1), maxSlowdown)
}

// Scaled is d stretched by Slowdown.
func Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Slowdown())
}

// SlowMachine is the Slowdown from which durations are graded as an
// ordinary machine would take them: ordinary machines, loaded or not,
// differ by less.
const SlowMachine = 2.0

// Ordinary is how long d would take on an ordinary machine: d divided by
// slowdown where that is SlowMachine or more (an emulated CPU runs kernel
// and user code that many times slower, so the same work lasts that much
// longer), d itself elsewhere. Thresholds written for an ordinary machine
// are compared with it.
func Ordinary(d time.Duration, slowdown float64) time.Duration {
	if slowdown < SlowMachine {
		return d
	}
	return time.Duration(float64(d) / slowdown)
}

// SlowNote is the sentence a finding's summary carries when a duration
// (what, d) is graded lower only because this machine is slow.
func SlowNote(what string, d time.Duration, slowdown float64) string {
	return fmt.Sprintf("This machine starts a process %.1f times more slowly than an ordinary one (an emulated CPU, such as QEMU without KVM, runs kernel code that much slower): %s of %s here is about %s of an ordinary machine's work, and is graded as such.",
		slowdown, what, human.Duration(d), human.Duration(Ordinary(d, slowdown)))
}
