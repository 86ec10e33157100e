package server

import (
	"bytes"
	"fmt"
	"strings"
)

// The documentation's settings tables, written from SettingsTable by
// `make docs` (cmd/settingsdoc) between two marker lines on each page;
// the prose around them is the page's own.

// SettingsPageFile is the file, relative to the repository's root, whose
// table lists page's settings.
func SettingsPageFile(page SettingsPage) string {
	if page == LimitsPage {
		return "docs/operations.md"
	}
	return "docs/configuration.md"
}

const (
	settingsBegin = "<!-- settings table: written by `make docs` from server.SettingsTable; edit it there -->"
	settingsEnd   = "<!-- end of settings table -->"
)

// RenderSettings is page's table in Markdown, its header included.
func RenderSettings(page SettingsPage) string {
	var b strings.Builder
	switch page {
	case ConfigurationPage:
		b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	case LimitsPage:
		b.WriteString("| variable | default | what happens at the limit |\n|---|---|---|\n")
	}
	for _, row := range SettingsTable() {
		if row.Page != page {
			continue
		}
		vars := make([]string, len(row.Vars))
		for i, v := range row.Vars {
			vars[i] = "`" + v + "`"
		}
		name := strings.Join(vars, ", ")
		if row.MoreVars {
			name += ", ..."
		}
		cells := []string{name, row.Flag, row.Default, row.Meaning}
		if page == LimitsPage {
			if row.Flag != "" {
				name += " (" + row.Flag + ")"
			}
			cells = []string{name, row.Default, row.Meaning}
		}
		for _, c := range cells {
			if c == "" {
				b.WriteString("| ")
			} else {
				b.WriteString("| " + c + " ")
			}
		}
		b.WriteString("|\n")
	}
	return b.String()
}

// SpliceSettings returns doc, a page's text, with the table between its
// markers replaced by page's table as RenderSettings writes it.
func SpliceSettings(doc []byte, page SettingsPage) ([]byte, error) {
	begin := bytes.Index(doc, []byte(settingsBegin+"\n"))
	end := bytes.Index(doc, []byte(settingsEnd))
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("%s: no settings table markers (%q … %q)", SettingsPageFile(page), settingsBegin, settingsEnd)
	}
	begin += len(settingsBegin) + 1
	var out bytes.Buffer
	out.Write(doc[:begin])
	out.WriteString(RenderSettings(page))
	out.Write(doc[end:])
	return out.Bytes(), nil
}
