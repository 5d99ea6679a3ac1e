// Package storm holds BenchmarkStorm: wolf doctor's cost under the
// heaviest labs (the memcg and mmap_lock storm, a directory lock convoy, a
// softirq flood), side by side in one run with the floor (empty programs
// on the same tracepoints) and perf lock contention -b. See its comment,
// and the README's table of wolf's own cost.
package storm
