// Command settingsdoc writes the documentation's settings tables from
// server.SettingsTable (`make docs`): each page's table between its marker
// lines, the rest of the page untouched. Run it from the repository's root.
package main

import (
	"fmt"
	"os"

	"rtgate/server"
)

func main() {
	for _, page := range []server.SettingsPage{server.ConfigurationPage, server.LimitsPage} {
		if err := write(page); err != nil {
			fmt.Fprintln(os.Stderr, "settingsdoc:", err)
			os.Exit(1)
		}
	}
}

func write(page server.SettingsPage) error {
	path := server.SettingsPageFile(page)
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the page: %w", err)
	}
	out, err := server.SpliceSettings(doc, page)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
