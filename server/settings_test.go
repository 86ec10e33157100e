package server

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The documentation's settings tables are what SettingsTable renders: a
// row edited on a page alone, or in the table alone, fails here.
func TestSettingsPagesMatchTheTable(t *testing.T) {
	for _, page := range []SettingsPage{ConfigurationPage, LimitsPage} {
		path := SettingsPageFile(page)
		t.Run(path, func(t *testing.T) {
			doc, err := os.ReadFile(filepath.Join("..", path))
			if err != nil {
				t.Fatal(err)
			}
			want, err := SpliceSettings(doc, page)
			if err != nil {
				t.Fatal(err)
			}
			if string(want) == string(doc) {
				return
			}
			got, exp := strings.Split(string(doc), "\n"), strings.Split(string(want), "\n")
			for i := range min(len(got), len(exp)) {
				if got[i] != exp[i] {
					t.Fatalf("%s differs from server.SettingsTable at line %d (run `make docs`, or edit the table):\n page:  %.160s\n table: %.160s", path, i+1, got[i], exp[i])
				}
			}
			t.Fatalf("%s differs from server.SettingsTable in length (run `make docs`)", path)
		})
	}
}

// FromEnv asks the environment for exactly the variables the table says it
// reads, so a variable cannot be read without a row on a page.
func TestFromEnvReadsWhatTheTableNames(t *testing.T) {
	var asked []string
	if _, err := FromEnv(func(name string) (string, bool) { asked = append(asked, name); return "", false }); err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, row := range SettingsTable() {
		if row.read != nil {
			named = append(named, row.Vars...)
		}
	}
	slices.Sort(asked)
	asked = slices.Compact(asked)
	slices.Sort(named)
	if !slices.Equal(asked, named) {
		t.Fatalf("FromEnv asks for\n %v\nthe table's rows read\n %v", asked, named)
	}
}

// Every row says what it means and who reads it, and no variable is on two
// rows.
func TestSettingsTableRows(t *testing.T) {
	seen := map[string]bool{}
	for i, row := range SettingsTable() {
		if row.Meaning == "" || (len(row.Vars) == 0 && row.Flag == "") {
			t.Errorf("row %d (%v %s) has no meaning or no name", i, row.Vars, row.Flag)
		}
		if (row.read == nil) == (row.ReadBy == "") {
			t.Errorf("row %d (%v): exactly one of read and ReadBy must say who reads it", i, row.Vars)
		}
		if row.read == nil && row.EmptyCounts {
			t.Errorf("row %d (%v): EmptyCounts without a read", i, row.Vars)
		}
		for _, v := range row.Vars {
			if seen[v] {
				t.Errorf("%s is on two rows", v)
			}
			seen[v] = true
		}
	}
}
