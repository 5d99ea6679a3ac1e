package procfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Mount
	}{
		{
			name: "optional fields",
			in:   "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n",
			want: []Mount{{ID: 36, Parent: 35, Dev: "98:0", Root: "/mnt1", Point: "/mnt2", Options: []string{"rw", "noatime"},
				FSType: "ext3", Source: "/dev/root", SuperOptions: []string{"rw", "errors=continue"}}},
		},
		{
			name: "several optional fields, none",
			in: "22 1 8:1 / / rw,relatime shared:1 master:2 propagate_from:3 unbindable - ext4 /dev/vda rw\n" +
				"31 22 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n",
			want: []Mount{
				{ID: 22, Parent: 1, Dev: "8:1", Root: "/", Point: "/", Options: []string{"rw", "relatime"},
					FSType: "ext4", Source: "/dev/vda", SuperOptions: []string{"rw"}},
				{ID: 31, Parent: 22, Dev: "0:28", Root: "/", Point: "/sys/fs/cgroup", Options: []string{"rw", "relatime"},
					FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw", "mode=755"}},
			},
		},
		{
			name: "escaped paths and source",
			in:   `40 22 0:12 /a\134b /mnt/my\040trace\011x rw master:1 - fuse.sshfs me@host:/my\040dir rw` + "\n",
			want: []Mount{{ID: 40, Parent: 22, Dev: "0:12", Root: `/a\b`, Point: "/mnt/my trace\tx", Options: []string{"rw"},
				FSType: "fuse.sshfs", Source: "me@host:/my dir", SuperOptions: []string{"rw"}}},
		},
		{
			name: "not escapes: short, non-octal, over one byte, trailing backslash",
			in:   `41 22 0:12 / /x\04\9999\400\ rw - tmpfs none rw` + "\n",
			want: []Mount{{ID: 41, Parent: 22, Dev: "0:12", Root: "/", Point: `/x\04\9999\400\`, Options: []string{"rw"},
				FSType: "tmpfs", Source: "none", SuperOptions: []string{"rw"}}},
		},
		{
			name: "empty source",
			in:   "42 22 0:50 / /run/x rw - tmpfs  rw,size=4k\n",
			want: []Mount{{ID: 42, Parent: 22, Dev: "0:50", Root: "/", Point: "/run/x", Options: []string{"rw"},
				FSType: "tmpfs", Source: "", SuperOptions: []string{"rw", "size=4k"}}},
		},
		{
			name: "malformed lines skipped",
			in: "garbage\n - \n\n" +
				"1 2 3:4 / /p - tmpfs tmpfs rw\n" + // no options
				"1 2 3:4 / /p rw - tmpfs tmpfs\n" + // no super options
				"x 2 3:4 / /p rw - tmpfs tmpfs rw\n" + // id not a number
				"50 22 0:51 / /ok rw - tmpfs tmpfs rw\n",
			want: []Mount{{ID: 50, Parent: 22, Dev: "0:51", Root: "/", Point: "/ok", Options: []string{"rw"},
				FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw"}}},
		},
		{name: "empty", in: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMountinfo(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseMountinfo =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// Lines up to 1 MiB parse; a longer one is an error, with the mounts
// before it still returned.
func TestParseMountinfoLongLine(t *testing.T) {
	long := "60 22 0:60 / /merged rw - overlay overlay rw,lowerdir=" + strings.Repeat("/l", 200<<10) + "\n"
	got, err := ParseMountinfo(strings.NewReader(long))
	if err != nil || len(got) != 1 || got[0].Point != "/merged" {
		t.Fatalf("400 KiB line: %d mounts, err %v", len(got), err)
	}
	tooLong := "61 22 0:61 / /first rw - tmpfs tmpfs rw\n" + "62 22 0:62 / /huge rw - tmpfs tmpfs rw," + strings.Repeat("x", 1<<20) + "\n"
	got, err = ParseMountinfo(strings.NewReader(tooLong))
	if err == nil || len(got) != 1 || got[0].Point != "/first" {
		t.Errorf("over 1 MiB: %+v, err %v; want /first and an error", got, err)
	}
}

func TestMountsFake(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
	if err := os.WriteFile(filepath.Join(root, "7", "mountinfo"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r := Reader{Root: root, Timeout: time.Second}
	got, err := r.Mounts(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Point != "/mnt2" || got[0].FSType != "ext3" {
		t.Errorf("Mounts = %+v", got)
	}
	if _, err := r.Mounts(context.Background(), 8); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Mounts of a missing pid: err = %v, want ErrNotExist", err)
	}

	// mountinfo takes the namespace lock: a read that blocks is abandoned.
	if err := os.MkdirAll(filepath.Join(root, "9"), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(root, "9", "mountinfo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	before := Outstanding()
	r.Timeout = 50 * time.Millisecond
	if _, err := r.Mounts(context.Background(), 9); !errors.Is(err, ErrTimeout) {
		t.Errorf("blocked mountinfo: err = %v, want ErrTimeout", err)
	}
	release(t, fifo)
	waitOutstanding(t, before)
}

func TestMountsRealSelf(t *testing.T) {
	var r Reader
	for _, pid := range []int{0, os.Getpid()} {
		mounts, err := r.Mounts(context.Background(), pid)
		if err != nil {
			t.Fatal(err)
		}
		var proc bool
		for _, m := range mounts {
			proc = proc || (m.Point == "/proc" && m.FSType == "proc")
		}
		if !proc {
			t.Errorf("Mounts(%d): %d mounts, no proc at /proc", pid, len(mounts))
		}
	}
}
