package main

import (
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/reclaim"
)

func newReclaimCmd() *cobra.Command {
	var (
		out      outputFlags
		duration time.Duration
		pid      int
		cgroup   string
	)
	c := &cobra.Command{
		Use:   "reclaim",
		Short: "Find cgroups and tasks stalled in memory reclaim, and the memcg reclaim livelock",
		Long: `reclaim watches the kernel's vmscan tracepoints and reports, per memory
cgroup and per task, how often and how long tasks reclaimed memory, how many
pages each reclaim scanned for each one it freed, and what the cgroup looked
like meanwhile: limit, usage, limit hits, OOM kills, LRU sizes, pressure
(PSI), and its processes' %usr/%sys and page-fault rates, as pidstat shows.

Its critical verdict is the memcg reclaim livelock: a cgroup at its limit
whose reclaim calls last seconds and free almost nothing of what they scan,
its tasks all in the kernel, faults crawling, and no OOM kill to end it.`,
		Example: `  wolf reclaim                        # watch 10 s, every cgroup
  wolf reclaim --cgroup /kubepods/pod1 --duration 30s
  wolf reclaim --pid 1234 --format json   # only process 1234 and its cgroup`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := out.validate(); err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if err := checkPID(pid); err != nil {
				return err
			}
			if cgroup != "" {
				h, err := memcg.Find(cmd.Context(), procfs.Reader{})
				if err != nil {
					return privilegeErr("--cgroup: %v", err)
				}
				if st, err := os.Stat(h.Dir(cgroup)); err != nil || !st.IsDir() {
					return usageErr("--cgroup %s: no such memory cgroup under %s", cgroup, h.Mount)
				}
				cgroup = filepath.Clean("/" + cgroup)
			}
			if err := requireRoot("wolf reclaim"); err != nil {
				return err
			}
			r := reclaim.New()
			r.Cgroup = cgroup
			rep, errs := runInvestigators(cmd.Context(), "reclaim", []investigator.Investigator{r}, investigator.Options{Duration: duration, PID: pid}, false, os.Stderr)
			if len(errs) > 0 {
				return investigationErr(errs[0])
			}
			return out.write(cmd.OutOrStdout(), rep)
		},
	}
	out.register(c)
	c.Flags().DurationVarP(&duration, "duration", "d", 10*time.Second, "how long to watch")
	c.Flags().IntVarP(&pid, "pid", "p", 0, "only this process and its memory cgroup")
	c.Flags().StringVar(&cgroup, "cgroup", "", "only this memory cgroup and its descendants (path in the memory hierarchy)")
	return c
}
