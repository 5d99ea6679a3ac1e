package tracefs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"golang.org/x/sys/unix"
)

func TestTracefsPoints(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
		pick string
	}{
		{"none", "22 1 8:1 / / rw,relatime - ext4 /dev/vda rw\n", nil, ""},
		{
			"both, prefers /sys/kernel/tracing",
			"30 22 0:12 / /sys/kernel/debug/tracing rw,nosuid - tracefs tracefs rw\n" +
				"31 22 0:12 / /sys/kernel/tracing rw,nosuid shared:9 - tracefs tracefs rw\n",
			[]string{"/sys/kernel/debug/tracing", "/sys/kernel/tracing"}, "/sys/kernel/tracing",
		},
		{"debugfs only", "30 22 0:12 / /sys/kernel/debug/tracing rw - tracefs tracefs rw\n", []string{DebugfsPath}, DebugfsPath},
		{"escaped space elsewhere", `40 22 0:12 / /mnt/my\040trace rw master:1 - tracefs nodev rw` + "\n", []string{"/mnt/my trace"}, "/mnt/my trace"},
		{"malformed lines", "garbage\n - \n", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mounts, err := procfs.ParseMountinfo(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := tracefsPoints(mounts); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("tracefsPoints = %q, want %q", got, tt.want)
			}
			if p := choose(tracefsPoints(mounts)); p != tt.pick {
				t.Errorf("choose = %q, want %q", p, tt.pick)
			}
		})
	}
}

func TestBadEventNames(t *testing.T) {
	for _, ev := range [][2]string{{"..", "x"}, {"sched", "../../x"}, {"", "x"}, {"sched", ""}} {
		if HasEvent(ev[0], ev[1]) {
			t.Errorf("HasEvent(%q, %q) = true", ev[0], ev[1])
		}
		if _, err := EventFormat(ev[0], ev[1]); err == nil {
			t.Errorf("EventFormat(%q, %q): no error", ev[0], ev[1])
		}
	}
}

// mountAt mounts a working tracefs (here on a scratch directory, so the
// test does not depend on whether the host's is mounted).
func TestMountAt(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := mountAt(dir); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if _, err := os.Stat(filepath.Join(dir, "events", "sched", "sched_switch", "id")); err != nil {
		t.Errorf("freshly mounted tracefs lacks sched_switch: %v", err)
	}
	if err := mountAt(filepath.Join(dir, "does-not-exist")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("mount on a missing dir: %v", err)
	}
}

func TestEnsureReal(t *testing.T) {
	testutil.RequireRoot(t)
	p, err := Ensure()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := Find(); !ok || got != p {
		t.Errorf("Find = %q, %v after Ensure = %q", got, ok, p)
	}
	tests := []struct {
		group, name string
		want        bool
	}{
		{"sched", "sched_switch", true},
		{"lock", "contention_begin", true},
		{"sched", "no_such_event", false},
		{"no_such_group", "x", false},
	}
	for _, tt := range tests {
		if got := HasEvent(tt.group, tt.name); got != tt.want {
			t.Errorf("HasEvent(%s, %s) = %v, want %v", tt.group, tt.name, got, tt.want)
		}
	}
	format, err := EventFormat("sched", "sched_switch")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(format, "prev_pid") || !strings.Contains(format, "ID:") {
		t.Errorf("sched_switch format lacks prev_pid or ID:\n%s", format)
	}
}
