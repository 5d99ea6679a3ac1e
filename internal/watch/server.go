package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
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
// m, wolf's own process (CPU, memory, file descriptors), the Go runtime,
// and extra collectors (the output's and the incident store's).
func Registry(m *Metrics, extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	)
	for _, c := range extra {
		if c != nil {
			reg.MustRegister(c)
		}
	}
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

// CheckWebConfig reads a --web.config.file (the Prometheus exporters'
// web configuration: TLS certificates, client CAs, basic-auth users with
// bcrypt hashes) and its certificates, so that a mistake is a usage error
// before any investigator starts. "" is no file: plain HTTP.
func CheckWebConfig(path string) error {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return err
	}
	if err := web.Validate(path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ServeOptions are what Serve needs besides the socket and the registry.
type ServeOptions struct {
	// WebConfig is the --web.config.file path: TLS and basic auth the
	// way node_exporter and the other exporters do them (the Prometheus
	// exporter-toolkit, which rereads the file on every new connection,
	// so certificates can be rotated in place). "" serves plain HTTP.
	WebConfig string
	// Health lists what is wrong but not fatal (an output that fails, an
	// incident directory that is full); /healthz says it.
	Health func() []string
	// Log receives the toolkit's warnings (stderr); nil discards them.
	Log io.Writer
	// Extra handlers beside /metrics and /healthz, by path.
	Handlers map[string]http.Handler
}

// Serve serves /metrics, /healthz and a landing page on l until ctx is
// cancelled, then shuts the server down.
//
// /healthz answers 200 "ok" when all is well and 200 with "degraded" and
// one line per problem otherwise: the process is alive and serving, and
// an orchestrator that restarted it (a liveness probe fails on non-2xx)
// would fix neither a full disk nor anything else listed there, and would
// throw away the lines and incidents wolf still holds in memory.
func Serve(ctx context.Context, l net.Listener, reg *prometheus.Registry, opts ServeOptions) error {
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
		var problems []string
		if opts.Health != nil {
			problems = opts.Health()
		}
		if len(problems) == 0 {
			fmt.Fprintln(w, "ok")
			return
		}
		fmt.Fprintln(w, "degraded")
		for _, p := range problems {
			fmt.Fprintln(w, p)
		}
	})
	for path, h := range opts.Handlers {
		mux.Handle(path, h)
	}
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
	logOut := opts.Log
	if logOut == nil {
		logOut = io.Discard
	}
	// The toolkit logs every listener at Info; wolf says where it
	// listens itself, so only its warnings and errors get through.
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := opts.WebConfig
	flags := &web.FlagConfig{WebListenAddresses: &[]string{l.Addr().String()}, WebSystemdSocket: new(bool), WebConfigFile: &cfg}
	done := make(chan error, 1)
	go func() { done <- web.Serve(l, srv, flags, logger) }()
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
