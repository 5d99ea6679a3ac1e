// Package human prints numbers the way wolf's findings and renderers show
// them to people: durations, percentages, byte sizes, counts and plurals,
// with the precision a reader needs and no more ("41 s", "1.5 ms", "4.2%",
// "32 MiB", "1.2M", "3 tasks"). Every investigator and renderer uses it, so
// one quantity reads the same everywhere.
//
// Evidence in --format json stays raw (numbers with units in the key
// names); Evidence humanises such a pair for the HTML report.
package human

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// durationUnits are the units Duration picks from, largest first.
var durationUnits = []struct {
	name string
	size time.Duration
}{{"s", time.Second}, {"ms", time.Millisecond}, {"µs", time.Microsecond}, {"ns", 1}}

// Duration prints d in the largest unit it reaches, with two significant
// digits below ten and whole numbers above: "41 s", "1.5 s", "2 s",
// "23 ms", "1.3 ms", "850 µs", "120 ns". Seconds stay seconds however many
// (a hung task's "3600 s" compares at a glance with its "120 s" timeout).
func Duration(d time.Duration) string {
	if d < 0 {
		return "-" + Duration(-d)
	}
	if d == 0 {
		return "0 s"
	}
	for i, u := range durationUnits {
		if d < u.size && i < len(durationUnits)-1 {
			continue
		}
		s := short(float64(d) / float64(u.size))
		if s == "1000" && i > 0 { // 999.96 ms is 1 s
			return Duration(d.Round(durationUnits[i-1].size))
		}
		return s + " " + u.name
	}
	panic("unreachable")
}

// short prints v (≥ 1) with two significant digits below ten, whole
// numbers above, and no ".0".
func short(v float64) string {
	if v >= 9.95 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		return s[:len(s)-2]
	}
	return s
}

// DurationPrecise prints d with fixed decimals in the largest unit it
// reaches, for figures read side by side (a flame graph's totals and
// tooltips): "1.00 s", "12.5 ms", "850.0 µs", "12 ns". The HTML report's
// script (internal/render/html/report.js, valueText) prints the same way
// when it redraws; keep the two alike.
func DurationPrecise(d time.Duration) string {
	if d < 0 {
		return "-" + DurationPrecise(-d)
	}
	switch v := float64(d); {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + " s"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + " ms"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " µs"
	}
	return strconv.FormatInt(int64(d), 10) + " ns"
}

// Percent prints p, a percentage (0 to 100, not a fraction), with the
// precision a small one needs: "0%", "0.012%", "4.2%", "37%".
func Percent(p float64) string {
	a := math.Abs(p)
	switch {
	case p == 0:
		return "0%"
	case a < 0.1:
		return strconv.FormatFloat(p, 'f', 3, 64) + "%"
	case a < 9.95:
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

// Ratio prints part/whole as a percentage (Percent); "0%" when whole is 0.
func Ratio(part, whole float64) string {
	if whole == 0 {
		return "0%"
	}
	return Percent(100 * part / whole)
}

// byteUnits are the binary units Bytes picks from, largest first.
var byteUnits = []struct {
	name string
	size int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// Bytes prints a size in binary units: "512 B", "4 KiB", "1.5 MiB",
// "32 MiB", "2 GiB". A negative size is wolf's "unknown" and prints as "-".
func Bytes(b int64) string {
	if b < 0 {
		return "-"
	}
	for _, u := range byteUnits {
		if b >= u.size {
			return short(float64(b)/float64(u.size)) + " " + u.name
		}
	}
	return strconv.FormatInt(b, 10) + " B"
}

// Count prints a large count compactly: "999", "9999", "45K", "1.2M",
// "12M", "3.4G".
func Count(n uint64) string {
	units := []struct {
		suffix string
		size   float64
	}{{"G", 1e9}, {"M", 1e6}, {"K", 1e3}}
	for i, u := range units {
		v := float64(n) / u.size
		if v < 1 || u.size == 1e3 && v < 10 {
			continue
		}
		if s := short(v); s != "1000" || i == 0 {
			return s + u.suffix
		}
		return "1" + units[i-1].suffix
	}
	return strconv.FormatUint(n, 10)
}

// Number prints a measurement with the precision a reader needs: whole
// numbers from 1000 up, three significant digits below ("0.25", "12.3",
// "41200").
func Number(x float64) string {
	if math.Abs(x) >= 1000 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// Plural prints a count and its noun: "1 task", "3 tasks".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Round rounds x to the given number of decimals, half away from zero:
// evidence values carry the precision their measurement has, not float
// noise (0.30000000000000004).
func Round(x float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(x*p) / p
}

// evidenceUnits are the units evidence keys carry, as their last word or
// before a qualifier ("max_wait_ns", "wait_ns_total", "hold_ms_max").
var evidenceUnits = map[string]struct {
	scale float64 // to nanoseconds or bytes
	bytes bool
}{
	"ns": {1, false}, "us": {1e3, false}, "usecs": {1e3, false}, "ms": {1e6, false}, "s": {1e9, false},
	"bytes": {1, true}, "kb": {1 << 10, true}, "kib": {1 << 10, true}, "mib": {1 << 20, true},
}

// evidenceQualifiers may follow the unit in an evidence key.
var evidenceQualifiers = map[string]bool{"total": true, "max": true, "min": true, "avg": true, "sum": true}

// Evidence humanises an evidence value by the unit its key names
// ("max_wait_ns" 811885583 → "812 ms", "tcp_rmem_max_bytes" 33554432 →
// "32 MiB", "r_kb_per_s" 20480 → "20 MiB/s"). ok is false when the key
// names no time or size unit, or when the value reads as well raw (it
// stays in its unit: window_s 10 is "10 s").
func Evidence(key string, v float64) (text string, ok bool) {
	words := strings.Split(strings.ToLower(key), "_")
	rate := false
	if n := len(words); n > 2 && words[n-2] == "per" && words[n-1] == "s" {
		words, rate = words[:n-2], true
	}
	for len(words) > 1 && evidenceQualifiers[words[len(words)-1]] && !rate {
		words = words[:len(words)-1]
	}
	u, known := evidenceUnits[words[len(words)-1]]
	if !known || len(words) < 2 || math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1<<62 {
		return "", false
	}
	x := v * u.scale
	if u.bytes {
		text = Bytes(int64(math.Round(x)))
		if x < 1<<10 || (u.scale == 1<<10 && x < 1<<20) || (u.scale == 1<<20 && x < 1<<30) {
			return "", false
		}
	} else {
		if rate {
			return "", false // seconds per second: a share, not a time
		}
		text = Duration(time.Duration(math.Round(x)))
		if _, unit, _ := strings.Cut(text, " "); unit == map[float64]string{1: "ns", 1e3: "µs", 1e6: "ms", 1e9: "s"}[u.scale] {
			return "", false
		}
	}
	if rate {
		text += "/s"
	}
	return text, true
}

// MiB prints a size in whole MiB, for sizes read side by side (a cgroup's
// usage against its limit: "3950 MiB of 4096 MiB"). A negative size is
// wolf's "unknown" and prints as "-".
func MiB(b int64) string {
	if b < 0 {
		return "-"
	}
	return strconv.FormatInt(b>>20, 10) + " MiB"
}
