// Command mockai runs the fake OpenAI Realtime upstream (package rtgate/mockai) as a
// separate process, for scripts and for tests that need the upstream out of process.
//
// It prints one line, "mockai listening on <base URL>", once it accepts connections,
// serves until SIGINT or SIGTERM, and exits 2 on invalid flags. What reached it is at
// GET /mock/records and GET /mock/stats on the same port; GET and POST
// /mock/config show and change the first-audio delay while it runs. The
// same port serves xAI's Grok Voice Agent dialect under /xai/v1 (a gateway
// deployment's api_base http://<addr>/xai/v1; -xai-* flags).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"rtgate/internal/fdlimit"
	"rtgate/mockai"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the parsed command line.
type options struct {
	addr    string
	verbose bool
	cfg     mockai.Config
}

// parseFlags reads the command line; errors are meant for the user as they are.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("mockai", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8089", "listen address")
	fs.StringVar(&o.cfg.Key, "key", "", "the only API key accepted (empty: any)")
	fs.IntVar(&o.cfg.RejectStatus, "reject-status", 0, "bad key: 0 = upgrade, error event, close 4000; 401 or 403 = that HTTP status")
	fs.BoolVar(&o.cfg.TLS, "tls", false, "serve wss with a fresh self-signed certificate")
	fs.StringVar(&o.cfg.CertFile, "cert-out", "", "with -tls: write the certificate (PEM) to this file")
	fs.BoolVar(&o.cfg.OneSegment, "one-segment", false, "send the 101 and session.created in one socket write (with -tls: two TLS records in one TCP segment)")
	fs.DurationVar(&o.cfg.UpgradeDelay, "upgrade-delay", 0, "delay before the 101 response")
	fs.DurationVar(&o.cfg.SessionDelay, "session-delay", 0, "delay after the 101, before session.created")
	fs.DurationVar(&o.cfg.FirstAudioDelay, "first-audio-delay", 0, "delay after response.create, before the first audio (or text, or tool arguments) delta; changed while running by POST /mock/config?first_audio_delay=D")
	fs.BoolVar(&o.cfg.CreatedWithFirstOutput, "created-with-first-output", false, "send a response's response.created only together with its first output delta (an upstream slow to start responses)")
	fs.BoolVar(&o.cfg.FailResponses, "fail-responses", false, "fault: fail every response (response.done status failed, server_error, after the first-audio delay)")
	fs.IntVar(&o.cfg.AudioDeltas, "deltas", 0, "audio deltas per response (0 = 5, -1 = none)")
	fs.IntVar(&o.cfg.AudioDeltaBytes, "delta-bytes", 0, "raw PCM bytes per audio delta (0 = 4800, 100 ms)")
	fs.DurationVar(&o.cfg.AudioDeltaInterval, "delta-interval", 0, "gap between audio deltas")
	fs.IntVar(&o.cfg.CloseAfterFrames, "close-after", 0, "fault: close 1011 after N sent frames (0 = off)")
	fs.IntVar(&o.cfg.DropAfterFrames, "drop-after", 0, "fault: drop TCP without a close frame after N sent frames (0 = off)")
	fs.IntVar(&o.cfg.MalformedAfterFrames, "malformed-after", 0, "fault: write a malformed frame after N sent frames (0 = off)")
	fs.DurationVar(&o.cfg.SessionCap, "session-cap", 0, "OpenAI's cap on a session: after this long, error session_expired and close 1001 (0 = an hour, not enforced); expires_at says it")
	fs.StringVar(&o.cfg.Cut.Kind, "cut", "", "fault: end sessions at a point of the conversation: drop, close or midframe (with -cut-after)")
	fs.IntVar(&o.cfg.Cut.AfterResponses, "cut-after", 0, "with -cut: after the Nth response.done (or during the Nth response with -cut-during); 0 = 1")
	fs.BoolVar(&o.cfg.Cut.During, "cut-during", false, "with -cut: cut during the response, after its first output delta")
	fs.IntVar(&o.cfg.Cut.Code, "cut-code", 0, "with -cut close: the close code (0 = 1011)")
	fs.IntVar(&o.cfg.Cut.Times, "cut-times", 0, "with -cut: cut only this many sessions (0 = every one)")
	fs.BoolVar(&o.cfg.IgnoreCancel, "ignore-cancel", false, "fault: never answer response.cancel (the response streams on to its end)")
	fs.BoolVar(&o.cfg.CancelLate, "cancel-late", false, "fault: answer response.cancel with error response_cancel_not_active, then end the response at once, completed (the cancel crossed the response's own end)")
	fs.BoolVar(&o.cfg.StopReading, "stop-reading", false, "fault: never read from a connection after session.created")
	fs.IntVar(&o.cfg.StatusCode, "status", 0, "fault: answer every upgrade with this HTTP status (e.g. 429, 500)")
	fs.DurationVar(&o.cfg.StallFor, "stall-for", 0, "fault: drop a stalled connection this long after session.created (0 = never)")
	fs.BoolVar(&o.cfg.FaultsFromQuery, "faults-from-query", false, "let each connection pick a fault with ?fault=drop|close|malformed|stall|no_closed|<status>&fault_after=N, and its first-audio delay with ?first_audio_delay=D")
	fs.BoolVar(&o.cfg.Echo, "echo", false, "after session.created, send every data message back verbatim instead of answering it")
	fs.DurationVar(&o.cfg.Stream.Interval, "stream", 0, "voice mode: after the client's first message, send an audio delta every interval (e.g. 20ms) and drop what the client sends")
	fs.IntVar(&o.cfg.Stream.Bytes, "stream-bytes", 0, "with -stream: PCM bytes per delta (0 = 24 kHz for one interval, 960 for 20ms)")
	fs.DurationVar(&o.cfg.Live.UsageInterval, "live-usage-interval", 0, "GPT-Live: session.usage.updated every interval (0 = 1s, negative = never)")
	fs.DurationVar(&o.cfg.Live.MediaInterval, "live-media-interval", 0, "GPT-Live: a WebRTC/SIP session's simulated media tick, reflected to sidebands (0 = 100ms)")
	fs.DurationVar(&o.cfg.Live.MediaChunk, "live-media-chunk", 0, "GPT-Live: the audio each media tick adds to a WebRTC/SIP session's seconds and reflects (0 = the interval: real time)")
	fs.DurationVar(&o.cfg.Live.MaxDuration, "live-max-duration", 0, "GPT-Live: session length before session.closed reason expired (0 = 1h)")
	fs.DurationVar(&o.cfg.Live.StartTimeout, "live-start-timeout", 0, "GPT-Live: an upgraded socket without session.start this long gets an error and close 4000 (0 = never)")
	fs.IntVar(&o.cfg.Live.MaxSidebands, "live-max-sidebands", 0, "GPT-Live: refuse (409 too_many_sidebands) a sideband beyond this many attached to one session (0: no limit)")
	fs.BoolVar(&o.cfg.Live.ClientDelegations, "live-client-delegations", false, "GPT-Live: end each answer to input audio with a session.delegation.created of target client (sessions that delegate to their client)")
	fs.BoolVar(&o.cfg.Live.NoClosed, "live-no-closed", false, "GPT-Live fault: answer session.close with close 1000 but no session.closed")
	fs.DurationVar(&o.cfg.XAIPingInterval, "xai-ping-interval", 0, "xAI dialect (WS /xai/v1/realtime): a ping event every interval after the one that follows conversation.created (0 = 1s, negative = only that one)")
	fs.BoolVar(&o.cfg.XAISessionCreated, "xai-session-created", false, "xAI dialect: open sessions with session.created before conversation.created, as xAI does since May 2026 (default: conversation.created first, no session.created)")
	fs.DurationVar(&o.cfg.Gemini.GoAwayAfter, "gemini-go-away-after", 0, "Gemini Live: send goAway this long after setupComplete, then close 1011 once its time left has passed, as Google does at a connection's cap (0 = never)")
	fs.DurationVar(&o.cfg.Gemini.GoAwayTimeLeft, "gemini-go-away-time-left", 0, "Gemini Live: the timeLeft a goAway announces and waits (0 = 1s)")
	fs.Func("input-transcript", "the transcript of a committed user turn (repeat for each turn, in order, cycling; default \"Hello from mockai.\")", func(v string) error {
		o.cfg.InputTranscripts = append(o.cfg.InputTranscripts, v)
		return nil
	})
	fs.DurationVar(&o.cfg.TranscriptionDelay, "transcription-delay", 0, "send each input transcription.completed this long after its commit, without holding other events")
	fs.Func("output-transcript", "what an audio response says, split into words over its audio deltas (repeat for each response, in order, cycling; default one delta \"Hello from mockai.\")", func(v string) error {
		o.cfg.OutputTranscripts = append(o.cfg.OutputTranscripts, v)
		return nil
	})
	fs.DurationVar(&o.cfg.OutputTranscriptLag, "output-transcript-lag", 0, "send each output transcript delta this long after the audio delta it covers")
	fs.StringVar(&o.cfg.ToolArguments, "tool-arguments", "", "the arguments of every function call, streamed in 2+ deltas (default {} in one)")
	fs.BoolVar(&o.verbose, "v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.cfg.Cut.Kind != "" && o.cfg.Cut.AfterResponses == 0 {
		o.cfg.Cut.AfterResponses = 1
	}
	if o.cfg.AudioDeltas < -1 {
		return o, fmt.Errorf("-deltas %d: must be -1 (none), 0 (default) or more", o.cfg.AudioDeltas)
	}
	return o, nil
}

// run is main without the exit, so it can be tested: 0 ok, 1 runtime failure, 2 bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "mockai:", err)
		return 2
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	o.cfg.Logger = logger

	if err := fdlimit.Raise(); err != nil {
		logger.Warn("could not raise the open file limit", "err", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := mockai.Start(o.cfg, o.addr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		if errors.Is(err, mockai.ErrConfig) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stdout, "mockai listening on %s\n", srv.BaseURL())
	<-ctx.Done()
	logger.Info("shutting down", "stats", srv.Stats())
	if err := srv.Close(); err != nil {
		logger.Error("close", "err", err)
		return 1
	}
	return 0
}
