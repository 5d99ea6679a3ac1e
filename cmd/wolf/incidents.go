package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/incident"
	"github.com/wolf-investigator/wolf/internal/render"
)

// defaultIncidents is where the shipped systemd unit and DaemonSet keep
// watch's incidents.
const defaultIncidents = "/var/lib/wolf/incidents"

func newIncidentsCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "incidents list | show ID | pack ID",
		Short: "List, show and pack the incident bundles wolf watch --incidents wrote",
		Long: `incidents reads the bundles ` + "`wolf watch --incidents DIR`" + ` writes when a
critical finding or a diagnosis starts or escalates. ID is a bundle's
name as list prints it, or "latest".

  wolf incidents list                  newest first
  wolf incidents show latest           the report, as text (or --format json|html)
  wolf incidents pack ID > x.tar.gz    the whole bundle, to copy off a node`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("incidents needs a subcommand: list, show ID or pack ID")
		},
	}
	c.PersistentFlags().StringVar(&dir, "dir", defaultIncidents, "the incidents `DIR` (wolf watch --incidents)")

	var listFormat string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the incidents, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listFormat != "text" && listFormat != "json" {
				return usageErr("--format: want text or json, got %q", listFormat)
			}
			metas, err := listIncidents(dir)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if listFormat == "json" {
				if metas == nil {
					metas = []incident.Meta{}
				}
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return wrapFailure(enc.Encode(metas))
			}
			if len(metas) == 0 {
				fmt.Fprintf(w, "no incidents in %s\n", dir)
				return nil
			}
			for _, m := range metas {
				fmt.Fprintf(w, "%s  %s\n", m.ID, m.Summary())
			}
			return nil
		},
	}
	list.Flags().StringVar(&listFormat, "format", "text", "text or json")

	var showFormat string
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Print an incident's report (text, json or html)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := render.ParseFormat(showFormat)
			if err != nil {
				return usageErr("--format: %v", err)
			}
			m, err := findIncident(dir, args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch f {
			case render.FormatJSON, render.FormatHTML:
				name := "report.json"
				if f == render.FormatHTML {
					name = "report.html"
				}
				b, err := os.ReadFile(filepath.Join(dir, m.ID, name))
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				_, err = w.Write(b)
				return wrapFailure(err)
			}
			rep, err := incident.ReadReport(dir, m.ID)
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			fmt.Fprintf(w, "incident %s (%s)\n", m.ID, filepath.Join(dir, m.ID))
			for _, t := range m.Triggers {
				fmt.Fprintf(w, "  opened by %s %s (%s): %s\n", t.Kind, t.Event, t.Severity, t.Title)
			}
			fmt.Fprintf(w, "  files: ")
			var names []string
			for _, f := range m.Files {
				names = append(names, f.Name)
			}
			fmt.Fprintf(w, "%s\n\n", strings.Join(names, ", "))
			return wrapFailure(render.Text(w, rep, render.TextOptions{Color: isTerminal(os.Stdout)}))
		},
	}
	show.Flags().StringVar(&showFormat, "format", "text", "text, json or html")

	pack := &cobra.Command{
		Use:   "pack ID",
		Short: "Write an incident's whole bundle as a .tar.gz to standard output",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if isTerminal(os.Stdout) {
				return usageErr("pack writes a .tar.gz: redirect standard output to a file")
			}
			m, err := findIncident(dir, args[0])
			if err != nil {
				return err
			}
			return wrapFailure(packIncident(cmd.OutOrStdout(), dir, m.ID))
		},
	}
	c.AddCommand(list, show, pack)
	return c
}

func listIncidents(dir string) ([]incident.Meta, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, usageErr("--dir %s: no incidents directory there (wolf watch --incidents DIR makes one)", dir)
	}
	metas, err := incident.List(dir)
	return metas, wrapFailure(err)
}

// findIncident resolves ID or "latest".
func findIncident(dir, id string) (incident.Meta, error) {
	metas, err := listIncidents(dir)
	if err != nil {
		return incident.Meta{}, err
	}
	if id == "latest" {
		if len(metas) == 0 {
			return incident.Meta{}, usageErr("no incidents in %s", dir)
		}
		return metas[0], nil
	}
	for _, m := range metas {
		if m.ID == strings.TrimSuffix(id, "/") {
			return m, nil
		}
	}
	return incident.Meta{}, usageErr("no incident %q in %s (wolf incidents list --dir %s)", id, dir, dir)
}

// packIncident writes the bundle's files as a gzipped tar, under a
// directory named after the bundle.
func packIncident(w io.Writer, dir, id string) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	root := filepath.Join(dir, id)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // bundles hold files and folders only
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("pack %s: %w", id, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("pack %s: %w", id, err)
	}
	return zw.Close()
}
