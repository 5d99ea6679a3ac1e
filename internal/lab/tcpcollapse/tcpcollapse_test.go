package tcpcollapse

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/sysctl"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func TestParseTcpExt(t *testing.T) {
	m := parseTcpExt([]byte("TcpExt: PruneCalled TCPRcvCollapsed\nTcpExt: 3 900\nIpExt: InOctets\nIpExt: 5\n"))
	if m["PruneCalled"] != 3 || m["TCPRcvCollapsed"] != 900 || len(m) != 2 {
		t.Errorf("parsed %v", m)
	}
}

// The lab collapses receive queues in its own namespace, leaves the host's
// settings alone, and takes its namespace and thread with it on Close.
func TestLabCollapsesAndCleansUp(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	hostRmem, err := sysctl.Read("net.ipv4.tcp_rmem")
	if err != nil {
		t.Fatal(err)
	}
	ourNS, err := nsInode("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	inst, err := New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	closed := false
	defer func() {
		if !closed {
			in.Close()
		}
	}()
	if in.Netns() == 0 || in.Netns() == ourNS {
		t.Fatalf("lab namespace %d, ours %d", in.Netns(), ourNS)
	}
	if in.SenderTID() == os.Getpid() {
		t.Errorf("the sender took the main thread")
	}
	// Prunes keep coming, not just the first.
	c0, err := in.Counters()
	if err != nil {
		t.Fatal(err)
	}
	err = lab.WaitFor(ctx, 10*time.Second, "more prunes", func() (bool, error) {
		c, err := in.Counters()
		return err == nil && c["PruneCalled"] >= c0["PruneCalled"]+3 && c["TCPRcvCollapsed"] > c0["TCPRcvCollapsed"], err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := sysctl.Read("net.ipv4.tcp_rmem"); got != hostRmem {
		t.Errorf("host tcp_rmem changed: %q → %q", hostRmem, got)
	}
	taskDir := fmt.Sprintf("/proc/self/task/%d", in.SenderTID())
	if err := in.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	closed = true
	if err := in.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	err = lab.WaitFor(context.Background(), 5*time.Second, "the namespace thread to exit", func() (bool, error) {
		_, err := os.Stat(taskDir)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Error(err)
	}
}

func TestLabRefusesBadSettings(t *testing.T) {
	testutil.RequireRoot(t)
	l := New()
	l.Segment = 0
	if _, err := l.Start(context.Background(), lab.Options{}); err == nil {
		t.Error("segment 0 accepted")
	}
}
