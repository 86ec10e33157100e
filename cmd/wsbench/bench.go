package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/report"
	"rtgate/bench/stats"
	"rtgate/internal/fdlimit"
)

// benchOptions is the parsed command line of a plain run.
type benchOptions struct {
	url            string
	key            string
	protocol       load.Protocol
	model          string // for Live: session.start's, Gemini: setup's (the URL carries Realtime's)
	n, c           int
	timeout        time.Duration
	verbose, quiet bool
	jsonPath       string
	caFile         string
	sourceIPs      []net.IP
	open           openLoopOptions
	hold           int
	holdFor        time.Duration
	audio          bool
	turns          int
	vad            bool
	vadSilence     time.Duration
	voice          voiceOptions
}

// parseBenchFlags reads a plain run's flags; getenv supplies WSBENCH_KEY.
func parseBenchFlags(args []string, stderr io.Writer, getenv func(string) string) (benchOptions, error) {
	var o benchOptions
	fs := flag.NewFlagSet("wsbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host := fs.String("host", "localhost:4000", "target: host[:port] (path /v1/realtime is added) or a full ws:// or wss:// URL")
	fs.StringVar(&o.key, "key", "", "API key sent as Authorization: Bearer, with -protocol gemini as x-goog-api-key (default $WSBENCH_KEY)")
	insecure := fs.Bool("insecure", false, "plain ws:// instead of wss:// when -host has no scheme")
	model := fs.String("m", "gpt-realtime", "model (added as ?model= unless the URL names one; -protocol live: session.start's, default gpt-live-1; gemini: setup's, default gemini-3.8-live)")
	protocol := fs.String("protocol", "realtime", "realtime, or live: GPT-Live (path /v1/live/sessions; session = session.start -> session.started, first audio = first append -> first session.output_audio.delta, total ends at session.closed), "+
		"or gemini: Gemini Live (AI Studio's path "+load.GeminiPath+"; session = setup -> setupComplete, first audio = clientContent turnComplete -> the first modelTurn audio part, a turn ends at turnComplete)")
	fs.IntVar(&o.n, "n", 100, "total calls")
	fs.IntVar(&o.c, "c", 10, "concurrent calls (sessions being opened, with -hold)")
	timeoutS := fs.Float64("t", 30, "per-call timeout, seconds")
	fs.BoolVar(&o.verbose, "v", false, "print every call to stderr")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress line or banner; only the summary")
	fs.StringVar(&o.jsonPath, "json", "", "write every call's sample and the summary as JSON to this file")
	fs.StringVar(&o.caFile, "ca", "", "PEM file of a CA to trust for wss://")
	sourceIPs := fs.String("source-ips", "", "local source addresses, round-robin: 127.0.0.1-127.0.0.8 or a,b,c")
	o.open.register(fs)
	fs.IntVar(&o.hold, "hold", 0, "hold mode: open this many sessions and keep them idle")
	fs.DurationVar(&o.holdFor, "hold-for", 10*time.Second, "with -hold: how long to hold the sessions")
	fs.BoolVar(&o.audio, "audio", false, "stream 1 s of real-time input audio (20 ms chunks) and commit before response.create")
	fs.IntVar(&o.turns, "turns", 1, "exchanges per call on one session; the first turn's first audio is reported apart from the later turns' (manual turns: -audio's appends and commit, then response.create; first audio from response.create)")
	fs.BoolVar(&o.vad, "vad", false, "server-VAD turns: session.update turns on server_vad, each turn sends 1 s (-audio length) of a tone then silence until speech_stopped; first audio is measured from the end of speech, so it includes -vad-silence")
	fs.DurationVar(&o.vadSilence, "vad-silence", load.DefaultVADSilence, "with -vad: the silence_duration_ms asked for")
	o.voice.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wsbench [flags]\n       wsbench compare|soak|peers|huge [flags]   (see wsbench compare -h)\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.key == "" {
		o.key = getenv("WSBENCH_KEY")
	}
	var err error
	if o.protocol, err = load.ParseProtocol(*protocol); err != nil {
		return o, fmt.Errorf("-protocol: %w", err)
	}
	if o.protocol == load.ProtocolLive || o.protocol == load.ProtocolGemini {
		o.model = map[load.Protocol]string{load.ProtocolLive: "gpt-live-1", load.ProtocolGemini: "gemini-3.8-live"}[o.protocol]
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "m" {
				o.model = *model
			}
		})
		if o.hold > 0 || o.voice.n > 0 {
			return o, fmt.Errorf("-protocol %s measures calls only: not with -hold or voice mode", o.protocol)
		}
	}
	url, err := load.BuildURLFor(o.protocol, *host, *insecure, *model)
	if err != nil {
		return o, fmt.Errorf("-host: %w", err)
	}
	o.url = url
	if o.sourceIPs, err = load.ParseSourceIPs(*sourceIPs); err != nil {
		return o, fmt.Errorf("-source-ips: %w", err)
	}
	switch {
	case o.n <= 0 && o.hold == 0:
		return o, fmt.Errorf("-n must be positive, got %d", o.n)
	case o.c <= 0:
		return o, fmt.Errorf("-c must be positive, got %d", o.c)
	case *timeoutS <= 0:
		return o, fmt.Errorf("-t must be positive, got %v", *timeoutS)
	case o.hold < 0:
		return o, fmt.Errorf("-hold must not be negative, got %d", o.hold)
	case o.hold > 0 && o.open.rate > 0:
		return o, errors.New("-hold and -rate cannot be combined")
	case o.holdFor < 0:
		return o, fmt.Errorf("-hold-for must not be negative, got %v", o.holdFor)
	}
	switch {
	case o.turns < 1:
		return o, fmt.Errorf("-turns must be at least 1, got %d", o.turns)
	case (o.turns > 1 || o.vad) && (o.protocol == load.ProtocolLive || o.hold > 0 || o.voice.n > 0):
		return o, errors.New("-turns and -vad measure Realtime calls: not with -protocol live, -hold or voice mode")
	case o.vad && o.protocol == load.ProtocolGemini:
		return o, errors.New("-vad turns speak the Realtime protocol: with -protocol gemini, -turns makes clientContent turns")
	case o.vadSilence <= 0 || o.vadSilence > 10*time.Second:
		return o, fmt.Errorf("-vad-silence %v: want more than 0, at most 10s", o.vadSilence)
	}
	if err := o.voice.check(o); err != nil {
		return o, err
	}
	o.timeout = time.Duration(*timeoutS * float64(time.Second))
	if err := o.open.check(fs, &o); err != nil {
		return o, err
	}
	return o, nil
}

// tlsConfig trusts -ca on top of the system roots.
func tlsConfig(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("-ca: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-ca: no PEM certificate in %s", caFile)
	}
	return &tls.Config{RootCAs: pool}, nil
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseBenchFlags(args, stderr, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "wsbench:", err)
		return 2
	}
	tlsCfg, err := tlsConfig(o.caFile)
	if err != nil {
		fmt.Fprintln(stderr, "wsbench:", err)
		return 2
	}
	cfg := load.Config{URL: o.url, Key: o.key, Timeout: o.timeout, TLS: tlsCfg, SourceIPs: o.sourceIPs, Audio: o.audio,
		Protocol: o.protocol, Model: o.model, Turns: o.turns, VAD: o.vad, VADSilence: o.vadSilence}
	if o.voice.n > 0 {
		cfg.BufferSize = 2048 // one 20 ms delta (about 1.4 KB) per read
	}
	if o.hold > 0 {
		// Idle sessions need little buffer; small ones keep 9,000 cheap.
		cfg.BufferSize = 1024
		if lim := fdlimit.Soft(); lim > 0 && uint64(o.hold)+64 > lim {
			fmt.Fprintf(stderr, "wsbench: -hold %d needs %d open files but the limit is %d\n", o.hold, o.hold+64, lim)
			return 1
		}
	}
	client, err := load.NewClient(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "wsbench:", err)
		return 2
	}
	if !o.quiet {
		mode := fmt.Sprintf("%d calls, %d concurrent", o.n, o.c)
		if o.turns > 1 || o.vad {
			kind := "manual"
			if o.vad {
				kind = fmt.Sprintf("server-VAD (%v silence)", o.vadSilence)
			}
			mode += fmt.Sprintf(", %d %s turns each", o.turns, kind)
		}
		if o.open.length.Kind != load.LengthNone {
			mode += ", call length " + o.open.length.String() + fmt.Sprintf(" (seed %d)", o.open.seed)
		}
		switch {
		case o.hold > 0:
			mode = fmt.Sprintf("hold %d sessions for %v, opening %d at a time", o.hold, o.holdFor, o.c)
		case o.open.rate > 0:
			mode = o.open.describe(o.n)
		case o.voice.n > 0:
			mode = o.voice.describe(o.c)
		}
		fmt.Fprintf(stderr, "wsbench: %s -> %s\n", mode, o.url)
	}
	if o.hold > 0 {
		return runHold(ctx, client, o, stdout, stderr)
	}
	if o.voice.n > 0 {
		return runVoice(ctx, client, o, stdout, stderr)
	}

	var progress load.Progress
	stopProgress := startProgress(stderr, o.quiet, o.open.expected(o.n), &progress)
	opts := load.Options{N: o.n, Concurrency: o.c, Progress: &progress}
	o.open.apply(&opts)
	if o.verbose {
		var mu sync.Mutex
		opts.OnCall = func(i int, s load.Sample) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintln(stderr, callLine(i, s))
		}
	}
	res, err := load.Run(ctx, client, opts)
	stopProgress()
	if err != nil {
		fmt.Fprintln(stderr, "wsbench:", err)
		return 1
	}
	sum := res.Summary()
	doc := struct {
		Target   string        `json:"target"`
		Protocol load.Protocol `json:"protocol"`
		N        int           `json:"n"`
		C        int           `json:"c"`
		Rate     float64       `json:"rate,omitempty"`
		Length   string        `json:"call_length,omitempty"`
		Audio    bool          `json:"audio"`
		Turns    int           `json:"turns"`
		VAD      bool          `json:"vad,omitempty"`
		Summary  load.Summary  `json:"summary"`
		Samples  []load.Sample `json:"samples"`
	}{o.url, o.protocol, o.open.arrivals(o.n, sum), o.c, o.open.rate, o.open.length.String(), o.audio, o.turns, o.vad, sum, res.Samples}
	if !publish(o, stdout, stderr, report.RunMarkdown(sum), res.Samples, doc) {
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "wsbench: interrupted")
	}
	if sum.OK == 0 {
		return 1
	}
	return 0
}

func runHold(ctx context.Context, client *load.Client, o benchOptions, stdout, stderr io.Writer) int {
	var progress load.Progress
	stopProgress := startProgress(stderr, o.quiet, o.hold, &progress)
	res, err := load.Hold(ctx, client, load.HoldOptions{N: o.hold, Concurrency: o.c, HoldFor: o.holdFor, Progress: &progress})
	stopProgress()
	if err != nil {
		fmt.Fprintln(stderr, "wsbench:", err)
		return 1
	}
	doc := struct {
		Target      string         `json:"target"`
		Sessions    int            `json:"sessions"`
		HoldForS    float64        `json:"hold_for_s"`
		Established int            `json:"established"`
		Held        int            `json:"held"`
		Failed      int            `json:"failed"`
		ClosedClean int            `json:"closed_clean"`
		Lost        map[string]int `json:"lost"`
		OpenS       float64        `json:"open_s"`
		HeldS       float64        `json:"held_s"`
		CPUMS       float64        `json:"cpu_ms"`
		MemPerSess  int64          `json:"mem_per_session_bytes"`
		Opening     []load.Sample  `json:"opening"`
	}{o.url, o.hold, o.holdFor.Seconds(), res.Established, res.Held, res.Failed, res.ClosedClean, res.Lost,
		res.OpenTime.Seconds(), res.Holding.Seconds(), stats.Millis(res.CPU), res.MemPerSession, res.Opening}
	if !publish(o, stdout, stderr, report.HoldMarkdown(res), res.Opening, doc) {
		return 1
	}
	if res.Established == 0 {
		return 1
	}
	return 0
}

// publish prints a run's Markdown and its first failures and, with -json,
// writes doc there; it reports false, having said why, when it could not.
func publish(o benchOptions, stdout, stderr io.Writer, markdown string, samples []load.Sample, doc any) bool {
	fmt.Fprint(stdout, markdown)
	printFirstFailures(stderr, o.url, samples)
	if o.jsonPath == "" {
		return true
	}
	if err := writeJSON(o.jsonPath, doc); err != nil {
		fmt.Fprintln(stderr, "wsbench:", err)
		return false
	}
	return true
}

func callLine(i int, s load.Sample) string {
	if s.OK() {
		return fmt.Sprintf("call %d: ok dial %s session %s first_audio %s total %s", i,
			report.FormatMS(s.Dial), report.FormatMS(s.Session), report.FormatMS(s.FirstAudio), report.FormatMS(s.Total))
	}
	return fmt.Sprintf("call %d: %s (%s)", i, s.Failure, s.Detail)
}

func writeJSON(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	if err := json.NewEncoder(f).Encode(v); err != nil {
		f.Close()
		return fmt.Errorf("-json: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}

// startProgress draws "done/total, rate, errors" on stderr every 250 ms
// when stderr is a terminal; otherwise it does nothing. The returned
// function stops it and clears the line.
func startProgress(stderr io.Writer, quiet bool, total int, p *load.Progress) func() {
	f, ok := stderr.(*os.File)
	if quiet || !ok || !isTerminal(f) {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	begin := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-tick.C:
				n := p.Done.Load()
				fmt.Fprintf(f, "\r\033[K%d/%d  %.0f/s  %d errors", n, total, float64(n)/time.Since(begin).Seconds(), p.Failed.Load())
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
