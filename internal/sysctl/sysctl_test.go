package sysctl

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

func fakeTree(t *testing.T) FS {
	t.Helper()
	root := t.TempDir()
	for rel, body := range map[string]string{
		"kernel/hung_task_timeout_secs":    "120\n",
		"kernel/printk":                    "4\t4\t1\t7\n",
		"net/ipv4/conf/eth0.100/rp_filter": "1\n",
		"vm/not_a_number":                  "abc\n",
	} {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return FS{Root: root}
}

func TestRead(t *testing.T) {
	fs := fakeTree(t)
	tests := []struct {
		name    string
		want    string
		wantErr bool
	}{
		{"kernel.hung_task_timeout_secs", "120", false},
		{"kernel.printk", "4\t4\t1\t7", false},
		{"net/ipv4/conf/eth0.100/rp_filter", "1", false},
		{"kernel.nope", "", true},
		{"kernel/../../etc/passwd", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fs.Read(tt.name)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Read = %q, %v; want %q, err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestReadInt(t *testing.T) {
	fs := fakeTree(t)
	tests := []struct {
		name    string
		want    int64
		wantErr bool
	}{
		{"kernel.hung_task_timeout_secs", 120, false},
		{"vm.not_a_number", 0, true},
		{"kernel.printk", 0, true},
	}
	for _, tt := range tests {
		got, err := fs.ReadInt(tt.name)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ReadInt(%s) = %d, %v; want %d, err %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestSetRestore(t *testing.T) {
	fs := fakeTree(t)
	restore, err := fs.Set("kernel.hung_task_timeout_secs", "5")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := fs.ReadInt("kernel.hung_task_timeout_secs"); v != 5 {
		t.Errorf("after Set: %d", v)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if v, _ := fs.ReadInt("kernel.hung_task_timeout_secs"); v != 120 {
		t.Errorf("after restore: %d", v)
	}
	if err := fs.Write("kernel.does_not_exist", "1"); err == nil {
		t.Error("Write created a sysctl")
	}
}

// The real /proc/sys: change a value and restore it. kernel.msgmax (SysV
// message size limit) is used because no other wolf test or lab touches it;
// the hung-task labs change kernel.hung_task_timeout_secs concurrently.
func TestRealSetRestore(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t) // a machine-wide setting, changed for a moment
	const name = "kernel.msgmax"
	_, err := os.Stat("/proc/sys/kernel/msgmax")
	testutil.Require(t, err == nil, "kernel built without SysV IPC")
	if _, err := os.Stat("/proc/sys/kernel/hung_task_timeout_secs"); err == nil {
		if v, err := ReadInt("kernel.hung_task_timeout_secs"); err != nil || v < 0 {
			t.Errorf("kernel.hung_task_timeout_secs = %d, %v", v, err)
		}
	}
	before, err := ReadInt(name)
	if err != nil {
		t.Fatal(err)
	}
	want := before + 1
	restore, err := Set(name, itoa(want))
	if err != nil {
		t.Fatal(err)
	}
	defer restore()
	got, err := ReadInt(name)
	if err != nil || got != want {
		t.Errorf("after write: %d, %v; want %d", got, err, want)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadInt(name); got != before {
		t.Errorf("after restore: %d, want %d", got, before)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
