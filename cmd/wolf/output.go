package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/export"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/outfile"
	"github.com/wolf-investigator/wolf/internal/render"
)

// outputFlags are --format and --output, shared by every command that
// prints a report.
type outputFlags struct {
	format string
	output string
	// folded and pprof export the report's stack aggregations (profiles)
	// for flame graph tools and `go tool pprof`.
	folded string
	pprof  string
	// text adjusts text rendering (set by the command, not a flag).
	text func(*render.TextOptions)

	// Set by validate: where the report and the pprof file go, checked.
	report, pprofTo *outfile.Target
}

func (o *outputFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&o.format, "format", "text", "output format: text, json or html (html: a self-contained page, with --output)")
	c.Flags().StringVarP(&o.output, "output", "o", "", "write the report to `FILE` instead of standard output")
	c.Flags().StringVar(&o.folded, "folded", "", "write each stack profile in folded form (flame graphs) to `FILE` with the profile's name before the extension")
	c.Flags().StringVar(&o.pprof, "pprof", "", "write the stack profiles to `FILE` in pprof format (go tool pprof)")
}

// validate checks the flags before any work starts, so bad usage fails in
// milliseconds, not after a 10 s investigation: the format, and that every
// file the run will write can be written (see internal/outfile).
func (o *outputFlags) validate() (render.Format, error) {
	f, err := render.ParseFormat(o.format)
	if err != nil {
		return "", usageErr("--format: %v", err)
	}
	if f == render.FormatHTML && o.output == "" && isTerminal(os.Stdout) {
		return "", usageErr("--format html needs --output FILE (a terminal full of HTML helps nobody)")
	}
	o.report, o.pprofTo = nil, nil
	if o.output != "" {
		if o.report, err = outfile.File(o.output); err != nil {
			return "", usageErr("--output %v", err)
		}
	}
	if o.folded != "" {
		if err := outfile.Derived(o.folded); err != nil {
			return "", usageErr("--folded %v", err)
		}
	}
	if o.pprof != "" {
		if o.pprofTo, err = outfile.File(o.pprof); err != nil {
			return "", usageErr("--pprof %v", err)
		}
	}
	return f, nil
}

// write renders the report to stdout or the --output file, then the
// --folded and --pprof files.
func (o *outputFlags) write(stdout io.Writer, r *finding.Report) error {
	f, err := render.ParseFormat(o.format)
	if err != nil {
		return usageErr("--format: %v", err)
	}
	var buf bytes.Buffer
	switch f {
	case render.FormatJSON:
		err = render.JSON(&buf, r)
	case render.FormatHTML:
		err = render.HTML(&buf, r)
	default:
		to := render.TextOptions{Color: o.output == "" && isTerminal(os.Stdout)}
		if o.text != nil {
			o.text(&to)
		}
		err = render.Text(&buf, r, to)
	}
	if err != nil {
		return wrapFailure(err)
	}
	// The report first: a failing export must not cost it.
	werr := o.writeBytes(stdout, buf.Bytes(), r.Command, string(f))
	if err := o.export(r); err != nil {
		return wrapFailure(errors.Join(werr, err))
	}
	return werr
}

// writeBytes writes a rendered report to stdout or the --output file. If
// the file cannot be written after all (the disk filled, the directory
// went away during the run), the report is saved in the temporary
// directory instead, and the error says where: a run's findings are not
// thrown away for a path.
func (o *outputFlags) writeBytes(stdout io.Writer, b []byte, command, ext string) error {
	if o.output == "" {
		_, err := stdout.Write(b)
		return wrapFailure(err)
	}
	if o.report == nil {
		t, err := outfile.File(o.output)
		if err != nil {
			return saveElsewhere(fmt.Errorf("--output %w", err), b, command, ext)
		}
		o.report = t
	}
	if err := o.report.Write(func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return saveElsewhere(err, b, command, ext)
	}
	return nil
}

// saveElsewhere keeps a report that could not be written where asked.
func saveElsewhere(cause error, b []byte, command, ext string) error {
	if command == "" {
		command = "report"
	}
	if ext == "" || ext == string(render.FormatText) {
		ext = "txt"
	}
	name := filepath.Join(os.TempDir(), fmt.Sprintf("wolf-%s-%s.%s", command, time.Now().Format("20060102-150405.000"), ext))
	if err := outfile.WriteFile(name, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("%w; saving it in %s failed too: %v", cause, name, err)}
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("%w; the report is saved in %s instead", cause, name)}
}

// export writes --folded and --pprof. A run that collected no stacks
// still writes a (sample-less) pprof file, so a script finds what it
// asked for; folded files exist one per profile, so there are none.
func (o *outputFlags) export(r *finding.Report) error {
	var errs []error
	if o.folded != "" {
		if len(r.Profiles) == 0 {
			fmt.Fprintln(os.Stderr, "wolf: --folded: no stacks collected in this run; no folded file written")
		}
		for i := range r.Profiles {
			p := &r.Profiles[i]
			path := export.FoldedPath(o.folded, p.Name)
			if err := outfile.WriteFile(path, func(w io.Writer) error { return export.Folded(w, p) }); err != nil {
				errs = append(errs, fmt.Errorf("--folded: %w", err))
				continue
			}
			fmt.Fprintf(os.Stderr, "wolf: wrote %s (%d stacks, %d %s)\n", path, len(p.Stacks), p.Total(), p.Unit)
		}
	}
	if o.pprof != "" {
		t := o.pprofTo
		if t == nil {
			var err error
			if t, err = outfile.File(o.pprof); err != nil {
				return errors.Join(append(errs, fmt.Errorf("--pprof %w", err))...)
			}
		}
		dur := time.Duration(r.DurationS * float64(time.Second))
		if err := t.Write(func(w io.Writer) error { return export.PProf(w, r.Profiles, r.StartedAt, dur) }); err != nil {
			errs = append(errs, fmt.Errorf("--pprof: %w", err))
		}
	}
	return errors.Join(errs...)
}

// newReport fills the header of a report.
func newReport(command string, started time.Time) *finding.Report {
	host, _ := os.Hostname()
	// In a pod the hostname is the pod's name; the DaemonSet says the
	// node's (the downward API's spec.nodeName).
	if node := os.Getenv("WOLF_NODE_NAME"); node != "" {
		host = node
	}
	var uts unix.Utsname
	kernel := ""
	if unix.Uname(&uts) == nil {
		kernel = strings.TrimRight(string(uts.Release[:]), "\x00")
	}
	return &finding.Report{
		WolfVersion:  version,
		Command:      command,
		Kernel:       kernel,
		Host:         host,
		StartedAt:    started.UTC().Truncate(time.Millisecond),
		Findings:     []finding.Finding{},
		Histograms:   []finding.Histogram{},
		Capabilities: map[string]bool{},
	}
}

// checkDuration validates --duration: positive and at most a day, so that a
// typo (10h for 10s) is caught rather than waited out.
func checkDuration(d time.Duration) error {
	if d <= 0 {
		return usageErr("--duration must be positive, got %v", d)
	}
	if d > 24*time.Hour {
		return usageErr("--duration %v is longer than a day; use `wolf watch` for long runs", d)
	}
	return nil
}

// The BPF budgets (--max-cpu), in percent of one CPU: a window of doctor
// or an investigator's command, and wolf watch, which runs for months and
// takes less.
const (
	defaultMaxCPU      = 2.0
	defaultWatchMaxCPU = 1.0
)

// maxCPUFlag registers --max-cpu on c.
func maxCPUFlag(c *cobra.Command, v *float64, def float64) {
	c.Flags().Float64Var(v, "max-cpu", def, "budget of wolf's BPF programs, in percent of one CPU: over it, their expensive detail (stacks, records) is sampled, their counts stay exact (0: no budget)")
}

func checkMaxCPU(pct float64) error {
	if math.IsNaN(pct) || pct < 0 || pct > 100*float64(runtime.NumCPU()) {
		return usageErr("--max-cpu must be from 0 (no budget) to %d (every CPU), got %v", 100*runtime.NumCPU(), pct)
	}
	return nil
}

func checkPID(pid int) error {
	if pid < 0 {
		return usageErr("--pid must be a process id, got %d", pid)
	}
	if pid > 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return usageErr("--pid %d: no such process", pid)
		}
	}
	return nil
}

func requireRoot(what string) error {
	if os.Geteuid() != 0 {
		return privilegeErr("%s needs root: it loads BPF programs into the kernel (run it with sudo)", what)
	}
	return nil
}

// checkWritable checks, before the run, a file that wolf appends to as it
// goes (watch's --output): see outfile.Stream. It creates nothing.
func checkWritable(path string) error {
	return outfile.Stream(path)
}

// fileFlags are the flags that name a file or directory wolf writes.
var fileFlags = map[string]string{
	"output":    "to write to standard output",
	"folded":    "to write no folded files",
	"pprof":     "to write no pprof file",
	"incidents": "to keep no incidents",
	"btf":       "to use the kernel's own BTF",
}

// checkFlagValues refuses values that parse but are mistakes, for every
// command (the root command runs it before any): an empty file name, which
// would silently mean "standard output" or "none" (--output "$UNSET"), and
// --pid 0, which would silently mean "every process".
func checkFlagValues(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) { // only the flags given
		if err != nil {
			return
		}
		if alt, ok := fileFlags[f.Name]; ok && f.Value.Type() == "string" && f.Value.String() == "" {
			err = usageErr("--%s: empty file name (leave --%s out %s)", f.Name, f.Name, alt)
		}
		if f.Name == "pid" && f.Value.String() == "0" {
			err = usageErr("--pid 0 is no process (leave --pid out for every process)")
		}
	})
	return err
}
