// Package sysstat is the system checklist at the top of `wolf doctor`:
// Brendan Gregg's "Linux performance analysis in 60 seconds" (uptime,
// dmesg | tail, vmstat, mpstat, pidstat, iostat, free, sar) done
// in-process. It reads /proc and /sys when the investigators start and when
// they stop (every read under a timeout, all at once), samples the run
// queue every second in between and tails /dev/kmsg, then turns the window
// into one check per area (Areas) and the system.* findings.
//
// One file per area: load.go, cpu.go, memory.go, psi.go, disk.go,
// network.go, kernellog.go; snapshot.go, parse.go, sampler.go and kmsg.go
// read what they analyse.
package sysstat
