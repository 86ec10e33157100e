package proc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLogProblems(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.log")
	log := strings.Join([]string{
		`time=... level=WARN msg="dropping a session whose client stopped reading"`,
		`panic: runtime error: index out of range [3] with length 3`,
		``,
		`goroutine 7 [running]:`,
		`WARNING: DATA RACE`,
		`fatal error: concurrent map writes`,
		`level=INFO msg="session ended" reason="panic: in a reason is not a panic"`,
	}, "\n")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LogProblems(path, 10)
	want := []string{"panic: runtime error: index out of range [3] with length 3", "WARNING: DATA RACE", "fatal error: concurrent map writes"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("LogProblems = %q, %v; want %q", got, err, want)
	}
	if got, _ := LogProblems(path, 1); len(got) != 1 {
		t.Errorf("limit 1: %d lines", len(got))
	}
	if _, err := LogProblems(filepath.Join(t.TempDir(), "none.log"), 10); err == nil {
		t.Error("missing log: no error")
	}
}

func TestGatewayEnv(t *testing.T) {
	env := GatewayEnv([]string{"PATH=/bin", "MAX_STALLED_BYTES=999", "OPENAI_API_KEY=sk-real"},
		map[string]string{"MAX_STALLED_BYTES": "262144", "OPENAI_API_KEY": "sk-mock"})
	if got := strings.Join(env, " "); got != "PATH=/bin MAX_STALLED_BYTES=262144 OPENAI_API_KEY=sk-mock" {
		t.Errorf("env = %q", got)
	}
}
