package procfs

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestReadFileAndDirNames(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "loadavg"), []byte("0.01 0.02 0.03 1/100 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "vda"), 0o755); err != nil {
		t.Fatal(err)
	}
	var r Reader
	before := Outstanding()
	b, err := r.ReadFile(context.Background(), filepath.Join(dir, "loadavg"))
	if err != nil || string(b) != "0.01 0.02 0.03 1/100 42\n" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	names, err := r.ReadDirNames(context.Background(), dir)
	if err != nil || !reflect.DeepEqual(names, []string{"loadavg", "vda"}) {
		t.Errorf("ReadDirNames = %v, %v", names, err)
	}
	if _, err := r.ReadFile(context.Background(), filepath.Join(dir, "absent")); !os.IsNotExist(err) {
		t.Errorf("absent file: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.ReadFile(ctx, filepath.Join(dir, "loadavg")); err == nil {
		t.Error("read with a cancelled context succeeded")
	}
	// The abandoned read finishes on its own; later tests compare
	// Outstanding before and after, so let it.
	waitOutstanding(t, before)
}
