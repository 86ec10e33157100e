package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/report"
)

// voiceOptions are the flags of sustained voice mode (-voice N).
type voiceOptions struct {
	n        int
	duration time.Duration
	interval time.Duration
}

func (v *voiceOptions) register(fs *flag.FlagSet) {
	fs.IntVar(&v.n, "voice", 0, "voice mode: open this many sessions and stream audio both ways in real time (needs mockai -stream 20ms upstream)")
	fs.DurationVar(&v.duration, "voice-for", 10*time.Second, "with -voice: how long every session streams")
	fs.DurationVar(&v.interval, "voice-interval", 20*time.Millisecond, "with -voice: one append of this much audio every interval")
}

func (v *voiceOptions) check(o benchOptions) error {
	switch {
	case v.n < 0:
		return fmt.Errorf("-voice must not be negative, got %d", v.n)
	case v.n > 0 && (o.hold > 0 || o.open.rate > 0 || o.audio):
		return errors.New("-voice cannot be combined with -hold, -rate or -audio")
	case v.n > 0 && (v.duration <= 0 || v.interval < time.Millisecond):
		return fmt.Errorf("-voice-for must be positive and -voice-interval at least 1ms, got %v and %v", v.duration, v.interval)
	}
	return nil
}

func (v *voiceOptions) describe(c int) string {
	return fmt.Sprintf("voice: %d sessions streaming %v every %v for %v, opening %d at a time", v.n, v.interval, v.interval, v.duration, c)
}

// runVoice runs voice mode: 0 when every session opened streamed to the end,
// 1 when none opened or any was lost.
func runVoice(ctx context.Context, client *load.Client, o benchOptions, stdout, stderr io.Writer) int {
	res, err := load.Voice(ctx, client, load.VoiceOptions{N: o.voice.n, Concurrency: o.c, Duration: o.voice.duration, Interval: o.voice.interval})
	if res != nil {
		fmt.Fprint(stdout, report.VoiceMarkdown(res))
	}
	if err != nil {
		fmt.Fprintln(stderr, "wsbench:", err)
		return 1
	}
	if o.jsonPath != "" {
		doc := struct {
			Target string `json:"target"`
			*load.VoiceResult
		}{o.url, res}
		if err := writeJSON(o.jsonPath, doc); err != nil {
			fmt.Fprintln(stderr, "wsbench:", err)
			return 1
		}
	}
	if res.Opened == 0 || len(res.Lost) > 0 {
		return 1
	}
	return 0
}
