package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/watch"
)

// Default windows of wolf watch. Loading, verifying, attaching and
// detaching every investigator's programs costs about 1 CPU-second per
// round on a 2-core host (README, "wolf watch"): 60 s windows keep that
// under 2% of one CPU. hung is cheap (a task walk) and is the one alerts
// want soonest, so it runs shorter windows.
const (
	defaultWatchInterval = 60 * time.Second
	defaultHungInterval  = 20 * time.Second
)

func newWatchCmd() *cobra.Command {
	var (
		listen       string
		listenAny    bool
		interval     time.Duration
		hungInterval time.Duration
		names        string
		top          int
		output       string
		minSeverity  string
		clearAfter   int
	)
	c := &cobra.Command{
		Use:   "watch",
		Short: "Run the investigators continuously: findings as JSON lines, Prometheus metrics",
		Long: `watch runs wolf's investigators side by side, each in consecutive windows
of --interval, until interrupted. Findings go out as JSON lines (standard
output or --output) when they start, change materially (severity changed,
or a key number moved by 50% or more) and clear (missing from
--clear-after consecutive windows). One investigator failing
never stops the others: the failure is a {"event":"error"} line and
wolf_collector_success 0, and the investigator is retried with backoff.

Metrics for Prometheus are served at http://` + watch.DefaultListen + `/metrics
(and /healthz). wolf listens on all interfaces only when asked: an
address such as :9740 or 0.0.0.0:9740 needs --listen-any.`,
		Example: `  wolf watch                                   # all investigators, metrics on 127.0.0.1:9740
  wolf watch --investigators hung,reclaim --interval 30s --output /var/log/wolf.jsonl
  wolf watch --listen 0.0.0.0:9740 --listen-any  # in a pod, for the cluster's Prometheus`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := watch.CheckListen(listen, listenAny); err != nil {
				return usageErr("--listen %v", err)
			}
			if err := checkWindow("--interval", interval); err != nil {
				return err
			}
			if cmd.Flags().Changed("hung-interval") {
				if err := checkWindow("--hung-interval", hungInterval); err != nil {
					return err
				}
			} else {
				hungInterval = min(hungInterval, interval)
			}
			if top < 1 || top > 1000 {
				return usageErr("--top must be from 1 to 1000, got %d", top)
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
			if err := requireRoot("wolf watch"); err != nil {
				return err
			}
			return runWatch(cmd.Context(), cmd.OutOrStdout(), invs, watchSettings{
				listen: listen, interval: interval, hungInterval: hungInterval, top: top, output: output,
				minSeverity: minSev, clearAfter: clearAfter,
			})
		},
	}
	c.Flags().StringVar(&listen, "listen", watch.DefaultListen, "serve metrics on `HOST:PORT`")
	c.Flags().BoolVar(&listenAny, "listen-any", false, "allow --listen on all interfaces (empty host, 0.0.0.0, ::)")
	c.Flags().DurationVar(&interval, "interval", defaultWatchInterval, "window length of each investigator")
	c.Flags().DurationVar(&hungInterval, "hung-interval", defaultHungInterval, "window length of hung (cheap; default the smaller of 20s and --interval)")
	c.Flags().StringVar(&names, "investigators", "all", "comma-separated investigators to run ("+strings.Join(investigatorNames(), ",")+")")
	c.Flags().IntVar(&top, "top", 10, "keep at most N tasks, cgroups or locks per metric; the rest count as \"other\"")
	c.Flags().StringVarP(&output, "output", "o", "", "append the JSON lines to `FILE` instead of standard output")
	c.Flags().StringVar(&minSeverity, "min-severity", "info", "emit JSON lines only for findings at least this severe (info, warning, critical); metrics count all")
	c.Flags().IntVar(&clearAfter, "clear-after", watch.DefaultClearAfter, "a finding clears after missing from this many consecutive windows")
	return c
}

type watchSettings struct {
	listen                 string
	interval, hungInterval time.Duration
	top                    int
	output                 string
	minSeverity            finding.Severity
	clearAfter             int
}

// checkWindow bounds a window: at least a second (shorter windows would
// spend their time loading programs) and at most an hour.
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
	events := stdout
	if s.output != "" {
		f, err := os.OpenFile(s.output, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return &exitError{code: exitFailed, err: fmt.Errorf("--output: %w", err)}
		}
		defer f.Close()
		events = f
	}
	windows := map[string]time.Duration{}
	for _, inv := range invs {
		windows[inv.Name()] = s.interval
		if inv.Name() == "hung" {
			windows["hung"] = s.hungInterval
		}
	}
	rep := newReport("watch", time.Now())
	metrics := watch.NewMetrics(version, rep.Kernel, s.top, windows, invs)
	w, err := watch.New(watch.Config{Investigators: invs, Window: windows, Default: s.interval, Events: events, Metrics: metrics,
		MinSeverity: s.minSeverity, ClearAfter: s.clearAfter})
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
	fmt.Fprintf(os.Stderr, "wolf watch: metrics on http://%s/metrics; %s\n", l.Addr(), strings.Join(names, ", "))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		err := watch.Serve(ctx, l, watch.Registry(metrics))
		if err != nil {
			cancel() // no metrics endpoint: stop rather than run blind
		}
		served <- err
	}()
	w.Run(ctx) // returns once ctx is done and every investigator has detached
	cancel()
	if err := <-served; err != nil {
		return wrapFailure(err)
	}
	return nil
}
