package human

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                         "0 s",
		120:                       "120 ns",
		850 * time.Microsecond:    "850 µs",
		1500 * time.Nanosecond:    "1.5 µs",
		time.Millisecond:          "1 ms",
		1300 * time.Microsecond:   "1.3 ms",
		23 * time.Millisecond:     "23 ms",
		23500 * time.Microsecond:  "24 ms",
		9960 * time.Microsecond:   "10 ms",
		999960 * time.Microsecond: "1 s",
		1500 * time.Millisecond:   "1.5 s",
		2 * time.Second:           "2 s",
		41 * time.Second:          "41 s",
		time.Hour:                 "3600 s",
		-3 * time.Millisecond:     "-3 ms",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestDurationPrecise(t *testing.T) {
	for d, want := range map[time.Duration]string{
		12:                       "12 ns",
		850 * time.Microsecond:   "850.0 µs",
		12500 * time.Microsecond: "12.5 ms",
		time.Second:              "1.00 s",
		123 * time.Second:        "123.00 s",
	} {
		if got := DurationPrecise(d); got != want {
			t.Errorf("DurationPrecise(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestPercentBytesCount(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Percent(0), "0%"}, {Percent(0.012), "0.012%"}, {Percent(4.24), "4.2%"}, {Percent(9.96), "10%"}, {Percent(37.4), "37%"},
		{Percent(0.00293), "0.003%"}, {Percent(0.5), "0.5%"}, {Percent(46.3), "46%"}, // reclaim's efficiencies
		{Ratio(1, 4), "25%"}, {Ratio(1, 0), "0%"},
		{Bytes(-1), "-"}, {Bytes(512), "512 B"}, {Bytes(4096), "4 KiB"}, {Bytes(3 << 19), "1.5 MiB"},
		{Bytes(32 << 20), "32 MiB"}, {Bytes(4 << 30), "4 GiB"}, {MiB(4 << 30), "4096 MiB"}, {MiB(-1), "-"},
		{Count(999), "999"}, {Count(9999), "9999"}, {Count(45_000), "45K"}, {Count(999_999), "1M"},
		{Count(1_234_567), "1.2M"}, {Count(1093267), "1.1M"}, {Count(12_000_000), "12M"}, {Count(3_400_000_000), "3.4G"},
		{Number(0.25), "0.25"}, {Number(12.34), "12.3"}, {Number(41234.6), "41235"},
		{Plural(1, "task", "tasks"), "1 task"}, {Plural(3, "task", "tasks"), "3 tasks"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if r := Round(2.345, 2); r != 2.35 && r != 2.34 { // binary floats: either neighbour
		t.Errorf("Round(2.345, 2) = %v", r)
	}
	if r := Round(0.0029, 3); r != 0.003 {
		t.Errorf("Round(0.0029, 3) = %v", r)
	}
	if r := Round(-1.25, 1); r != -1.3 {
		t.Errorf("Round(-1.25, 1) = %v, want -1.3 (half away from zero)", r)
	}
}

func TestEvidence(t *testing.T) {
	for _, c := range []struct {
		key  string
		v    float64
		want string // "" when nothing is added
	}{
		{"max_wait_ns", 811885583, "812 ms"},
		{"wait_ns_total", 2.3e9, "2.3 s"},
		{"hold_ms_max", 2500, "2.5 s"},
		{"p99_us", 12, ""},
		{"cpu3_p99_us", 12000, "12 ms"},
		{"window_s", 10, ""},
		{"blocked_s", 0.35, "350 ms"},
		{"tcp_rmem_max_bytes", 33554432, "32 MiB"},
		{"swap_bytes", 512, ""},
		{"r_kb_per_s", 20480, "20 MiB/s"},
		{"used_mib", 512, ""},
		{"used_mib", 4096, "4 GiB"},
		{"migrations_per_s", 1234, ""},
		{"reclaim_cpu_s_per_s", 0.5, ""},
		{"ns", 5e9, ""},
		{"pages_scanned", 1e6, ""},
	} {
		got, ok := Evidence(c.key, c.v)
		if ok != (c.want != "") || got != c.want && ok {
			t.Errorf("Evidence(%q, %v) = %q, %v; want %q", c.key, c.v, got, ok, c.want)
		}
	}
}
