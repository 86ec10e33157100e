package peers

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReadme(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	before := "# x\n\nintro\n\n" + readmeBegin + "\nold table\n" + readmeEnd + "\n\nafter\n"
	os.WriteFile(path, []byte(before), 0o644)
	if err := WriteReadme(path, "| new | table |"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := "# x\n\nintro\n\n" + readmeBegin + "\n| new | table |\n" + readmeEnd + "\n\nafter\n"; string(got) != want {
		t.Errorf("README:\n%s\nwant:\n%s", got, want)
	}
	os.WriteFile(path, []byte("# no markers\n"), 0o644)
	if err := WriteReadme(path, "t"); !errors.Is(err, ErrNoReadmeSection) {
		t.Errorf("no markers: %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "# no markers\n" {
		t.Errorf("file without markers changed: %q", got)
	}
	if err := WriteReadme(filepath.Join(t.TempDir(), "none.md"), "t"); err == nil {
		t.Error("missing file: no error")
	}
}
