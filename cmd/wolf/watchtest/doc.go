// Package watchtest tests `wolf watch` as a running process: a real
// Prometheus scraping it while a lab hangs tasks, TLS and basic auth from
// a web config, --output on a disk that fills, incidents captured inside
// a window, pod and container labels, and the shipped deployment files.
// These tests take minutes; they live apart from cmd/wolf's so that no
// test package comes near go test's default ten-minute limit.
package watchtest
