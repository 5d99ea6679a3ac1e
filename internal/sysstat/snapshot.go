package sysstat

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/wolf-investigator/wolf/internal/procfs"
)

// Snapshot is the system's counters at one moment.
type Snapshot struct {
	At   time.Time
	Stat *Stat
	Load *LoadAvg
	Mem  map[string]uint64 // /proc/meminfo, kB
	VM   map[string]uint64 // /proc/vmstat
	// PSI is keyed "cpu", "memory", "io"; PSIMissing says why it is
	// empty (no CONFIG_PSI, psi=0 on the command line).
	PSI        map[string]*PSI
	PSIMissing string
	Disks      []DiskStat
	// WholeDisks names the devices of /sys/block: the rest of diskstats
	// are partitions, whose I/O their disk already counts. Nil when
	// /sys/block could not be listed.
	WholeDisks map[string]bool
	Net        []NetDev
	SNMP       map[string]int64 // "Tcp.RetransSegs", "TcpExt.ListenOverflows", …
	// Errors names the files that could not be read or parsed, and why.
	Errors map[string]string
	// SelfCPU is the CPU time (user and system) this process had used, so
	// that the checklist can tell the host's load from wolf's own; 0 in a
	// snapshot not taken by a live sampler.
	SelfCPU time.Duration `json:",omitempty"`
}

// procFiles are the files a snapshot reads, relative to the procfs root.
var procFiles = []string{"stat", "loadavg", "meminfo", "vmstat", "pressure/cpu", "pressure/memory", "pressure/io",
	"diskstats", "net/dev", "net/snmp", "net/netstat"}

// Files is the raw content of a snapshot's files, keyed as procFiles, plus
// "sys/block": the names in /sys/block, one a line.
type Files map[string][]byte

// readFiles reads every file of a snapshot at once, each under the
// reader's timeout, so a snapshot takes one timeout at worst, not one per
// file.
func readFiles(ctx context.Context, r procfs.Reader, procRoot, sysRoot string) (Files, map[string]error) {
	files := Files{}
	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range procFiles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := r.ReadFile(ctx, filepath.Join(procRoot, name))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[name] = err
				return
			}
			files[name] = b
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		names, err := r.ReadDirNames(ctx, filepath.Join(sysRoot, "block"))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs["sys/block"] = err
			return
		}
		var b []byte
		for _, n := range names {
			b = append(append(b, n...), '\n')
		}
		files["sys/block"] = b
	}()
	wg.Wait()
	return files, errs
}

// ParseFiles turns a snapshot's files into counters. readErrs are the
// files that could not be read; parse failures are added to them.
func ParseFiles(at time.Time, files Files, readErrs map[string]error) Snapshot {
	s := Snapshot{At: at, Errors: map[string]string{}, PSI: map[string]*PSI{}}
	for name, err := range readErrs {
		if !isPSIFile(name) {
			s.Errors[name] = err.Error()
		}
	}
	fail := func(name string, err error) { s.Errors[name] = err.Error() }
	var err error
	if b, ok := files["stat"]; ok {
		if s.Stat, err = ParseStat(b); err != nil {
			fail("stat", err)
		}
	}
	if b, ok := files["loadavg"]; ok {
		if s.Load, err = ParseLoadAvg(b); err != nil {
			fail("loadavg", err)
		}
	}
	if b, ok := files["meminfo"]; ok {
		s.Mem = ParseKeyValues(b)
	}
	if b, ok := files["vmstat"]; ok {
		s.VM = ParseKeyValues(b)
	}
	for _, res := range []string{"cpu", "memory", "io"} {
		name := "pressure/" + res
		b, ok := files[name]
		if !ok {
			continue
		}
		p, err := ParsePSI(b)
		if err != nil {
			fail(name, err)
			continue
		}
		s.PSI[res] = p
	}
	if len(s.PSI) == 0 {
		s.PSIMissing = psiMissing(readErrs)
	}
	if b, ok := files["diskstats"]; ok {
		if s.Disks, err = ParseDiskstats(b); err != nil {
			fail("diskstats", err)
		}
	}
	if b, ok := files["sys/block"]; ok {
		s.WholeDisks = map[string]bool{}
		for _, n := range splitLines(b) {
			s.WholeDisks[n] = true
		}
	}
	if b, ok := files["net/dev"]; ok {
		if s.Net, err = ParseNetDev(b); err != nil {
			fail("net/dev", err)
		}
	}
	s.SNMP = map[string]int64{}
	for _, name := range []string{"net/snmp", "net/netstat"} {
		if b, ok := files[name]; ok {
			if err := ParseSNMP(b, s.SNMP); err != nil {
				fail(name, err)
			}
		}
	}
	return s
}

func isPSIFile(name string) bool {
	return name == "pressure/cpu" || name == "pressure/memory" || name == "pressure/io"
}

// psiMissing says in plain words why no pressure file could be read.
func psiMissing(errs map[string]error) string {
	err := errs["pressure/cpu"]
	switch {
	case err == nil:
		return "no pressure file could be parsed"
	case errors.Is(err, syscall.ENOENT):
		return "the kernel has no PSI (/proc/pressure is absent: built without CONFIG_PSI)"
	case errors.Is(err, syscall.EOPNOTSUPP):
		return "PSI is disabled on this kernel (boot with psi=1)"
	}
	return fmt.Sprintf("PSI unreadable: %v", err)
}

func splitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			if i > start {
				out = append(out, string(b[start:i]))
			}
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, string(b[start:]))
	}
	return out
}
