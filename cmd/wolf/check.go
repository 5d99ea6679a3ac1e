//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/features"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/render"
)

// checkedSysctls are the settings wolf's investigators read or depend on.
var checkedSysctls = []string{
	"kernel.hung_task_timeout_secs", "kernel.hung_task_warnings", "kernel.hung_task_check_interval_secs",
	"kernel.hung_task_panic", "kernel.kptr_restrict", "kernel.perf_event_paranoid",
	"kernel.bpf_stats_enabled", "kernel.unprivileged_bpf_disabled",
}

type checkedRequirement struct {
	investigator.Requirement
	features.Status
}

type checkedInvestigator struct {
	Name    string `json:"name"`
	Summary string `json:"summary"`
	// State is "ready", "degraded" or "cannot run": whether its own BPF
	// objects loaded and attached here (and were closed again).
	State    string `json:"state"`
	Ready    bool   `json:"ready"`
	Degraded bool   `json:"degraded"`
	// Lost is what it runs without here; Why, when it cannot run, says why.
	Lost         []string             `json:"lost,omitempty"`
	Why          string               `json:"why,omitempty"`
	Requirements []checkedRequirement `json:"requirements"`
}

type checkReport struct {
	WolfVersion   string                `json:"wolf_version"`
	Kernel        string                `json:"kernel"`
	Root          bool                  `json:"root"`
	Investigators []checkedInvestigator `json:"investigators"`
	Features      []features.Status     `json:"features"`
	Sysctls       []features.Status     `json:"sysctls"`
}

// MarshalJSON flattens the requirement and its probe result into one object.
func (c checkedRequirement) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{
		"feature": c.Feature, "why": c.Why, "optional": c.Optional,
		"available": c.Available, "detail": c.Detail,
	})
}

func newCheckCmd() *cobra.Command {
	var out outputFlags
	c := &cobra.Command{
		Use:   "check",
		Short: "Show what this kernel lets wolf do, and why not where it does not",
		Long: `check says for each investigator whether it runs here, runs degraded
(and without what), or not at all (and why, in plain words): it loads and
attaches the investigator's own BPF programs, then closes them again. It
also probes the kernel for every feature they use (BTF, tracepoints, the
task iterator, ring buffers, perf events, uprobes, kprobes, fentry, PSI,
cgroups, sysctls). Without root nothing loads, and that is what it says.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := textOrJSON(out.validate())
			if err != nil {
				return err
			}
			rep := runCheck(cmd)
			var b strings.Builder
			if format == "json" {
				enc := json.NewEncoder(&b)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return wrapFailure(err)
				}
			} else {
				printCheck(&b, rep)
			}
			return out.writeBytes(cmd.OutOrStdout(), []byte(b.String()), "check", string(format))
		},
	}
	out.register(c)
	return c
}

func runCheck(cmd *cobra.Command) *checkReport {
	ctx := cmd.Context()
	rep := &checkReport{WolfVersion: version, Kernel: newReport("check", time.Now()).Kernel, Root: os.Geteuid() == 0}
	for _, inv := range investigators() {
		ci := checkedInvestigator{Name: inv.Name(), Summary: inv.Summary(), Ready: true}
		if r, ok := inv.(investigator.Requirer); ok {
			for _, req := range r.Requirements() {
				st := features.Probe(ctx, req.Feature)
				ci.Requirements = append(ci.Requirements, checkedRequirement{req, st})
				if !st.Available {
					if req.Optional {
						ci.Degraded = true
					} else {
						ci.Ready = false
					}
				}
			}
		}
		// The features say what the kernel has; the investigator's own
		// objects, loaded and attached, say whether it runs. They decide.
		if c, ok := inv.(investigator.Checker); ok {
			lost, err := checkOne(ctx, c)
			ci.Ready, ci.Degraded, ci.Lost = err == nil, len(lost) > 0, lost
			if err != nil {
				ci.Why = probekit.Explain(err)
			}
		}
		switch {
		case !ci.Ready:
			ci.State = "cannot run"
		case ci.Degraded:
			ci.State = "degraded"
		default:
			ci.State = "ready"
		}
		rep.Investigators = append(rep.Investigators, ci)
	}
	rep.Features = features.ProbeAll(ctx, features.Names())
	for _, s := range checkedSysctls {
		rep.Sysctls = append(rep.Sysctls, features.Probe(ctx, "sysctl:"+s))
	}
	return rep
}

// checkOne runs one investigator's Check under a deadline (stretched on a
// slow machine: loading is most of what it does).
func checkOne(ctx context.Context, c investigator.Checker) ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("loading its BPF programs needs root: %w", investigator.ErrPrivilege)
	}
	ctx, cancel := context.WithTimeout(ctx, lab.Scaled(60*time.Second))
	defer cancel()
	type result struct {
		lost []string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		lost, err := c.Check(ctx)
		done <- result{lost, err}
	}()
	select {
	case r := <-done:
		return r.lost, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("loading and attaching did not finish: %w", ctx.Err())
	}
}

func printCheck(w io.Writer, rep *checkReport) {
	fmt.Fprintf(w, "wolf %s · kernel %s", rep.WolfVersion, rep.Kernel)
	if !rep.Root {
		fmt.Fprint(w, " · not root: BPF probes cannot load, so they show as unavailable")
	}
	fmt.Fprintln(w)
	for _, ci := range rep.Investigators {
		state := "ready"
		switch {
		case !ci.Ready:
			state = "CANNOT RUN"
		case ci.Degraded:
			state = "ready, degraded"
		}
		fmt.Fprintf(w, "\n%s: %s — %s\n", ci.Name, state, ci.Summary)
		if ci.Why != "" {
			printIndented(w, "why: "+ci.Why)
		}
		for _, l := range ci.Lost {
			printIndented(w, "without: "+l)
		}
		for _, r := range ci.Requirements {
			opt := ""
			if r.Optional {
				opt = " (optional)"
			}
			fmt.Fprintf(w, "  %s %s%s\n", mark(r.Available), r.Feature, opt)
			printIndented(w, r.Why)
			if r.Detail != "" {
				printIndented(w, "→ "+r.Detail)
			}
		}
	}
	fmt.Fprintf(w, "\nkernel features\n")
	for _, s := range rep.Features {
		fmt.Fprintf(w, "  %s %s\n", mark(s.Available), s.Name)
		printIndented(w, s.Detail)
	}
	fmt.Fprintf(w, "\nsettings\n")
	for _, s := range rep.Sysctls {
		fmt.Fprintf(w, "  %-42s %s\n", strings.TrimPrefix(s.Name, "sysctl:"), s.Detail)
	}
}

func mark(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO "
}

// printIndented wraps text to 80 columns under a requirement line.
func printIndented(w io.Writer, text string) {
	for _, line := range render.Wrap(text, 80-6) {
		fmt.Fprintf(w, "      %s\n", line)
	}
}
