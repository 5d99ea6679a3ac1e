package watch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultListen is loopback: wolf's metrics name processes, cgroups and
// locks, which is not for every host on the network.
const DefaultListen = "127.0.0.1:9740"

// ErrAllInterfaces is returned by CheckListen for an address that would
// listen on every interface without the caller having asked for it.
var ErrAllInterfaces = errors.New("listens on all interfaces")

// CheckListen validates a host:port. An empty host, 0.0.0.0 or :: listen
// on every interface and are refused unless anyInterface is set.
func CheckListen(addr string, anyInterface bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port (e.g. %s): %w", addr, DefaultListen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "" || (net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified()) {
		if !anyInterface {
			return fmt.Errorf("%q %w; give --listen-any to mean it, or a specific address such as %s", addr, ErrAllInterfaces, DefaultListen)
		}
	}
	return nil
}

// Registry returns a fresh registry (never the global default one) with
// m, wolf's own process (CPU, memory, file descriptors) and the Go runtime.
func Registry(m *Metrics) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	)
	return reg
}

// Listen opens the metrics socket, so that a port already taken fails
// before any investigator starts.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return l, nil
}

// Serve serves /metrics, /healthz and a landing page on l until ctx is
// cancelled, then shuts the server down.
func Serve(ctx context.Context, l net.Listener, reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A scrape that fails half way reports the error rather than
		// exporting a partial set silently.
		ErrorHandling:       promhttp.HTTPErrorOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>wolf watch</title></head><body>
<h1>wolf watch</h1><p>wolf's investigators, always on.</p>
<ul><li><a href="/metrics">/metrics</a> (Prometheus)</li><li><a href="/healthz">/healthz</a></li></ul>
</body></html>
`)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve metrics: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	<-done
	return nil
}
