package main

import "github.com/wolf-investigator/wolf/internal/render"

// textOrJSON refuses --format html for commands whose output is a listing
// or a benchmark rather than a report: the page draws reports only.
func textOrJSON(f render.Format, err error) (render.Format, error) {
	if err == nil && f == render.FormatHTML {
		return "", usageErr("--format html is for reports (doctor and the investigators); this command prints text or json")
	}
	return f, err
}
