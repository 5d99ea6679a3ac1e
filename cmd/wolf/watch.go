//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/containers"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/incident"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/watch"
)

// defaultWatchInterval is wolf watch's window. Each investigator loads and
// attaches once and concludes a window every window length without
// detaching: a window is the period the metrics and the JSON lines are
// computed over, not a cost. An investigator may declare a shorter one
// (investigator.Command.WatchWindow: hung, the one alerts want soonest,
// which is also peeked into every few seconds, so a hang inside a window
// opens an incident while it lasts).
const defaultWatchInterval = 60 * time.Second

// watchRefreshTimeout bounds asking the container runtimes at watch's
// start (in the background).
const watchRefreshTimeout = 10 * time.Second

func newWatchCmd() *cobra.Command {
	var (
		listen    string
		listenAny bool
		interval  time.Duration
		// windows are the investigators' own windows (--NAME-interval),
		// for those that declare one.
		windows     = map[string]*time.Duration{}
		names       string
		top         int
		output      string
		minSeverity string
		clearAfter  int
		webConfig   string
		incidents   string
		incMax      int
		incMaxMiB   int
		incInterval time.Duration
		maxCPU      float64
	)
	c := &cobra.Command{
		Use:   "watch",
		Short: "Run the investigators continuously: findings as JSON lines, Prometheus metrics",
		Long: `watch runs wolf's investigators side by side until interrupted. Each
loads and attaches its programs once and concludes a window every
--interval without detaching, so no event is missed between windows; one
that fails is closed and started again with backoff. Findings go out as JSON lines (standard
output or --output) when they start, change materially (severity changed,
or a key number moved by 50% or more) and clear (missing from
--clear-after consecutive windows). One investigator failing
never stops the others: the failure is a {"event":"error"} line and
wolf_collector_success 0, and the investigator is retried with backoff.

If the output cannot be written (a full disk), the lines are kept in
memory and written, in order, once it takes writes again; the failure is
said on stderr, counted in wolf_output_errors_total and reported by
/healthz.

With --incidents DIR, watch is a flight recorder: when a critical finding
or a diagnosis starts or escalates, it writes a bundle to DIR with the
report (report.html with its flame graphs and timelines, report.json,
report.txt), the stack profiles (folded, pprof) and the host as it was in
the windows before. Bundles are rate-limited per finding or diagnosis,
bounded by --incidents-max and --incidents-max-mib (oldest removed
first) and listed newest first in DIR/index.html and by
` + "`wolf incidents list`" + `.

Metrics for Prometheus are served at http://` + watch.DefaultListen + `/metrics
(and /healthz). wolf listens on all interfaces only when asked: an
address such as :9740 or 0.0.0.0:9740 needs --listen-any.
--web.config.file takes the web configuration file of the Prometheus
exporters (TLS certificates, client CAs, basic-auth users with bcrypt
hashes), as node_exporter does.`,
		Example: `  wolf watch                                   # all investigators, metrics on 127.0.0.1:9740
  wolf watch --investigators hung,reclaim --interval 30s --output /var/log/wolf.jsonl
  wolf watch --listen 0.0.0.0:9740 --listen-any  # in a pod, for the cluster's Prometheus
  wolf watch --incidents /var/lib/wolf/incidents --web.config.file /etc/wolf/web.yml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := watch.CheckListen(listen, listenAny); err != nil {
				return usageErr("--listen %v", err)
			}
			if err := checkWindow("--interval", interval); err != nil {
				return err
			}
			own := map[string]time.Duration{}
			for name, d := range windows {
				if flag := name + "-interval"; cmd.Flags().Changed(flag) {
					if err := checkWindow("--"+flag, *d); err != nil {
						return err
					}
					own[name] = *d
				} else {
					own[name] = min(*d, interval)
				}
			}
			if top < 1 || top > 1000 {
				return usageErr("--top must be from 1 to 1000, got %d", top)
			}
			if err := checkMaxCPU(maxCPU); err != nil {
				return err
			}
			minSev, err := finding.ParseSeverity(minSeverity)
			if err != nil {
				return usageErr("--min-severity: %v", err)
			}
			if clearAfter < 1 || clearAfter > 100 {
				return usageErr("--clear-after must be from 1 to 100 windows, got %d", clearAfter)
			}
			invs, err := pickInvestigators(names)
			if err != nil {
				return err
			}
			if output != "" {
				if err := checkWritable(output); err != nil {
					return usageErr("--output %v", err)
				}
			}
			if err := watch.CheckWebConfig(webConfig); err != nil {
				return usageErr("--web.config.file %v", err)
			}
			if incMax < 1 || incMax > 100000 {
				return usageErr("--incidents-max must be from 1 to 100000, got %d", incMax)
			}
			if incMaxMiB < 1 || incMaxMiB > 1<<20 {
				return usageErr("--incidents-max-mib must be from 1 to %d, got %d", 1<<20, incMaxMiB)
			}
			if incInterval < 0 || incInterval > 24*time.Hour {
				return usageErr("--incidents-interval must be from 0 to 24h, got %v", incInterval)
			}
			if incidents != "" {
				if st, err := os.Stat(incidents); err == nil && !st.IsDir() {
					return usageErr("--incidents %s: not a directory", incidents)
				} else if err != nil {
					if err := checkWritable(incidents); err != nil {
						return usageErr("--incidents %v", err)
					}
				}
			}
			if err := requireRoot("wolf watch"); err != nil {
				return err
			}
			return runWatch(cmd.Context(), cmd.OutOrStdout(), invs, watchSettings{
				listen: listen, interval: interval, windows: own, top: top, output: output,
				minSeverity: minSev, clearAfter: clearAfter, webConfig: webConfig,
				incidents: incidents, incidentLimits: incident.Limits{MaxCount: incMax, MaxBytes: int64(incMaxMiB) << 20, MinInterval: orNone(incInterval)},
				maxCPU: maxCPU,
			})
		},
	}
	c.Flags().StringVar(&listen, "listen", watch.DefaultListen, "serve metrics on `HOST:PORT`")
	c.Flags().BoolVar(&listenAny, "listen-any", false, "allow --listen on all interfaces (empty host, 0.0.0.0, ::)")
	c.Flags().DurationVar(&interval, "interval", defaultWatchInterval, "window length of each investigator")
	maxCPUFlag(c, &maxCPU, defaultWatchMaxCPU)
	for _, inv := range investigators() {
		cm, ok := inv.(investigator.Commander)
		if !ok || cm.Command().WatchWindow <= 0 {
			continue
		}
		w := cm.Command().WatchWindow
		windows[inv.Name()] = new(time.Duration)
		c.Flags().DurationVar(windows[inv.Name()], inv.Name()+"-interval", w,
			fmt.Sprintf("window length of %s (unless set, no longer than --interval)", inv.Name()))
	}
	c.Flags().StringVar(&names, "investigators", "all", "comma-separated investigators to run ("+strings.Join(investigatorNames(), ",")+")")
	c.Flags().IntVar(&top, "top", 10, "keep at most N tasks, cgroups or locks per metric; the rest count as \"other\"")
	c.Flags().StringVarP(&output, "output", "o", "", "append the JSON lines to `FILE` instead of standard output")
	c.Flags().StringVar(&minSeverity, "min-severity", "info", "emit JSON lines only for findings at least this severe (info, warning, critical); metrics count all")
	c.Flags().IntVar(&clearAfter, "clear-after", watch.DefaultClearAfter, "a finding clears after missing from this many consecutive windows")
	c.Flags().StringVar(&webConfig, "web.config.file", "", "web configuration `FILE` for TLS and basic auth (the Prometheus exporters' format)")
	c.Flags().StringVar(&incidents, "incidents", "", "write an incident bundle to `DIR` when a critical finding or a diagnosis starts or escalates")
	c.Flags().IntVar(&incMax, "incidents-max", incident.DefaultMaxCount, "keep at most N incident bundles (oldest removed first)")
	c.Flags().IntVar(&incMaxMiB, "incidents-max-mib", incident.DefaultMaxBytes>>20, "keep at most this many MiB of incident bundles (oldest removed first)")
	c.Flags().DurationVar(&incInterval, "incidents-interval", incident.DefaultMinInterval, "write the same finding or diagnosis at most once per this interval unless it escalates (0: every time)")
	return c
}

// orNone maps a zero interval (the flag's "every time") to the store's
// "no limit", which is negative.
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

type watchSettings struct {
	listen   string
	interval time.Duration
	// windows are the investigators' own windows, where shorter than
	// interval.
	windows        map[string]time.Duration
	top            int
	output         string
	minSeverity    finding.Severity
	clearAfter     int
	webConfig      string
	incidents      string
	incidentLimits incident.Limits
	// maxCPU is the budget of the BPF programs (--max-cpu), percent of
	// one CPU; 0 none.
	maxCPU float64
}

// checkWindow bounds a window: at least a second (each window reads and
// analyses every map: shorter ones would spend their time doing that) and
// at most an hour.
func checkWindow(flag string, d time.Duration) error {
	if d < time.Second || d > time.Hour {
		return usageErr("%s must be from 1s to 1h, got %v", flag, d)
	}
	return nil
}

func investigatorNames() []string {
	var out []string
	for _, inv := range investigators() {
		out = append(out, inv.Name())
	}
	return out
}

func pickInvestigators(list string) ([]investigator.Investigator, error) {
	all := investigators()
	if list == "all" {
		return all, nil
	}
	byName := map[string]investigator.Investigator{}
	for _, inv := range all {
		byName[inv.Name()] = inv
	}
	var out []investigator.Investigator
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		inv, ok := byName[n]
		if !ok {
			return nil, usageErr("--investigators: unknown investigator %q (want %s or all)", n, strings.Join(investigatorNames(), ","))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, inv)
		}
	}
	return out, nil
}

func runWatch(ctx context.Context, stdout io.Writer, invs []investigator.Investigator, s watchSettings) error {
	var out *watch.Output
	if s.output != "" {
		o, err := watch.OpenOutput(s.output, os.Stderr)
		if err != nil {
			return &exitError{code: exitFailed, err: fmt.Errorf("--output: %w", err)}
		}
		out = o
	} else {
		out = watch.StreamOutput(stdout, os.Stderr)
	}
	// Lines still waiting for a failing output get a few seconds at exit;
	// what is left is said on stderr.
	defer out.Close(5 * time.Second)
	var store *incident.Store
	if s.incidents != "" {
		st, err := incident.Open(s.incidents, s.incidentLimits, os.Stderr)
		if err != nil {
			return &exitError{code: exitFailed, err: fmt.Errorf("--incidents: %w", err)}
		}
		store = st
	}
	windows := map[string]time.Duration{}
	for _, inv := range invs {
		windows[inv.Name()] = s.interval
		if d, ok := s.windows[inv.Name()]; ok {
			windows[inv.Name()] = d
		}
	}
	rep := newReport("watch", time.Now())
	metrics := watch.NewMetrics(version, rep.Kernel, s.top, windows, invs)
	// Containers and pods are named in every line, metric and bundle: the
	// runtimes are asked now, and again (at most once a minute) when a
	// container nobody named yet appears.
	resolver := containers.NewResolver(containers.Options{AutoRefresh: time.Minute})
	resolver.RefreshAsync(watchRefreshTimeout)
	namer := &containers.Namer{Resolver: resolver}
	metrics.SetWorkloads(&containers.Labels{Namer: namer})
	if s.maxCPU > 0 {
		b, err := probekit.NewBudget(s.maxCPU)
		if err != nil {
			return usageErr("--max-cpu: %v", err)
		}
		// Every session watch starts, and restarts, is under it.
		probekit.SetBudget(b)
		defer probekit.SetBudget(nil)
		metrics.SetBudget(s.maxCPU)
	}
	w, err := watch.New(watch.Config{Investigators: invs, Window: windows, Default: s.interval, Events: out, Metrics: metrics,
		MinSeverity: s.minSeverity, ClearAfter: s.clearAfter, Incidents: store, Header: *rep,
		Namer: namer, Diagnose: watch.DiagnoseNamed(namer)})
	if err != nil {
		return wrapFailure(err)
	}
	l, err := watch.Listen(s.listen)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	names := make([]string, 0, len(windows))
	for n, d := range windows {
		names = append(names, fmt.Sprintf("%s every %v", n, d))
	}
	sort.Strings(names)
	where := fmt.Sprintf("http://%s/metrics", l.Addr())
	if s.webConfig != "" {
		// TLS or basic auth, as the file says (and may say otherwise
		// after a reload): no scheme is promised.
		where = fmt.Sprintf("%s/metrics (TLS and auth per %s)", l.Addr(), s.webConfig)
	}
	fmt.Fprintf(os.Stderr, "wolf watch: metrics on %s; %s\n", where, strings.Join(names, ", "))
	if store != nil {
		fmt.Fprintf(os.Stderr, "wolf watch: incidents in %s (index.html)\n", store.Dir())
	}

	extra := []prometheus.Collector{out}
	health := []func() []string{out.Problems}
	if store != nil {
		extra = append(extra, watch.IncidentMetrics(store))
		health = append(health, store.Problems)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		err := watch.Serve(ctx, l, watch.Registry(metrics, extra...), watch.ServeOptions{
			WebConfig: s.webConfig, Log: os.Stderr,
			Health: func() []string {
				var p []string
				for _, h := range health {
					p = append(p, h()...)
				}
				return p
			},
		})
		if err != nil {
			cancel() // no metrics endpoint: stop rather than run blind
		}
		served <- err
	}()
	w.Run(ctx) // returns once ctx is done, every investigator has detached and queued incidents are written
	cancel()
	if err := <-served; err != nil {
		return wrapFailure(err)
	}
	return nil
}
