package scenario

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// binDir holds bin/gateway and bin/mockai as TestMain built them (set once,
// before any test runs).
var binDir string

// binDirEnv names a folder of prebuilt gateway and mockai binaries to run
// instead of building this checkout's (to run the scenarios against another
// commit's build, e.g. the one before a fix).
const binDirEnv = "SCENARIO_BIN_DIR"

// burnEnv makes this test binary a CPU burner instead of a test run: it
// spins for the duration the variable holds, then exits (startBurners).
const burnEnv = "SCENARIO_BURN_FOR"

func TestMain(m *testing.M) {
	if d := os.Getenv(burnEnv); d != "" {
		os.Exit(burn(d))
	}
	if dir := os.Getenv(binDirEnv); dir != "" {
		fmt.Fprintf(os.Stderr, "scenario: running the binaries in %s=%s, not this checkout's\n", binDirEnv, dir)
		binDir = dir
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "rtgate-scenario-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenario:", err)
		os.Exit(1)
	}
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, "scenario:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinaries builds the gateway and mockai into dir without the race
// detector, whatever this test binary was built with: the scenarios measure
// the pool as users run it, and a race build's slower handshakes and relay
// would change what "keeping up" means. -race is dropped from GOFLAGS too.
func buildBinaries(dir string) error {
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "rtgate/cmd/gateway", "rtgate/cmd/mockai")
	cmd.Env = append(os.Environ(), "GOFLAGS="+withoutRace(os.Getenv("GOFLAGS")))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build gateway and mockai: %w\n%s", err, out)
	}
	return nil
}

// withoutRace is a GOFLAGS value with -race (and -race=...) removed.
func withoutRace(goflags string) string {
	var keep []string
	for _, f := range strings.Fields(goflags) {
		if f != "-race" && !strings.HasPrefix(f, "-race=") {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}

// burn spins on one core for the duration d names and returns the exit
// code: the busy neighbour of TestSharedLimitHoldsOnABusyHost.
func burn(d string) int {
	dur, err := time.ParseDuration(d)
	if err != nil || dur <= 0 || dur > 5*time.Minute {
		fmt.Fprintf(os.Stderr, "%s=%q: want a duration up to 5m\n", burnEnv, d)
		return 2
	}
	end := time.Now().Add(dur)
	x := 0
	for time.Now().Before(end) {
		for i := range 1 << 20 {
			x += i
		}
	}
	if x == 42 { // keeps the loop from being optimised away
		fmt.Println(x)
	}
	return 0
}

// startBurners starts n CPU burners, each this binary spinning for at most
// d, and kills them by PID when the test ends.
func startBurners(t *testing.T, n int, d time.Duration) {
	t.Helper()
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), burnEnv+"="+d.String())
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a CPU burner: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

func TestWithoutRace(t *testing.T) {
	for in, want := range map[string]string{
		"":                        "",
		"-race":                   "",
		"-mod=mod -race -count=1": "-mod=mod -count=1",
		"-race=true -trimpath":    "-trimpath",
	} {
		if got := withoutRace(in); got != want {
			t.Errorf("withoutRace(%q) = %q, want %q", in, got, want)
		}
	}
}
