package harness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"rtgate/bench/proc"
)

// Settings are what the compare and soak harnesses share besides their own
// knobs: the binaries they run, how mockai serves, where results go.
type Settings struct {
	MockaiBin, GatewayBin string
	// Upstream is how mockai serves: TLS (wss://, as OpenAI does) or plain.
	Upstream proc.Upstream
	// OutDir receives a <kind>-<timestamp> directory per run.
	OutDir string
	// Progress, if not nil, receives progress lines.
	Progress io.Writer
	// Now is the clock for the directory name (nil: time.Now).
	Now func() time.Time
}

// Check lists what is wrong with s before anything runs.
func (s Settings) Check(needGateway bool) []error {
	var errs []error
	if s.MockaiBin == "" {
		errs = append(errs, errors.New("no mockai binary"))
	}
	if needGateway && s.GatewayBin == "" {
		errs = append(errs, errors.New("no gateway binary"))
	}
	if _, err := proc.ParseUpstream(string(s.Upstream)); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// Begin starts a run of kind ("compare", "soak"): it checks that the
// binaries exist (the gateway's only when needGateway), makes the results
// directory, and returns it with the start time and the progress printer.
func (s Settings) Begin(kind string, needGateway bool) (dir string, started time.Time, say Say, err error) {
	bins := []string{s.MockaiBin}
	if needGateway {
		bins = append(bins, s.GatewayBin)
	}
	for _, bin := range bins {
		if _, err := os.Stat(bin); err != nil {
			return "", time.Time{}, nil, fmt.Errorf("%w (build it first: go build -o %s ./cmd/%s)", err, bin, filepath.Base(bin))
		}
	}
	now := s.Now
	if now == nil {
		now = time.Now
	}
	started = now()
	if dir, err = ResultsDir(s.OutDir, kind, started); err != nil {
		return "", time.Time{}, nil, err
	}
	return dir, started, Sayer(s.Progress), nil
}
