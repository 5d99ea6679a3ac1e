package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/export"
	"github.com/wolf-investigator/wolf/internal/finding"
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
}

func (o *outputFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&o.format, "format", "text", "output format: text, json or html (html: a self-contained page, with --output)")
	c.Flags().StringVarP(&o.output, "output", "o", "", "write the report to `FILE` instead of standard output")
	c.Flags().StringVar(&o.folded, "folded", "", "write each stack profile in folded form (flame graphs) to `FILE` with the profile's name before the extension")
	c.Flags().StringVar(&o.pprof, "pprof", "", "write the stack profiles to `FILE` in pprof format (go tool pprof)")
}

// validate checks the flags before any work starts, so bad usage fails in
// milliseconds, not after a 10 s investigation.
func (o *outputFlags) validate() (render.Format, error) {
	f, err := render.ParseFormat(o.format)
	if err != nil {
		return "", usageErr("--format: %v", err)
	}
	if f == render.FormatHTML && o.output == "" && isTerminal(os.Stdout) {
		return "", usageErr("--format html needs --output FILE (a terminal full of HTML helps nobody)")
	}
	if o.output != "" {
		if st, err := os.Stat(o.output); err == nil && st.IsDir() {
			return "", usageErr("--output %s: is a directory", o.output)
		}
	}
	for _, e := range []struct{ flag, path string }{{"--folded", o.folded}, {"--pprof", o.pprof}} {
		if e.path == "" {
			continue
		}
		if err := checkWritable(e.path); err != nil {
			return "", usageErr("%s: %v", e.flag, err)
		}
	}
	return f, nil
}

// write renders the report to stdout or the --output file.
func (o *outputFlags) write(stdout io.Writer, r *finding.Report) error {
	f, err := o.validate()
	if err != nil {
		return err
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
	if err := o.export(r); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if o.output == "" {
		_, err = stdout.Write(buf.Bytes())
		return wrapFailure(err)
	}
	if err := os.WriteFile(o.output, buf.Bytes(), 0o644); err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("write report: %w", err)}
	}
	return nil
}

// export writes --folded and --pprof. A run that collected no stacks
// still writes a (sample-less) pprof file, so a script finds what it
// asked for; folded files exist one per profile, so there are none.
func (o *outputFlags) export(r *finding.Report) error {
	if o.folded != "" {
		if len(r.Profiles) == 0 {
			fmt.Fprintln(os.Stderr, "wolf: --folded: no stacks collected in this run; no folded file written")
		}
		for i := range r.Profiles {
			p := &r.Profiles[i]
			path := export.FoldedPath(o.folded, p.Name)
			if err := writeFile(path, func(w io.Writer) error { return export.Folded(w, p) }); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "wolf: wrote %s (%d stacks, %d %s)\n", path, len(p.Stacks), p.Total(), p.Unit)
		}
	}
	if o.pprof != "" {
		dur := time.Duration(r.DurationS * float64(time.Second))
		if err := writeFile(o.pprof, func(w io.Writer) error { return export.PProf(w, r.Profiles, r.StartedAt, dur) }); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	w := bufio.NewWriter(f)
	if err := fill(w); err != nil {
		f.Close()
		return fmt.Errorf("export %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("export %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	return nil
}

// newReport fills the header of a report.
func newReport(command string, started time.Time) *finding.Report {
	host, _ := os.Hostname()
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

// checkWritable rejects an output path that cannot be a file: a directory,
// or one in a directory that does not exist. It creates nothing, so a
// failed run leaves no empty file behind.
func checkWritable(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s: is a directory", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	return nil
}
