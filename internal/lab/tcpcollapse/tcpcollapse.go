// Package tcpcollapse is the lab for Cloudflare's "The story of one latency spike": a TCP socket whose receive
// queue fills with tiny segments faster than its reader drains it, so that
// the kernel prunes it, collapsing tens of thousands of sk_buffs in one
// NET_RX softirq run: a softirq stall of several milliseconds, the write-up's
// 23 ms net_rx_action.
//
// How the lab does it. Everything happens in a network namespace of its
// own (one thread of this process unshares it; the host's network and
// sysctls are untouched): loopback up with a 1500-byte MTU, like an
// Ethernet link, net.ipv4.tcp_rmem = "4096 32M 32M" (the write-up's 32 MiB
// maximum, as the default so the buffer is large from the start), and
// tcp_autocorking off so that tiny writes leave as tiny segments. One TCP
// connection over loopback:
//
//  1. Warm-up: 64 MiB in 64 KiB writes, read as fast as they come. The
//     receiver learns a large MSS and a payload/truesize ratio near 1 from
//     full-sized segments, and grows its advertised window. Since 6.7
//     (commit dfa2f0483360, "tcp: get rid of sysctl_tcp_adv_win_scale") the
//     window is scaled by that ratio, and the ratio is only re-measured from
//     segments at least as large as the MSS: tiny segments later leave it,
//     and the window, as large as full-sized ones made it. That is the care
//     the issue asks for: a receiver that only ever saw tiny segments
//     would advertise a window its buffer could hold in sk_buffs.
//  2. Load: 16-byte writes with TCP_NODELAY (and TCP_NOTSENT_LOWAT, so the
//     writer sleeps instead of spinning when the window or congestion
//     window is full). Each segment costs its ~1 KiB sk_buff in the
//     receive buffer, so the buffer is full of overhead long before the
//     window of payload is used. The reader is slow: it keeps 4 MiB of
//     payload unread and reads only what arrives beyond that.
//  3. When the queue's memory passes the buffer, tcp_data_queue calls
//     tcp_prune_queue, and tcp_collapse copies ~30 000 tiny sk_buffs into
//     compact ones, inside NET_RX (on loopback, the sender's own softirq).
//     Observed on 6.18 (2 vCPUs): 3 to 4 prunes a second, NET_RX runs of
//     8 to 25 ms, TcpExt PruneCalled and TCPRcvCollapsed climbing.
//
// Start returns once the first prune has happened (or fails, saying the
// kernel would not collapse). The load stops by itself after Lifetime.
// Close stops it and closes the sockets, which frees the namespace. A
// kill -9 leaves nothing: the namespace lives only as long as the
// process's sockets and thread.
package tcpcollapse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/testslock"
)

// Lab is the TCP collapse reproducer. The zero value is not ready; use New.
type Lab struct {
	RmemMax  int           // bytes: the namespace's tcp_rmem default and max
	MTU      int           // loopback MTU in the namespace
	Segment  int           // bytes per write in the load phase
	Unread   int           // payload bytes the slow reader leaves unread
	Warmup   int           // bytes sent full-sized first
	Lifetime time.Duration // the load stops by itself after this
	// PruneTimeout bounds how long Start waits for the first prune.
	PruneTimeout time.Duration
}

// New returns the lab with the settings that reproduce the write-up's stall.
func New() *Lab {
	return &Lab{
		RmemMax:      32 << 20,
		MTU:          1500,
		Segment:      16,
		Unread:       4 << 20,
		Warmup:       64 << 20,
		Lifetime:     10 * time.Minute,
		PruneTimeout: 15 * time.Second,
	}
}

// Name implements lab.Lab.
func (*Lab) Name() string { return "tcp-collapse" }

// Summary implements lab.Lab.
func (*Lab) Summary() string {
	return "TCP receive queues of tiny segments collapsed in NET_RX (own netns, 32 MiB tcp_rmem): softirq stalls of milliseconds"
}

// Instance is a running lab.
type Instance struct {
	l        *Lab
	netns    uint64
	pid, tid int // the sender thread, inside the namespace
	port     int
	started  time.Time

	client, server int
	stop           chan struct{}
	wg             sync.WaitGroup
	closeOnce      sync.Once
	closeErr       error

	written, read atomic.Uint64
	loadErr       atomic.Pointer[error]
}

// Start implements lab.Lab.
func (l *Lab) Start(ctx context.Context, opt lab.Options) (lab.Instance, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("tcp-collapse: creating a network namespace needs root")
	}
	if l.Segment <= 0 || l.RmemMax < 1<<20 || l.MTU < 576 {
		return nil, fmt.Errorf("tcp-collapse: bad settings %+v", *l)
	}
	if err := testslock.Check("lab " + l.Name()); err != nil {
		return nil, err
	}
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	in := &Instance{l: l, pid: os.Getpid(), stop: make(chan struct{}), client: -1, server: -1, started: time.Now()}
	setup := make(chan error, 1)
	warm := make(chan error, 1)
	in.wg.Add(1)
	onOtherThread(func() { in.sender(setup, warm) })
	if err := <-setup; err != nil {
		in.Close()
		return nil, err
	}
	logf("netns %d: loopback up (mtu %d), tcp_rmem 4096 %d %d, connection on 127.0.0.1:%d", in.netns, l.MTU, l.RmemMax, l.RmemMax, in.port)
	in.wg.Add(1)
	go in.reader()
	select {
	case err := <-warm:
		if err != nil {
			in.Close()
			return nil, err
		}
	case <-ctx.Done():
		in.Close()
		return nil, fmt.Errorf("tcp-collapse: warm-up: %w", ctx.Err())
	}
	logf("warm-up done (%d MiB full-sized); sending %d-byte segments to a slow reader", l.Warmup>>20, l.Segment)
	wait, cancel := context.WithTimeout(ctx, l.PruneTimeout)
	defer cancel()
	err := lab.WaitFor(wait, l.PruneTimeout, "the first receive-queue prune", func() (bool, error) {
		if p := in.loadErr.Load(); p != nil {
			return false, *p
		}
		c, err := in.Counters()
		if err != nil {
			return false, err
		}
		return c["PruneCalled"] > 0, nil
	})
	if err != nil {
		in.Close()
		if errors.Is(err, lab.ErrTimeout) {
			return nil, fmt.Errorf("tcp-collapse: this kernel did not prune the receive queue within %v (TcpExt PruneCalled stayed 0): %w", l.PruneTimeout, err)
		}
		return nil, fmt.Errorf("tcp-collapse: %w", err)
	}
	c, _ := in.Counters()
	logf("first prune after %v: PruneCalled %d, TCPRcvCollapsed %d", time.Since(in.started).Round(time.Millisecond), c["PruneCalled"], c["TCPRcvCollapsed"])
	return in, nil
}

// sender owns the thread that enters the namespace. It sets the namespace
// up, connects, warms up and then writes tiny segments until stopped. The
// thread stays locked and dies with the goroutine, so no other goroutine
// ever runs in the lab's namespace.
func (in *Instance) sender(setup, warm chan<- error) {
	defer in.wg.Done()
	if unix.Gettid() == os.Getpid() {
		setup <- errors.New("tcp-collapse: the sender landed on the main thread")
		return
	}
	if err := in.enterNetns(); err != nil {
		setup <- err
		return
	}
	setup <- nil
	big := make([]byte, 64<<10)
	for sent := 0; sent < in.l.Warmup; {
		n, err := in.write(big)
		if err != nil {
			warm <- fmt.Errorf("tcp-collapse: warm-up write: %w", err)
			return
		}
		sent += n
	}
	// Wait for the reader to drain the warm-up, so the load starts with an
	// empty queue and a wide window.
	for in.read.Load() < in.written.Load() {
		select {
		case <-in.stop:
			warm <- errors.New("tcp-collapse: stopped during warm-up")
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Block, rather than spin, while the congestion window is full.
	if err := unix.SetsockoptInt(in.client, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, in.l.Segment); err != nil {
		warm <- fmt.Errorf("tcp-collapse: TCP_NOTSENT_LOWAT: %w", err)
		return
	}
	warm <- nil
	tiny := make([]byte, in.l.Segment)
	deadline := in.started.Add(in.l.Lifetime)
	for i := 0; ; i++ {
		if i%256 == 0 && (in.stopped() || time.Now().After(deadline)) {
			return
		}
		if _, err := in.write(tiny); err != nil {
			if !in.stopped() {
				in.loadErr.Store(&err)
			}
			return
		}
	}
}

// onOtherThread runs fn on a goroutine locked, for good, to a thread
// other than the process's main one: /proc/PID/net follows the main
// thread, and the runtime cannot end the main thread when a goroutine
// locked to it exits. fn's thread is ended when fn returns.
func onOtherThread(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != os.Getpid() {
			fn()
			return // still locked: the runtime ends the thread
		}
		// This goroutine holds the main thread, so a goroutine started
		// now cannot run on it.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			fn()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}

// write writes all of b, retrying on the send timeout until stopped.
func (in *Instance) write(b []byte) (int, error) {
	for {
		n, err := unix.Write(in.client, b)
		if n > 0 {
			in.written.Add(uint64(n))
			return n, nil
		}
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			if in.stopped() {
				return 0, errors.New("stopped")
			}
			continue
		}
		if err == nil {
			err = errors.New("short write")
		}
		return 0, err
	}
}

func (in *Instance) stopped() bool {
	select {
	case <-in.stop:
		return true
	default:
		return false
	}
}

func (in *Instance) enterNetns() error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("tcp-collapse: unshare network namespace: %w", err)
	}
	in.tid = unix.Gettid()
	ino, err := nsInode(fmt.Sprintf("/proc/%d/task/%d/ns/net", in.pid, in.tid))
	if err != nil {
		return err
	}
	in.netns = ino
	if err := loopbackUp(in.l.MTU); err != nil {
		return err
	}
	// /proc/sys/net resolves to the opening thread's namespace: these
	// writes change the lab's namespace only.
	for name, value := range map[string]string{
		"ipv4/tcp_rmem":        fmt.Sprintf("4096 %d %d", in.l.RmemMax, in.l.RmemMax),
		"ipv4/tcp_autocorking": "0",
	} {
		if err := os.WriteFile("/proc/sys/net/"+name, []byte(value), 0); err != nil {
			return fmt.Errorf("tcp-collapse: set net.%s in the lab's namespace: %w", strings.ReplaceAll(name, "/", "."), err)
		}
	}
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tcp-collapse: socket: %w", err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("tcp-collapse: bind: %w", err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		return fmt.Errorf("tcp-collapse: listen: %w", err)
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		return fmt.Errorf("tcp-collapse: getsockname: %w", err)
	}
	in.port = sa.(*unix.SockaddrInet4).Port
	if in.client, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
		return fmt.Errorf("tcp-collapse: socket: %w", err)
	}
	if err := unix.Connect(in.client, sa); err != nil {
		return fmt.Errorf("tcp-collapse: connect: %w", err)
	}
	if in.server, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC); err != nil {
		return fmt.Errorf("tcp-collapse: accept: %w", err)
	}
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	for _, o := range []struct {
		fd, level, opt int
		name           string
	}{
		{in.client, unix.IPPROTO_TCP, unix.TCP_NODELAY, "TCP_NODELAY"},
	} {
		if err := unix.SetsockoptInt(o.fd, o.level, o.opt, 1); err != nil {
			return fmt.Errorf("tcp-collapse: %s: %w", o.name, err)
		}
	}
	// Timeouts let blocked reads and writes notice Close.
	if err := unix.SetsockoptTimeval(in.client, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return fmt.Errorf("tcp-collapse: SO_SNDTIMEO: %w", err)
	}
	if err := unix.SetsockoptTimeval(in.server, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("tcp-collapse: SO_RCVTIMEO: %w", err)
	}
	return nil
}

// loopbackUp brings lo up in the current thread's namespace with mtu.
func loopbackUp(mtu int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tcp-collapse: socket for ioctl: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint32(uint32(mtu))
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); err != nil {
		return fmt.Errorf("tcp-collapse: set lo mtu %d: %w", mtu, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tcp-collapse: get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tcp-collapse: bring lo up: %w", err)
	}
	return nil
}

// reader drains the warm-up at full speed, then reads slowly: every
// 100 ms, only what exceeds the unread allowance.
func (in *Instance) reader() {
	defer in.wg.Done()
	buf := make([]byte, 1<<20)
	for in.read.Load() < uint64(in.l.Warmup) {
		n, err := unix.Read(in.server, buf)
		if n > 0 {
			in.read.Add(uint64(n))
			continue
		}
		if in.stopped() {
			return
		}
		if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			in.loadErr.Store(&err)
			return
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-in.stop:
			return
		case <-tick.C:
		}
		backlog := int64(in.written.Load()) - int64(in.read.Load()) - int64(in.l.Unread)
		for backlog > 0 {
			n, _, err := unix.Recvfrom(in.server, buf[:min(int64(len(buf)), backlog)], unix.MSG_DONTWAIT)
			if n <= 0 || err != nil {
				break
			}
			in.read.Add(uint64(n))
			backlog -= int64(n)
		}
	}
}

// Counters reads the lab namespace's TcpExt counters.
func (in *Instance) Counters() (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/net/netstat", in.pid, in.tid))
	if err != nil {
		return nil, fmt.Errorf("tcp-collapse: read the namespace's netstat: %w", err)
	}
	return parseTcpExt(b), nil
}

func parseTcpExt(b []byte) map[string]int64 {
	out := map[string]int64{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		k, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(k) == 0 || k[0] != "TcpExt:" || len(k) != len(v) {
			continue
		}
		for j := 1; j < len(k); j++ {
			if n, err := strconv.ParseInt(v[j], 10, 64); err == nil {
				out[k[j]] = n
			}
		}
	}
	return out
}

func nsInode(link string) (uint64, error) {
	t, err := os.Readlink(link)
	if err != nil {
		return 0, fmt.Errorf("tcp-collapse: %w", err)
	}
	_, rest, _ := strings.Cut(t, "[")
	n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("tcp-collapse: namespace link %q: %w", t, err)
	}
	return n, nil
}

// Netns is the inode of the lab's network namespace ("net:[INODE]").
func (in *Instance) Netns() uint64 { return in.netns }

// SenderTID is the thread that runs in the namespace and sends.
func (in *Instance) SenderTID() int { return in.tid }

// Describe implements lab.Instance.
func (in *Instance) Describe() string {
	return fmt.Sprintf("network namespace net:[%d] (thread %d of pid %d): a TCP connection on its loopback sends %d-byte segments\nto a reader that leaves %d MiB unread; tcp_rmem max %d MiB there. Watch: wolf softirq",
		in.netns, in.tid, in.pid, in.l.Segment, in.l.Unread>>20, in.l.RmemMax>>20)
}

// Tasks implements lab.Instance: the offender is the sending thread (on
// loopback NET_RX runs in its softirq context); there are no victims.
func (in *Instance) Tasks() lab.Tasks { return lab.Tasks{Offender: in.tid} }

// Close implements lab.Instance.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() {
		close(in.stop)
		for _, fd := range []int{in.client, in.server} {
			if fd >= 0 {
				_ = unix.Shutdown(fd, unix.SHUT_RDWR)
			}
		}
		in.wg.Wait()
		var errs []error
		for _, fd := range []int{in.client, in.server} {
			if fd >= 0 {
				errs = append(errs, unix.Close(fd))
			}
		}
		in.closeErr = errors.Join(errs...)
	})
	return in.closeErr
}

// WhyRoot implements lab.Privileged.
func (*Lab) WhyRoot() string { return "creates a network namespace of its own" }
