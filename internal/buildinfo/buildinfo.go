// Package buildinfo says what a wolf binary is: its version, the commit
// and commit date it was built from, the Go toolchain, the BPF objects
// compiled into it and the kernels wolf is tested on.
//
// A release build (make release) sets version, commit and date with
// -ldflags -X; the date is the commit's, not the clock's, so two builds of
// one commit are byte-identical. Any other build (go build, go run,
// go install) falls back to what the Go toolchain stamps into every
// binary: the module version for go install pkg@version, the VCS revision
// and time for a build inside a git checkout.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set with -ldflags "-X github.com/wolf-investigator/wolf/internal/buildinfo.version=…"
// (and commit, date) by the Makefile. Left empty by any other build.
var (
	version string
	commit  string
	date    string
)

// devVersion names a build that has neither a release version nor a module
// version (go build or go run from a clone).
const devVersion = "0.1.0-dev"

// Info describes this binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Date      string `json:"build_date,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
	// Source says where Version, Commit and Date come from: "release"
	// (set by make), "module" (go install pkg@version), "vcs" (a build in
	// a git checkout) or "none".
	Source string `json:"source"`
}

// Get returns the build information of the running binary.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(bi, version, commit, date)
}

// Version is the version string wolf prints in reports and --version.
func Version() string { return Get().Version }

// fromBuild merges the -X values with what the toolchain recorded; the -X
// values win, since only a release build sets them.
func fromBuild(bi *debug.BuildInfo, ver, rev, when string) Info {
	in := Info{
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
		Source:    "none",
	}
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Commit = s.Value
			case "vcs.time":
				in.Date = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
		if in.Commit != "" {
			in.Source = "vcs"
		}
		// go install pkg@v1.2.3 records the module version; a build in
		// the main module's own checkout records "(devel)" or, since Go
		// 1.24, a pseudo-version derived from VCS, which says no more
		// than the revision does.
		if v := bi.Main.Version; v != "" && v != "(devel)" && in.Commit == "" {
			in.Version = v
			in.Source = "module"
		}
	}
	if ver != "" {
		in.Version, in.Source = ver, "release"
		if rev != "" {
			in.Commit = rev
		}
		if when != "" {
			in.Date = when
		}
	}
	if in.Version == "" {
		in.Version = devVersion
		if in.Commit != "" {
			in.Version += "+" + short(in.Commit)
			if in.Modified {
				in.Version += ".dirty"
			}
		}
	}
	return in
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
