package main

import (
	"flag"
	"regexp"
	"slices"
	"testing"

	"rtgate/server"
)

// TestEveryFlagIsInTheSettingsTable: the flags the gateway takes are the
// ones docs/configuration.md lists (its flag column is written from
// server.SettingsTable), so a flag added here without a row, or a row whose
// flag is gone, fails.
func TestEveryFlagIsInTheSettingsTable(t *testing.T) {
	cfg := server.Defaults()
	f, err := newFlags(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	var defined []string
	f.fs.VisitAll(func(fl *flag.Flag) { defined = append(defined, fl.Name) })
	name := regexp.MustCompile("`-([a-z][a-z-]*)")
	var listed []string
	for _, row := range server.SettingsTable() {
		for _, m := range name.FindAllStringSubmatch(row.Flag, -1) {
			listed = append(listed, m[1])
		}
	}
	slices.Sort(defined)
	slices.Sort(listed)
	if !slices.Equal(defined, listed) {
		t.Fatalf("the gateway's flags\n %v\nthe settings table's\n %v", defined, listed)
	}
}
