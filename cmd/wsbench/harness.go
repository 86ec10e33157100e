package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"rtgate/bench/harness"
	"rtgate/bench/proc"
)

// harnessFlags starts the flag set of a subcommand that runs mockai and the
// gateway as processes (compare, soak, peers) with the flags they all have:
// the two binaries and the results directory.
func harnessFlags(name string, stderr io.Writer, mockai, gateway, out *string) *flag.FlagSet {
	fs := flag.NewFlagSet("wsbench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(mockai, "mockai", *mockai, "mockai binary (go build -o bin/mockai ./cmd/mockai)")
	fs.StringVar(gateway, "gateway", *gateway, "gateway binary (go build -o bin/gateway ./cmd/gateway)")
	fs.StringVar(out, "out", *out, "results directory (a "+name+"-<timestamp> folder is made inside)")
	return fs
}

// settingsFlags is harnessFlags for compare and soak, whose shared settings
// also take -upstream and -quiet (no progress lines).
func settingsFlags(name string, stderr io.Writer, s *harness.Settings) (*flag.FlagSet, *bool) {
	fs := harnessFlags(name, stderr, &s.MockaiBin, &s.GatewayBin, &s.OutDir)
	upstreamFlag(fs, &s.Upstream)
	return fs, fs.Bool("quiet", false, "no progress lines")
}

// upstreamFlag adds -upstream, one of tls (wss://) and plain (ws://), to fs.
func upstreamFlag(fs *flag.FlagSet, dst *proc.Upstream) {
	fs.Func("upstream", fmt.Sprintf("how mockai serves: tls (wss://, as OpenAI does) or plain (ws://) (default %s)", *dst),
		func(v string) error {
			u, err := proc.ParseUpstream(v)
			if err == nil {
				*dst = u
			}
			return err
		})
}

// parseHarness parses args into fs, which takes no positional arguments.
func parseHarness(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// flagExit turns a flag parsing error into the exit status of a subcommand:
// 0 after -h, 2 (with the error printed) for bad flags; ok is true when
// there was no error and the subcommand should run.
func flagExit(name string, err error, stderr io.Writer) (code int, ok bool) {
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	default:
		fmt.Fprintf(stderr, "wsbench %s: %v\n", name, err)
		return 2, false
	}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
