package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/buildinfo"
)

// versionReport is what wolf version prints: the build, the BPF objects it
// will load and the kernels it is proven on.
type versionReport struct {
	buildinfo.Info
	BPFObjects    []buildinfo.Object       `json:"bpf_objects"`
	KernelRange   string                   `json:"tested_kernel_range"`
	TestedKernels []buildinfo.TestedKernel `json:"tested_kernels"`
}

func newVersionCmd() *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the version, the build, the BPF objects and the tested kernels",
		Long: `version says what this wolf binary is: its version, the commit and commit
date it was built from, the Go toolchain, every BPF object compiled into it
(with its size and SHA-256, read from the binary itself) and the kernels
wolf's tests have run on. It needs no privilege.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return usageErr("--format: %q is not text or json", format)
			}
			exe, err := os.Executable()
			if err != nil {
				return wrapFailure(fmt.Errorf("finding the executable: %w", err))
			}
			objs, err := buildinfo.Objects(exe)
			if err != nil {
				return wrapFailure(err)
			}
			kernels := buildinfo.TestedKernels()
			rep := versionReport{
				Info:          buildinfo.Get(),
				BPFObjects:    objs,
				KernelRange:   buildinfo.KernelRange(kernels),
				TestedKernels: kernels,
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return wrapFailure(enc.Encode(rep))
			}
			return wrapFailure(writeVersion(cmd.OutOrStdout(), rep))
		},
	}
	c.Flags().StringVar(&format, "format", "text", "output format: text or json")
	return c
}

func writeVersion(w io.Writer, r versionReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "wolf\t%s\n", r.Version)
	commit := r.Commit
	if commit == "" {
		commit = "unknown (not built from a git checkout)"
	}
	if r.Modified {
		commit += " with uncommitted changes"
	}
	fmt.Fprintf(tw, "commit\t%s\n", commit)
	if r.Date != "" {
		fmt.Fprintf(tw, "built\t%s (the commit's date)\n", r.Date)
	}
	fmt.Fprintf(tw, "go\t%s %s\n", r.GoVersion, r.Platform)
	fmt.Fprintf(tw, "kernels\ttested on %s\n", r.KernelRange)
	for _, k := range r.TestedKernels {
		fmt.Fprintf(tw, "\t  %s %s, %s: %s\n", k.Kernel, k.Arch, k.Where, k.Scope)
	}
	fmt.Fprintf(tw, "bpf objects\t%d compiled in\n", len(r.BPFObjects))
	for _, o := range r.BPFObjects {
		fmt.Fprintf(tw, "\t  %s\t%d B\tsha256:%s\n", o.File, o.Size, o.SHA256[:16])
	}
	return tw.Flush()
}
