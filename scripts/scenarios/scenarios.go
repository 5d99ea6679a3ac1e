package main

// The scenarios: real workloads (stress-ng, fio) in real cgroups, and
// wolf's own labs where a pathology needs a stall no tool makes. Each run
// picks its parameters by its index (threads, sizes, limits, tools), so
// that the suite tries the labs' neighbours rather than the labs.

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

// Scenario is one workload and the root it must be diagnosed as.
type Scenario struct {
	Name string
	// What says the workload and the expected root, for the docs.
	What string
	// Tools must be on PATH (the runner refuses in one line without).
	Tools []string
	// V2 marks the scenarios the cgroup v2 pass (the qemu guest) runs.
	V2 bool
	// V1Only marks scenarios that need a cgroup v1 host (a root-level
	// blk-throttle rule, ext4 tools).
	V1Only bool
	// Setup starts the workload, waits for its steady state and says
	// what doctor must find.
	Setup func(r *Run) (Expect, error)
}

// pick chooses run i's value.
func pick[T any](i int, vals ...T) T { return vals[i%len(vals)] }

var scenarios = []Scenario{
	{
		Name:  "cpu-quota",
		What:  "stress-ng CPU hogs in a cgroup capped below one CPU; root: the cgroup's CPU quota",
		Tools: []string{"stress-ng"},
		V2:    true,
		Setup: func(r *Run) (Expect, error) {
			n, q := pick(r.Index, 4, 2, 8), pick(r.Index, 10, 20, 30)
			r.Params = fmt.Sprintf("stress-ng --cpu %d, quota %d ms per 100 ms", n, q)
			cg, err := r.cpuQuota("quota", q)
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, "stress-ng", "--cpu", strconv.Itoa(n), "--timeout", toolSecs()); err != nil {
				return Expect{}, err
			}
			if err := r.waitThrottled(cg); err != nil {
				return Expect{}, err
			}
			return Expect{Kinds: []string{KindCPUQuota}, Cgroup: cg.Path, Consumers: cg.PIDs(), ConsumerComm: "stress-ng",
				Numbers: []string{`quota`, `throttl`}}, nil
		},
	},
	{
		Name:  "cpu-quota-mmap",
		What:  "stress-ng --mmap workers (mmap/munmap under their mmap_lock) in a cgroup capped below one CPU, ps reading their cmdlines; root: the cgroup's CPU quota",
		Tools: []string{"stress-ng", "ps"},
		Setup: func(r *Run) (Expect, error) {
			n, q := pick(r.Index, 3, 2, 4), pick(r.Index, 15, 10, 20)
			r.Params = fmt.Sprintf("stress-ng --mmap %d --mmap-bytes 32M, quota %d ms per 100 ms, ps every 200 ms", n, q)
			cg, err := r.cpuQuota("quota-mmap", q)
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, "stress-ng", "--mmap", strconv.Itoa(n), "--mmap-bytes", "32M", "--timeout", toolSecs()); err != nil {
				return Expect{}, err
			}
			if err := r.psLoop(); err != nil {
				return Expect{}, err
			}
			if err := r.waitThrottled(cg); err != nil {
				return Expect{}, err
			}
			return Expect{Kinds: []string{KindCPUQuota}, Cgroup: cg.Path, Consumers: cg.PIDs(), ConsumerComm: "stress-ng",
				Numbers: []string{`quota`, `throttl`}}, nil
		},
	},
	{
		Name: "cpu-quota-lock",
		What: "wolf's cpu-quota-lock lab (spinners use a cgroup's quota up while a thread holds the mmap_lock, a ps-like reader waits), several spinner counts; root: the cgroup's CPU quota",
		V2:   true,
		Setup: func(r *Run) (Expect, error) {
			v := pick(r.Index, 0, 2, 6)
			r.Params = fmt.Sprintf("wolf lab run cpu-quota-lock --victims %d (spinners; 0: the lab's default)", v)
			l, err := r.Lab("cpu-quota-lock", v)
			if err != nil {
				return Expect{}, err
			}
			r.sleep(2 * time.Second)
			// The quota's consumer is the lab's process: its spinners and
			// its holder (the offender is the holder thread), whichever
			// the diagnosis names.
			return Expect{Kinds: []string{KindCPUQuota}, Cgroup: CgroupOf(l.Offender, "cpu"), Consumers: []int{l.Offender, tgid(l.Offender)},
				Numbers: []string{`quota`, `throttl`}}, nil
		},
	},
	{
		Name:  "host-cpu",
		What:  "more stress-ng hogs than CPUs, no limit; root: the host's CPUs, stress-ng named with its share",
		Tools: []string{"stress-ng"},
		V2:    true,
		Setup: func(r *Run) (Expect, error) {
			n := pick(r.Index, 4, 8, 6) * runtime.NumCPU() / 2
			args := pick(r.Index, []string{"--cpu", strconv.Itoa(n)}, []string{"--matrix", strconv.Itoa(n)}, []string{"--cpu", strconv.Itoa(n), "--cpu-method", "fft"})
			r.Params = "stress-ng " + strings.Join(args, " ")
			cg, err := r.NewCgroup("hostcpu", "cpu")
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, append([]string{"stress-ng"}, append(args, "--timeout", toolSecs())...)...); err != nil {
				return Expect{}, err
			}
			r.sleep(3 * time.Second)
			return Expect{Kinds: []string{KindHostCPU}, Consumers: cg.PIDs(), ConsumerComm: "stress-ng", Numbers: []string{`pct|share`}}, nil
		},
	},
	{
		Name:  "memcg-thrash",
		What:  "fio readers of a file bigger than their memory cgroup's limit (page-cache thrash); root: the cgroup's memory limit",
		Tools: []string{"fio"},
		V2:    true,
		Setup: func(r *Run) (Expect, error) {
			jobs, limit, size, bs := pick(r.Index, 4, 2, 6), pick(r.Index, 64, 96, 64), pick(r.Index, 384, 256, 320), pick(r.Index, "16k", "4k", "64k")
			r.Params = fmt.Sprintf("fio %d randread jobs, bs %s, %d MiB file, limit %d MiB", jobs, bs, size, limit)
			f, err := r.File("thrash", size)
			if err != nil {
				return Expect{}, err
			}
			cg, err := r.memLimit("thrash", limit)
			if err != nil {
				return Expect{}, err
			}
			// Every page of the file has been through the cgroup once
			// before fio starts (a sequential pass in the cgroup, and fio
			// does not drop the cache it finds): its misses are refaults
			// of pages the limit evicted from the first read on. Without
			// it a slow machine (qemu TCG: 25 MB/s) spends the whole
			// window on first reads of a file fio has not yet covered,
			// and that is a cold file, not a thrash (60-75% of vda's
			// reads were not refaults there).
			if err := r.prime(cg, f); err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, fio("thrash", f, "randread", bs, jobs, false, "--size="+strconv.Itoa(size)+"M", "--invalidate=0")...); err != nil {
				return Expect{}, err
			}
			if err := r.waitMemFull(cg); err != nil {
				return Expect{}, err
			}
			return Expect{Kinds: []string{KindMemcgLimit}, Cgroup: cg.Path, Consumers: cg.PIDs(), ConsumerComm: "fio", Numbers: []string{`limit`}}, nil
		},
	},
	{
		Name: "memcg-mmap-lock",
		What: "wolf's memcg-mmap-lock lab (a process at its memory cgroup's limit reclaims under its mmap_lock, writers queue, a ps-like reader waits: the ClickHouse story), several thread counts; root: the cgroup's memory limit",
		V2:   true,
		Setup: func(r *Run) (Expect, error) {
			v := pick(r.Index, 8, 4, 11) // the lab refuses 12 and more (they would OOM its cgroup)
			r.Params = fmt.Sprintf("wolf lab run memcg-mmap-lock --victims %d (populating threads)", v)
			l, err := r.Lab("memcg-mmap-lock", v)
			if err != nil {
				return Expect{}, err
			}
			r.sleep(2 * time.Second)
			return Expect{Kinds: []string{KindMemcgLimit}, Cgroup: CgroupOf(l.Offender, "memory"), Consumers: []int{l.Offender},
				Numbers: []string{`limit`}}, nil
		},
	},
	{
		Name:  "memcg-vm-mmap",
		What:  "stress-ng --vm (anonymous) and --mmap (file-backed, mmap/munmap) at a memory cgroup's limit, ps reading their cmdlines; root: the cgroup's memory limit",
		Tools: []string{"stress-ng", "ps"},
		Setup: func(r *Run) (Expect, error) {
			// Anonymous memory (no swap: not reclaimable) fills 45% of the
			// limit and sleeps (--vm-hang 0: touched once, kept); the
			// file-backed mappings (the whole limit's worth between the
			// workers) do not fit beside it, so the cgroup reclaims their
			// pages while the workers fault them back under their
			// mmap_lock, for as long as they run. stress-ng divides the
			// --*-bytes between its workers; a working set that fits
			// would reclaim once and then sit quietly under the limit.
			limit, mm := pick(r.Index, 160, 128, 192), pick(r.Index, 4, 8, 2)
			vmMB, mmMB := limit*45/100, limit
			r.Params = fmt.Sprintf("limit %d MiB; stress-ng --vm 1 --vm-bytes %dM --vm-hang 0, --mmap %d --mmap-file --mmap-bytes %dM", limit, vmMB, mm, mmMB)
			cg, err := r.memLimit("vm", limit)
			if err != nil {
				return Expect{}, err
			}
			tmp, err := r.TempDir("vm")
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, "stress-ng", "--temp-path", tmp, "--vm", "1", "--vm-bytes", fmt.Sprintf("%dM", vmMB), "--vm-hang", "0",
				"--mmap", strconv.Itoa(mm), "--mmap-file", "--mmap-bytes", fmt.Sprintf("%dM", mmMB), "--timeout", toolSecs()); err != nil {
				return Expect{}, err
			}
			if err := r.psLoop(); err != nil {
				return Expect{}, err
			}
			if err := r.waitMemFull(cg); err != nil {
				return Expect{}, err
			}
			return Expect{Kinds: []string{KindMemcgLimit}, Cgroup: cg.Path, Consumers: cg.PIDs(), ConsumerComm: "stress-ng", Numbers: []string{`limit`}}, nil
		},
	},
	{
		Name:  "io-throttle-loop",
		What:  "fio direct reads or writes on a loop device from a cgroup whose blk-throttle limit (blkio.throttle.*_bps_device, io.max) caps it; root: the cgroup's I/O limit on that device",
		Tools: []string{"fio"},
		V2:    true,
		Setup: func(r *Run) (Expect, error) {
			rw, bs, jobs, mib := pick(r.Index, "randread", "randwrite", "read"), pick(r.Index, "4k", "16k", "64k"), pick(r.Index, 1, 2, 4), pick(r.Index, 1, 2, 4)
			r.Params = fmt.Sprintf("fio %s direct, bs %s, %d jobs; limit %d MiB/s", rw, bs, jobs, mib)
			back, err := r.File("loop", 128)
			if err != nil {
				return Expect{}, err
			}
			dev, mm, err := r.Loop(back)
			if err != nil {
				return Expect{}, err
			}
			cg, err := r.ioLimit("ioloop", mm, strings.HasSuffix(rw, "write"), mib)
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, fio("throttle", "/dev/"+dev, rw, bs, jobs, true)...); err != nil {
				return Expect{}, err
			}
			r.sleep(3 * time.Second)
			return Expect{Kinds: []string{KindIOThrottle}, Devices: []string{dev}, Cgroup: cg.Path, Consumers: cg.PIDs(), ConsumerComm: "fio",
				Numbers: []string{`bps|iops|limit`}}, nil
		},
	},
	{
		Name:  "io-throttle-disk",
		What:  "fio direct reads or writes of a file on the real disk from a cgroup whose blk-throttle limit caps that disk; root: the cgroup's I/O limit on the disk",
		Tools: []string{"fio"},
		V2:    true,
		Setup: func(r *Run) (Expect, error) {
			rw, bs, jobs, mib := pick(r.Index, "randread", "randwrite", "randread"), pick(r.Index, "16k", "4k", "64k"), pick(r.Index, 2, 1, 4), pick(r.Index, 2, 1, 4)
			r.Params = fmt.Sprintf("fio %s direct, bs %s, %d jobs, 64 MiB file; limit %d MiB/s", rw, bs, jobs, mib)
			f, err := r.File("disk", 64)
			if err != nil {
				return Expect{}, err
			}
			dev, mm, err := diskOf(r.Scratch)
			if err != nil {
				return Expect{}, err
			}
			cg, err := r.ioLimit("iodisk", mm, strings.HasSuffix(rw, "write"), mib)
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, fio("throttle", f, rw, bs, jobs, true)...); err != nil {
				return Expect{}, err
			}
			r.sleep(3 * time.Second)
			return Expect{Kinds: []string{KindIOThrottle}, Devices: []string{dev}, Cgroup: cg.Path, Consumers: cg.PIDs(), ConsumerComm: "fio",
				Numbers: []string{`bps|iops|limit`}}, nil
		},
	},
	{
		Name:   "dirty-throttle",
		What:   "a fast buffered fio writer on ext4 on a loop device whose writeback is throttled (a root blk-throttle rule; the device's bdi strictly limited): balance_dirty_pages pauses it; root: the throttled device's writeback",
		Tools:  []string{"fio", "mkfs.ext4"},
		V1Only: true,
		Setup: func(r *Run) (Expect, error) {
			mib, dirty, bs := pick(r.Index, 4, 2, 8), pick(r.Index, 32, 16, 64), pick(r.Index, "1M", "256k", "64k")
			r.Params = fmt.Sprintf("fio write buffered, bs %s; writeback %d MiB/s, bdi max %d MiB dirty", bs, mib, dirty)
			back, err := r.File("dirty", 512)
			if err != nil {
				return Expect{}, err
			}
			dev, mm, err := r.Loop(back)
			if err != nil {
				return Expect{}, err
			}
			mnt, err := r.Mount(dev)
			if err != nil {
				return Expect{}, err
			}
			if err := r.rootWriteLimit(mm, mib); err != nil {
				return Expect{}, err
			}
			bdi := "/sys/block/" + dev + "/bdi/"
			if _, err := os.Stat(bdi + "strict_limit"); err == nil {
				if err := r.SetFile(bdi+"strict_limit", "1", "0"); err != nil {
					return Expect{}, err
				}
				if err := r.SetFile(bdi+"max_bytes", strconv.Itoa(dirty<<20), "0"); err != nil {
					return Expect{}, err
				}
			}
			cg, err := r.NewCgroup("dirty", "io")
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, fio("dirty", filepath.Join(mnt, "f"), "write", bs, 1, false, "--size=400M")...); err != nil {
				return Expect{}, err
			}
			r.sleep(4 * time.Second)
			return Expect{Kinds: []string{KindIOThrottle}, Devices: []string{dev}, Consumers: cg.PIDs(), ConsumerComm: "fio"}, nil
		},
	},
	{
		Name:   "slow-device",
		What:   "fio direct reads on a loop device backed by a file on another loop device whose reads are throttled for the readers' cgroup (no dm-delay here): a device slow by itself as its users see it; root: the slow device (or the throttle under it), not the host",
		Tools:  []string{"fio", "mkfs.ext4"},
		V1Only: true,
		Setup: func(r *Run) (Expect, error) {
			mib, bs, jobs := pick(r.Index, 2, 1, 4), pick(r.Index, "16k", "4k", "64k"), pick(r.Index, 1, 2, 4)
			r.Params = fmt.Sprintf("fio randread direct, bs %s, %d jobs; the lower device %d MiB/s", bs, jobs, mib)
			back, err := r.File("slowlow", 160)
			if err != nil {
				return Expect{}, err
			}
			low, lowmm, err := r.Loop(back)
			if err != nil {
				return Expect{}, err
			}
			mnt, err := r.Mount(low)
			if err != nil {
				return Expect{}, err
			}
			upperFile := filepath.Join(mnt, "upper")
			if err := writeFile(upperFile, 64); err != nil {
				return Expect{}, err
			}
			up, _, err := r.Loop(upperFile)
			if err != nil {
				return Expect{}, err
			}
			// The upper loop device's worker reads the lower one on
			// behalf of the cgroup that issued the reads (loop charges
			// its I/O to it), so the lower device's limit is set there:
			// a root rule would not hold the worker back.
			cg, err := r.ioLimit("slowdev", lowmm, false, mib)
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, fio("slow", "/dev/"+up, "randread", bs, jobs, true)...); err != nil {
				return Expect{}, err
			}
			r.sleep(3 * time.Second)
			return Expect{Kinds: []string{KindDevice, KindIOThrottle}, Devices: []string{up, low}, Consumers: cg.PIDs(), ConsumerComm: "fio"}, nil
		},
	},
	{
		Name: "fuse-stall",
		What: "wolf's FUSE labs (ps-hang-fuse: a thread holds its mmap_lock while it waits on a FUSE page, ps hangs; fuse-rwsem: writers queue on a file's i_rwsem) with a daemon that does not answer; root: the FUSE daemon",
		V2:   true,
		Setup: func(r *Run) (Expect, error) {
			name, v := pick(r.Index, "ps-hang-fuse", "fuse-rwsem", "ps-hang-fuse"), pick(r.Index, 0, 3, 4)
			r.Params = fmt.Sprintf("wolf lab run %s --victims %d", name, v)
			l, err := r.Lab(name, v)
			if err != nil {
				return Expect{}, err
			}
			r.sleep(2 * time.Second)
			return Expect{Kinds: []string{KindFUSEDaemon}, PIDs: []int{l.PID()}}, nil
		},
	},
	{
		Name: "mutex-convoy",
		What: "wolf's fuse-mutex lab: lookups convoy on a directory's kernel mutex whose holder waits on a FUSE daemon; root: the daemon (or the mutex's holder), the holder named",
		Setup: func(r *Run) (Expect, error) {
			v := pick(r.Index, 4, 2, 8)
			r.Params = fmt.Sprintf("wolf lab run fuse-mutex --victims %d", v)
			l, err := r.Lab("fuse-mutex", v)
			if err != nil {
				return Expect{}, err
			}
			r.sleep(2 * time.Second)
			return Expect{Kinds: []string{KindFUSEDaemon, KindLockHolder}, PIDs: []int{l.PID(), l.Offender}, Consumers: []int{l.Offender}}, nil
		},
	},
	{
		Name:  "softirq",
		What:  "softirq load: stress-ng TCP/UDP streams over loopback (root: softirq time, or the CPUs with stress-ng named), or wolf's tcp-collapse lab (root: softirq time)",
		Tools: []string{"stress-ng"},
		Setup: func(r *Run) (Expect, error) {
			if r.Index%3 == 2 {
				r.Params = "wolf lab run tcp-collapse"
				if _, err := r.Lab("tcp-collapse", 0); err != nil {
					return Expect{}, err
				}
				r.sleep(2 * time.Second)
				return Expect{Kinds: []string{KindSoftirq}}, nil
			}
			args := pick(r.Index, []string{"--sock", "2", "--sock-domain", "ipv4"}, []string{"--udp", "4", "--udp-domain", "ipv4"})
			r.Params = "stress-ng " + strings.Join(args, " ")
			cg, err := r.NewCgroup("softirq", "cpu")
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, append([]string{"stress-ng"}, append(args, "--timeout", toolSecs())...)...); err != nil {
				return Expect{}, err
			}
			r.sleep(3 * time.Second)
			// Loopback traffic's softirq work runs in its senders'
			// context as much as in ksoftirqd: stress-ng's processes
			// saturate the CPUs, a fifth of it in softirq. Either
			// root is right if it names them.
			return Expect{Kinds: []string{KindSoftirq, KindHostCPU}, Consumers: cg.PIDs(), ConsumerComm: "stress-ng"}, nil
		},
	},
	{
		Name:  "neg-cpu-busy",
		What:  "negative control: exactly as many stress-ng hogs as CPUs (all busy, nobody waiting)",
		Tools: []string{"stress-ng"},
		V2:    true,
		Setup: func(r *Run) (Expect, error) {
			load := pick(r.Index, 100, 90, 100)
			r.Params = fmt.Sprintf("stress-ng --cpu %d --cpu-load %d", runtime.NumCPU(), load)
			cg, err := r.NewCgroup("cpubusy", "cpu")
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, "stress-ng", "--cpu", strconv.Itoa(runtime.NumCPU()), "--cpu-load", strconv.Itoa(load), "--timeout", toolSecs()); err != nil {
				return Expect{}, err
			}
			r.sleep(3 * time.Second)
			return Expect{Negative: true}, nil
		},
	},
	{
		Name:  "neg-io-stream",
		What:  "negative control: a heavy unthrottled fio stream (sequential direct reads or writes) on the real disk",
		Tools: []string{"fio"},
		V2:    true,
		Setup: func(r *Run) (Expect, error) {
			rw, bs := pick(r.Index, "read", "write", "read"), pick(r.Index, "1M", "256k", "128k")
			r.Params = fmt.Sprintf("fio %s direct, bs %s, 256 MiB file, no limit", rw, bs)
			f, err := r.File("stream", 256)
			if err != nil {
				return Expect{}, err
			}
			cg, err := r.NewCgroup("stream", "io")
			if err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, fio("stream", f, rw, bs, 1, true)...); err != nil {
				return Expect{}, err
			}
			r.sleep(3 * time.Second)
			return Expect{Negative: true}, nil
		},
	},
	{
		Name:  "neg-pagecache-fits",
		What:  "negative control: fio readers of a file well under their memory cgroup's limit (the page cache holds it)",
		Tools: []string{"fio"},
		V2:    true,
		// The file is read once in the cgroup first and fio keeps its
		// pages (--invalidate=0), so the readers are served from the page
		// cache: with fio's default invalidation each pass drops the file
		// and they read it from the disk again, a different workload.
		// Each job reads at a fixed rate: from the cache a buffered reader
		// is CPU-bound, and unrated jobs beyond the CPU count would
		// saturate the host, a true diagnosis and not this control. The
		// rates are low because fio's rate limiter spins in user space:
		// one 16k job at 40 MiB/s used 28% of a CPU here (6% at 10 MiB/s),
		// so 4 jobs at 40 MiB/s kept 2 CPUs busy by themselves.
		Setup: func(r *Run) (Expect, error) {
			jobs, size, limit := pick(r.Index, 4, 2, 6), pick(r.Index, 64, 128, 96), pick(r.Index, 512, 768, 512)
			rate := pick(r.Index, "10m", "20m", "6m")
			r.Params = fmt.Sprintf("fio %d randread jobs at %s/s each, %d MiB file read once first, limit %d MiB", jobs, rate, size, limit)
			f, err := r.File("fits", size)
			if err != nil {
				return Expect{}, err
			}
			cg, err := r.memLimit("fits", limit)
			if err != nil {
				return Expect{}, err
			}
			if err := r.prime(cg, f); err != nil {
				return Expect{}, err
			}
			if _, err := r.Start(cg, fio("fits", f, "randread", "16k", jobs, false, "--size="+strconv.Itoa(size)+"M", "--invalidate=0", "--rate="+rate)...); err != nil {
				return Expect{}, err
			}
			r.sleep(4 * time.Second)
			return Expect{Negative: true}, nil
		},
	},
}

// fio's command line for a time-based job of jobs processes.
func fio(name, file, rw, bs string, jobs int, direct bool, extra ...string) []string {
	d := "0"
	if direct {
		d = "1"
	}
	args := []string{"fio", "--name=" + name, "--filename=" + file, "--rw=" + rw, "--bs=" + bs, "--numjobs=" + strconv.Itoa(jobs),
		"--ioengine=psync", "--direct=" + d, "--time_based", "--runtime=" + toolSecs(), "--invalidate=1", "--group_reporting", "--output=/dev/null"}
	return append(args, extra...)
}

func (r *Run) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-r.ctx.Done():
	}
}

// cpuQuota makes a cgroup with a CPU quota of ms per 100 ms.
func (r *Run) cpuQuota(what string, ms int) (*Cgroup, error) {
	cg, err := r.NewCgroup(what, "cpu")
	if err != nil {
		return nil, err
	}
	if r.V2 {
		err = cg.Set("cpu", "cpu.max", fmt.Sprintf("%d 100000", ms*1000))
	} else {
		err = cg.Set("cpu", "cpu.cfs_period_us", "100000")
		if err == nil {
			err = cg.Set("cpu", "cpu.cfs_quota_us", strconv.Itoa(ms*1000))
		}
	}
	return cg, err
}

// waitThrottled waits for the cgroup's first throttled periods, then 2 s.
func (r *Run) waitThrottled(cg *Cgroup) error {
	err := lab.WaitFor(r.ctx, 15*time.Second, "the cgroup to be throttled", func() (bool, error) {
		for _, l := range strings.Split(cg.Read("cpu", "cpu.stat"), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "nr_throttled" && f[1] != "0" {
				return true, nil
			}
		}
		return false, nil
	})
	r.sleep(2 * time.Second)
	return err
}

// memLimit makes a cgroup with a memory limit of mib.
func (r *Run) memLimit(what string, mib int) (*Cgroup, error) {
	cg, err := r.NewCgroup(what, "memory")
	if err != nil {
		return nil, err
	}
	if r.V2 {
		err = cg.Set("memory", "memory.max", strconv.Itoa(mib<<20))
	} else {
		err = cg.Set("memory", "memory.limit_in_bytes", strconv.Itoa(mib<<20))
	}
	return cg, err
}

// waitMemFull waits for the cgroup to hit its limit (v1: memory.failcnt;
// v2: the "max" count of memory.events), then 2 s.
func (r *Run) waitMemFull(cg *Cgroup) error {
	err := lab.WaitFor(r.ctx, 30*time.Second, "the cgroup to reach its memory limit", func() (bool, error) {
		if !r.V2 {
			n, _ := strconv.ParseInt(cg.Read("memory", "memory.failcnt"), 10, 64)
			return n > 0, nil
		}
		for _, l := range strings.Split(cg.Read("memory", "memory.events"), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "max" && f[1] != "0" {
				return true, nil
			}
		}
		return false, nil
	})
	r.sleep(2 * time.Second)
	return err
}

// prime reads file once, sequentially, inside cg, and waits for it
// (bounded: a stuck read is killed with its process group).
func (r *Run) prime(cg *Cgroup, file string) error {
	c, err := r.Start(cg, "dd", "if="+file, "of=/dev/null", "bs=1M")
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("dd if=%s in %s: %w", file, cg.Path, err)
		}
		return nil
	case <-time.After(lab.Scaled(45 * time.Second)):
		err = fmt.Errorf("dd if=%s in %s: not done in %s", file, cg.Path, lab.Scaled(45*time.Second))
	case <-r.ctx.Done():
		err = fmt.Errorf("dd if=%s in %s: %w", file, cg.Path, r.ctx.Err())
	}
	_ = unix.Kill(-c.Process.Pid, unix.SIGKILL)
	<-done
	return err
}

// ioLimit makes a cgroup whose reads (or writes) on dev (MAJ:MIN) are
// capped at mib MiB/s.
func (r *Run) ioLimit(what, mm string, write bool, mib int) (*Cgroup, error) {
	cg, err := r.NewCgroup(what, "io")
	if err != nil {
		return nil, err
	}
	bps := strconv.Itoa(mib << 20)
	if r.V2 {
		k := "rbps"
		if write {
			k = "wbps"
		}
		return cg, cg.Set("io", "io.max", mm+" "+k+"="+bps)
	}
	f := "blkio.throttle.read_bps_device"
	if write {
		f = "blkio.throttle.write_bps_device"
	}
	return cg, cg.Set("io", f, mm+" "+bps)
}

// rootLimit caps reads or writes of a device this run made, for every
// cgroup (the flusher's writeback included: on v1 it is the root's).
func (r *Run) rootLimit(mm string, write bool, mib int) error {
	root, err := r.ioRoot()
	if err != nil {
		return err
	}
	f := "blkio.throttle.read_bps_device"
	if write {
		f = "blkio.throttle.write_bps_device"
	}
	return r.SetFile(filepath.Join(root, f), fmt.Sprintf("%s %d", mm, mib<<20), mm+" 0")
}

func (r *Run) rootWriteLimit(mm string, mib int) error { return r.rootLimit(mm, true, mib) }

func (r *Run) ioRoot() (string, error) {
	if r.V2 {
		return "", fmt.Errorf("a root blk-throttle rule needs cgroup v1 (v2 has no io.max on its root)")
	}
	root, _, err := labproc.Hierarchy(r.ctx, "blkio", 1)
	return root, err
}

// psLoop runs ps over every process's command line every 200 ms, as a
// monitoring agent would, for the run's length.
func (r *Run) psLoop() error {
	_, err := r.Start(nil, "/bin/sh", "-c", "end=$(($(date +%s)+"+toolSecs()+")); while [ $(date +%s) -lt $end ]; do ps -eo pid,args >/dev/null; sleep 0.2; done")
	return err
}

// TempDir makes a directory under Scratch for a workload's own files,
// ledgered as a tree.
func (r *Run) TempDir(what string) (string, error) {
	d := filepath.Join(r.Scratch, lab.Name("scen-"+what))
	it := lab.Tree(d)
	if err := r.led.Add(it); err != nil {
		return "", err
	}
	if err := os.Mkdir(d, 0o700); err != nil {
		_ = r.led.Done(it)
		return "", err
	}
	r.later(func() { _ = os.RemoveAll(d); _ = r.led.Done(it) })
	return d, nil
}

// writeFile fills path with mib MiB of data and syncs it.
func writeFile(path string, mib int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for i := 0; i < mib; i++ {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// diskOf is the whole disk under dir's file system: its kernel name and
// MAJ:MIN (blk-throttle rules go on disks, not partitions).
func diskOf(dir string) (name, mm string, err error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", "", err
	}
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	p, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return "", "", fmt.Errorf("%s is not on a block device (%w)", dir, err)
	}
	if _, err := os.Stat(filepath.Join(p, "partition")); err == nil {
		p = filepath.Dir(p)
	}
	b, err := os.ReadFile(filepath.Join(p, "dev"))
	if err != nil {
		return "", "", err
	}
	return filepath.Base(p), strings.TrimSpace(string(b)), nil
}

// toolSecs is how long the tools run, in seconds: 50, stretched on a slow
// (emulated) machine as the labs' deadlines are. A tool's run is no stall:
// its tasks never sleep in D for long.
func toolSecs() string { return strconv.Itoa(int(lab.Scaled(50 * time.Second).Seconds())) }
