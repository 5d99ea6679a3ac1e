package memcg

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// SystemPressure is the host-wide memory PSI file.
const SystemPressure = "/proc/pressure/memory"

// PSI is one pressure stall information file (/proc/pressure/memory, or a
// v2 cgroup's memory.pressure): the share of time some (or all) tasks were
// stalled on memory, as the kernel's running averages and as cumulative
// totals, whose deltas give the share over any window.
type PSI struct {
	SomeAvg10, FullAvg10 float64       // percent, over the last 10 s
	SomeTotal, FullTotal time.Duration // since boot (or the cgroup's creation)
}

// ReadPSI reads a pressure file.
func ReadPSI(file string) (PSI, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return PSI{}, fmt.Errorf("memcg: %w", err)
	}
	p, err := ParsePSI(b)
	if err != nil {
		return PSI{}, fmt.Errorf("memcg: %s: %w", file, err)
	}
	return p, nil
}

// ParsePSI parses the "some avg10=… avg60=… avg300=… total=…" lines.
func ParsePSI(b []byte) (PSI, error) {
	var p PSI
	seen := false
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var avg float64
		var total time.Duration
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return PSI{}, fmt.Errorf("PSI line %q: field %q", line, kv)
			}
			switch k {
			case "avg10":
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return PSI{}, fmt.Errorf("PSI line %q: %w", line, err)
				}
				avg = x
			case "total":
				x, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return PSI{}, fmt.Errorf("PSI line %q: %w", line, err)
				}
				total = time.Duration(x) * time.Microsecond
			}
		}
		switch f[0] {
		case "some":
			p.SomeAvg10, p.SomeTotal, seen = avg, total, true
		case "full":
			p.FullAvg10, p.FullTotal = avg, total
		}
	}
	if !seen {
		return PSI{}, fmt.Errorf("no \"some\" line in %q", strings.TrimSpace(string(b)))
	}
	return p, nil
}

// StallPct is the share of window during which some (full: all non-idle)
// tasks were stalled, from two readings of the cumulative totals.
func StallPct(before, after PSI, window time.Duration, full bool) float64 {
	if window <= 0 {
		return 0
	}
	d := after.SomeTotal - before.SomeTotal
	if full {
		d = after.FullTotal - before.FullTotal
	}
	if d < 0 {
		return 0
	}
	return 100 * d.Seconds() / window.Seconds()
}
