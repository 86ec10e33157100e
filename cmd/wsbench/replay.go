package main

// wsbench replay: plays a recorded session's client side (server/recording)
// against a deployment and compares, turn by turn, what it answered with
// what the recording holds: the start of regression evals for voice agents.
//
//	wsbench replay -dir recordings [-session ID] -url ws://127.0.0.1:4000/v1/realtime?model=gpt-realtime -key $KEY [-speed 1] [-json]
//	wsbench replay -s3-endpoint http://127.0.0.1:9000 -s3-bucket recordings [-s3-prefix p/] -session ID -url ... -key ...
//
// Each client event is sent at its recorded offset from the start (divided
// by -speed), paced by the answers: one the client sent after the
// recording's n-th response.done waits for the replay's n-th, then for the
// recorded gap since it (the user answers what they heard, however long
// the new deployment took to say it). An input_audio_buffer.append gets
// its audio back from the WAV's channel 0 through the event's audio ref. A turn begins where the
// user's turn ended: the client's input_audio_buffer.commit, the
// upstream's input_audio_buffer.speech_stopped (server VAD), or a
// response.create with no commit before it since the last response; a
// commit followed by response.create is one turn. Its latency runs from
// there to the first output delta (audio, else text) of a response created
// in the turn. Transcripts: the user's is the turn's
// conversation.item.input_audio_transcription.completed (by the committed
// item's id), the assistant's the .done transcripts (audio, else text) of
// the turn's responses, else their deltas. Two transcripts differ when
// their words differ (case and punctuation aside); similarity is
// 2·LCS/(words in both), over words. Recorded turn i is compared with
// replayed turn i.
//
// It stops once it has sent every client event and seen as many
// response.done and input transcriptions as the recording has, or at the
// recording's length (divided by -speed) plus -timeout. S3 keys come from
// -s3-access-key/-s3-secret-key or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
// the gateway key from -key or WSBENCH_KEY; none is printed. Exit status:
// 0 when the replay ran (differences are the report, not a failure), 1
// when it could not, 2 for bad flags.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/gorilla/websocket"

	"rtgate/server/recording"
)

type replayOptions struct {
	dir, session, url, key, ca string
	s3                         recording.S3Config
	speed                      float64
	timeout                    time.Duration
	json                       bool
}

func parseReplayFlags(args []string, stderr io.Writer, getenv func(string) string) (replayOptions, error) {
	var o replayOptions
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dir, "dir", "", "the recordings directory (RECORDINGS_DIR)")
	fs.StringVar(&o.s3.Endpoint, "s3-endpoint", "", "the S3 endpoint, http(s)://host:port, instead of -dir")
	fs.StringVar(&o.s3.Bucket, "s3-bucket", "", "the S3 bucket")
	fs.StringVar(&o.s3.Region, "s3-region", "", "the S3 region (default us-east-1)")
	fs.StringVar(&o.s3.Prefix, "s3-prefix", "", "the key prefix of the recordings")
	fs.BoolVar(&o.s3.PathStyle, "s3-path-style", true, "path-style bucket addressing")
	fs.StringVar(&o.s3.AccessKey, "s3-access-key", "", "the S3 access key (default $AWS_ACCESS_KEY_ID)")
	fs.StringVar(&o.s3.SecretKey, "s3-secret-key", "", "the S3 secret key (default $AWS_SECRET_ACCESS_KEY)")
	fs.StringVar(&o.session, "session", "", "the session id of the recording (default: the newest)")
	fs.StringVar(&o.url, "url", "", "where to replay: ws(s)://host:port/v1/realtime?model=...")
	fs.StringVar(&o.key, "key", "", "the key sent as Authorization: Bearer (default $WSBENCH_KEY)")
	fs.StringVar(&o.ca, "ca", "", "a PEM CA to trust for wss://")
	fs.Float64Var(&o.speed, "speed", 1, "playback speed: 2 sends the client events twice as fast")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for answers past the recording's length")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("replay: unexpected argument %q", fs.Arg(0))
	}
	if o.key == "" {
		o.key = getenv("WSBENCH_KEY")
	}
	if o.s3.AccessKey == "" {
		o.s3.AccessKey = getenv("AWS_ACCESS_KEY_ID")
	}
	if o.s3.SecretKey == "" {
		o.s3.SecretKey = getenv("AWS_SECRET_ACCESS_KEY")
	}
	switch {
	case (o.dir == "") == (o.s3.Endpoint == ""):
		return o, errors.New("replay: give -dir or -s3-endpoint (one of them)")
	case o.s3.Endpoint != "" && o.s3.Bucket == "":
		return o, errors.New("replay: -s3-endpoint needs -s3-bucket")
	case !strings.HasPrefix(o.url, "ws://") && !strings.HasPrefix(o.url, "wss://"):
		return o, errors.New("replay: -url must be a ws:// or wss:// URL")
	case o.speed <= 0 || o.speed > 100:
		return o, errors.New("replay: -speed must be in (0, 100]")
	case o.timeout <= 0:
		return o, errors.New("replay: -timeout must be positive")
	}
	return o, nil
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseReplayFlags(args, stderr, os.Getenv)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "wsbench:", err)
		}
		return 2
	}
	rep, err := replayRecording(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "wsbench replay:", err)
		return 1
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "wsbench replay:", err)
			return 1
		}
		return 0
	}
	rep.write(stdout)
	return 0
}

// tev is one event of a session, recorded or replayed, for the turn analysis.
type tev struct {
	t      float64 // ms since the start
	client bool
	raw    []byte
}

func replayRecording(ctx context.Context, o replayOptions, stderr io.Writer) (*replayReport, error) {
	var store recording.Store
	if o.dir != "" {
		store = recording.DirStore(o.dir)
	} else {
		s, err := recording.NewS3Store(o.s3)
		if err != nil {
			return nil, err
		}
		store = s
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if o.session == "" {
		id, err := recording.Latest(octx, store)
		if err != nil {
			return nil, err
		}
		o.session = id
	}
	rec, err := recording.Open(octx, store, o.session)
	if err != nil {
		return nil, err
	}
	evs, err := rec.ReadEvents()
	if err != nil {
		return nil, err
	}
	if meta, err := rec.ReadMeta(); err == nil && slices.ContainsFunc(meta.Channels[0].Formats, func(f string) bool { return f != "pcm16" }) {
		fmt.Fprintf(stderr, "wsbench replay: warning: the recording's input audio was %v; the appends are sent as the WAV holds it, PCM16 24 kHz\n", meta.Channels[0].Formats)
	}
	var recorded []tev
	var length float64
	for _, e := range evs {
		length = max(length, e.TMs)
		if e.Raw != nil {
			recorded = append(recorded, tev{t: e.TMs, client: e.From == "client", raw: e.Raw})
		}
	}
	replayed, sent, err := play(ctx, o, rec, evs, length)
	if err != nil {
		return nil, err
	}
	rep := compareTurns(turnsOf(recorded), turnsOf(replayed))
	rep.Session, rep.URL, rep.Speed, rep.ClientEvents, rep.RecordedMs = o.session, o.url, o.speed, sent, length
	return rep, nil
}

// play sends the recording's client events to o.url on their schedule and
// returns the new session's events, both ways.
func play(ctx context.Context, o replayOptions, rec *recording.Recording, evs []recording.Event, length float64) ([]tev, int, error) {
	tlsCfg, err := tlsConfig(o.ca)
	if err != nil {
		return nil, 0, err
	}
	d := websocket.Dialer{HandshakeTimeout: 15 * time.Second, TLSClientConfig: tlsCfg}
	hdr := http.Header{}
	if o.key != "" {
		hdr.Set("Authorization", "Bearer "+o.key)
	}
	conn, resp, err := d.DialContext(ctx, o.url, hdr)
	if err != nil {
		if resp != nil {
			return nil, 0, fmt.Errorf("dial: %w (HTTP %d)", err, resp.StatusCode)
		}
		return nil, 0, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	start := time.Now()
	since := func() float64 { return float64(time.Since(start)) / float64(time.Millisecond) }

	var want struct{ done, transcripts int }
	for _, e := range evs {
		switch e.Type() {
		case "response.done":
			want.done++
		case "conversation.item.input_audio_transcription.completed":
			want.transcripts++
		}
	}
	var (
		mu                sync.Mutex
		got               []tev
		done, transcripts int
		lastDone          time.Time // when the replay's latest response.done came
	)
	progress := make(chan struct{}, 1)
	readErr := make(chan error, 1)
	go func() {
		for {
			_, p, err := conn.ReadMessage()
			if err != nil {
				readErr <- err
				return
			}
			e := tev{t: since(), raw: p}
			mu.Lock()
			got = append(got, e)
			switch typeOf(p) {
			case "response.done":
				done++
				lastDone = time.Now()
			case "conversation.item.input_audio_transcription.completed":
				transcripts++
			}
			mu.Unlock()
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}()

	deadline := start.Add(time.Duration(length/o.speed*float64(time.Millisecond)) + o.timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := 0
	recordedDone, recordedDoneAt := 0, 0.0 // the recording's response.done so far, and the latest's time
	for _, e := range evs {
		if e.From != "client" {
			if e.Type() == "response.done" {
				recordedDone, recordedDoneAt = recordedDone+1, e.TMs
			}
			continue
		}
		// Paced by the answers: the replay's as many response.done as
		// the recording had by now, then the recorded gap since.
		for {
			mu.Lock()
			caught, at := done >= recordedDone, lastDone
			mu.Unlock()
			if caught {
				due := start.Add(time.Duration(e.TMs / o.speed * float64(time.Millisecond)))
				if recordedDone > 0 {
					due = latest(due, at.Add(time.Duration((e.TMs-recordedDoneAt)/o.speed*float64(time.Millisecond))))
				}
				if err := waitUntil(dctx, due, readErr); err != nil {
					return nil, sent, fmt.Errorf("replay stopped after %d client events: %w", sent, err)
				}
				break
			}
			select {
			case <-progress:
			case <-dctx.Done():
				return nil, sent, fmt.Errorf("replay stopped after %d client events waiting for answer %d: %w", sent, recordedDone, dctx.Err())
			case err := <-readErr:
				return nil, sent, fmt.Errorf("the connection ended after %d client events: %w", sent, err)
			}
		}
		msg, err := rebuild(rec, e)
		if err != nil {
			return nil, sent, err
		}
		// Stamped before the write: an answer can arrive before the
		// write returns, and must not sort before what it answers.
		if e.Raw != nil {
			mu.Lock()
			got = append(got, tev{t: since(), client: true, raw: e.Raw})
			mu.Unlock()
		}
		_ = conn.SetWriteDeadline(time.Now().Add(15 * time.Second))
		if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
			return nil, sent, fmt.Errorf("sending client event %d: %w", sent+1, err)
		}
		sent++
	}
	// Wait for the answers the recording had.
wait:
	for {
		mu.Lock()
		enough := done >= want.done && transcripts >= want.transcripts
		mu.Unlock()
		if enough {
			break
		}
		select {
		case <-progress:
		case <-readErr:
			break wait
		case <-dctx.Done():
			break wait
		}
	}
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "replay done"), time.Now().Add(time.Second))
	conn.Close()
	mu.Lock()
	defer mu.Unlock()
	out := slices.Clone(got)
	slices.SortStableFunc(out, func(a, b tev) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		}
		return 0
	})
	return out, sent, nil
}

// waitUntil waits for due, unless ctx ends or the connection does first.
func waitUntil(ctx context.Context, due time.Time, readErr <-chan error) error {
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case err := <-readErr:
		return fmt.Errorf("the connection ended: %w", err)
	}
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rebuild is the client event as it was sent: an append gets its audio back
// from the WAV.
func rebuild(rec *recording.Recording, e recording.Event) ([]byte, error) {
	if e.Raw == nil {
		return []byte(e.Text), nil
	}
	if e.Audio == nil || e.Audio.NotRecorded != "" {
		return e.Raw, nil
	}
	pcm, err := rec.Samples(e.Audio.Channel, e.Audio.Offset, e.Audio.Samples-e.Audio.Cut)
	if err != nil {
		return nil, err
	}
	raw := []byte(strings.TrimSpace(string(e.Raw)))
	if len(raw) < 2 || raw[0] != '{' {
		return nil, fmt.Errorf("client event at %.3f ms is not an object", e.TMs)
	}
	msg := make([]byte, 0, len(raw)+base64.StdEncoding.EncodedLen(len(pcm))+16)
	msg = append(msg, `{"audio":"`...)
	msg = base64.StdEncoding.AppendEncode(msg, pcm)
	msg = append(msg, '"')
	if rest := strings.TrimSpace(string(raw[1:])); rest != "}" {
		msg = append(msg, ',')
	}
	return append(msg, raw[1:]...), nil
}

func typeOf(p []byte) string {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(p, &t)
	return t.Type
}

// turn is one user turn and what answered it.
type turn struct {
	Kind       string   `json:"kind"`     // commit, server_vad or response.create
	StartMs    float64  `json:"start_ms"` // since the session's start
	LatencyMs  *float64 `json:"latency_ms"`
	User       string   `json:"user_transcript"`
	Assistant  string   `json:"assistant_transcript"`
	itemID     string
	responded  bool
	respDone   map[string]string
	respDeltas map[string]*strings.Builder
	respOrder  []string
}

// turnsOf finds the user turns of one session's events.
func turnsOf(evs []tev) []*turn {
	var turns []*turn
	var cur *turn
	byItem := map[string]*turn{}
	byResp := map[string]*turn{}
	open := func(kind string, t float64) {
		if cur != nil && !cur.responded {
			return // the same turn: commit then response.create
		}
		cur = &turn{Kind: kind, StartMs: t, respDone: map[string]string{}, respDeltas: map[string]*strings.Builder{}}
		turns = append(turns, cur)
	}
	for _, e := range evs {
		var ev struct {
			Type       string `json:"type"`
			ItemID     string `json:"item_id"`
			ResponseID string `json:"response_id"`
			Transcript string `json:"transcript"`
			Text       string `json:"text"`
			Delta      string `json:"delta"`
			Response   struct {
				ID string `json:"id"`
			} `json:"response"`
		}
		if json.Unmarshal(e.raw, &ev) != nil {
			continue
		}
		if e.client {
			switch ev.Type {
			case "input_audio_buffer.commit":
				open("commit", e.t)
			case "response.create":
				open("response.create", e.t)
			}
			continue
		}
		switch ev.Type {
		case "input_audio_buffer.speech_stopped":
			open("server_vad", e.t)
		case "input_audio_buffer.committed":
			if cur != nil && cur.itemID == "" && ev.ItemID != "" {
				cur.itemID = ev.ItemID
				byItem[ev.ItemID] = cur
			}
		case "response.created":
			if cur != nil {
				cur.responded = true
				byResp[ev.Response.ID] = cur
				cur.respOrder = append(cur.respOrder, ev.Response.ID)
			}
		case "response.output_audio.delta", "response.audio.delta", "response.output_text.delta", "response.text.delta":
			if t := byResp[ev.ResponseID]; t != nil && t.LatencyMs == nil {
				l := e.t - t.StartMs
				t.LatencyMs = &l
			}
			if t := byResp[ev.ResponseID]; t != nil && (ev.Type == "response.output_text.delta" || ev.Type == "response.text.delta") {
				t.delta(ev.ResponseID, ev.Delta)
			}
		case "response.output_audio_transcript.delta", "response.audio_transcript.delta":
			if t := byResp[ev.ResponseID]; t != nil {
				t.delta(ev.ResponseID, ev.Delta)
			}
		case "response.output_audio_transcript.done", "response.audio_transcript.done":
			if t := byResp[ev.ResponseID]; t != nil {
				t.respDone[ev.ResponseID] = ev.Transcript
			}
		case "response.output_text.done", "response.text.done":
			if t := byResp[ev.ResponseID]; t != nil {
				if _, ok := t.respDone[ev.ResponseID]; !ok {
					t.respDone[ev.ResponseID] = ev.Text
				}
			}
		case "conversation.item.input_audio_transcription.completed":
			if t := byItem[ev.ItemID]; t != nil {
				t.User = ev.Transcript
			}
		}
	}
	for _, t := range turns {
		var parts []string
		for _, id := range t.respOrder {
			if s, ok := t.respDone[id]; ok {
				parts = append(parts, s)
			} else if b := t.respDeltas[id]; b != nil {
				parts = append(parts, b.String())
			}
		}
		t.Assistant = strings.Join(parts, " ")
	}
	return turns
}

func (t *turn) delta(resp, s string) {
	b := t.respDeltas[resp]
	if b == nil {
		b = &strings.Builder{}
		t.respDeltas[resp] = b
	}
	b.WriteString(s)
}

// replayReport is what wsbench replay prints.
type replayReport struct {
	Session      string        `json:"session"`
	URL          string        `json:"url"`
	Speed        float64       `json:"speed"`
	ClientEvents int           `json:"client_events_sent"`
	RecordedMs   float64       `json:"recording_ms"`
	Turns        []turnCompare `json:"turns"`
	Summary      replaySummary `json:"summary"`
}

type turnCompare struct {
	Turn      int         `json:"turn"`
	Recorded  *turn       `json:"recorded"`
	Replayed  *turn       `json:"replayed"`
	User      *textChange `json:"user,omitempty"`
	Assistant *textChange `json:"assistant,omitempty"`
}

type textChange struct {
	Differs    bool    `json:"differs"`
	Similarity float64 `json:"similarity"` // 2·LCS / (words in both), over words
	Diff       string  `json:"diff,omitempty"`
}

type replaySummary struct {
	RecordedTurns       int      `json:"recorded_turns"`
	ReplayedTurns       int      `json:"replayed_turns"`
	Compared            int      `json:"turns_compared"`
	RecordedP50         *float64 `json:"recorded_latency_p50_ms"`
	RecordedP95         *float64 `json:"recorded_latency_p95_ms"`
	ReplayedP50         *float64 `json:"replayed_latency_p50_ms"`
	ReplayedP95         *float64 `json:"replayed_latency_p95_ms"`
	UserDiffering       int      `json:"user_transcripts_differing"`
	AssistantDiffering  int      `json:"assistant_transcripts_differing"`
	MissingReplayedTurn int      `json:"turns_missing_in_replay,omitempty"`
}

func compareTurns(rec, rep []*turn) *replayReport {
	r := &replayReport{}
	n := max(len(rec), len(rep))
	var recLat, repLat []float64
	for i := range n {
		tc := turnCompare{Turn: i + 1}
		if i < len(rec) {
			tc.Recorded = rec[i]
			if rec[i].LatencyMs != nil {
				recLat = append(recLat, *rec[i].LatencyMs)
			}
		}
		if i < len(rep) {
			tc.Replayed = rep[i]
			if rep[i].LatencyMs != nil {
				repLat = append(repLat, *rep[i].LatencyMs)
			}
		}
		if tc.Recorded != nil && tc.Replayed != nil {
			r.Summary.Compared++
			tc.User = compareText(tc.Recorded.User, tc.Replayed.User)
			tc.Assistant = compareText(tc.Recorded.Assistant, tc.Replayed.Assistant)
			if tc.User.Differs {
				r.Summary.UserDiffering++
			}
			if tc.Assistant.Differs {
				r.Summary.AssistantDiffering++
			}
		}
		r.Turns = append(r.Turns, tc)
	}
	r.Summary.RecordedTurns, r.Summary.ReplayedTurns = len(rec), len(rep)
	r.Summary.MissingReplayedTurn = max(0, len(rec)-len(rep))
	r.Summary.RecordedP50, r.Summary.RecordedP95 = percentile(recLat, 50), percentile(recLat, 95)
	r.Summary.ReplayedP50, r.Summary.ReplayedP95 = percentile(repLat, 50), percentile(repLat, 95)
	return r
}

// percentile is the nearest-rank percentile, nil for no values.
func percentile(v []float64, p int) *float64 {
	if len(v) == 0 {
		return nil
	}
	s := slices.Sorted(slices.Values(v))
	i := (p*len(s)+99)/100 - 1
	x := s[min(max(i, 0), len(s)-1)]
	return &x
}

// words normalizes a transcript for comparison: lower case, punctuation
// dropped (apostrophes kept), at most 5,000 words.
func words(s string) []string {
	f := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
	})
	return f[:min(len(f), 5000)]
}

// compareText compares two transcripts word by word.
func compareText(a, b string) *textChange {
	wa, wb := words(a), words(b)
	if slices.Equal(wa, wb) {
		return &textChange{Similarity: 1}
	}
	// LCS table, then a walk that writes the diff: [-gone-] {+new+}.
	l := make([][]int, len(wa)+1)
	for i := range l {
		l[i] = make([]int, len(wb)+1)
	}
	for i := len(wa) - 1; i >= 0; i-- {
		for j := len(wb) - 1; j >= 0; j-- {
			if wa[i] == wb[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var out []string
	var del, ins []string
	flush := func() {
		if len(del) > 0 {
			out = append(out, "[-"+strings.Join(del, " ")+"-]")
		}
		if len(ins) > 0 {
			out = append(out, "{+"+strings.Join(ins, " ")+"+}")
		}
		del, ins = nil, nil
	}
	i, j := 0, 0
	for i < len(wa) || j < len(wb) {
		switch {
		case i < len(wa) && j < len(wb) && wa[i] == wb[j]:
			flush()
			out = append(out, wa[i])
			i, j = i+1, j+1
		case j < len(wb) && (i == len(wa) || l[i][j+1] >= l[i+1][j]):
			ins = append(ins, wb[j])
			j++
		default:
			del = append(del, wa[i])
			i++
		}
	}
	flush()
	sim := 2 * float64(l[0][0]) / float64(len(wa)+len(wb))
	return &textChange{Differs: true, Similarity: sim, Diff: strings.Join(out, " ")}
}

func (r *replayReport) write(w io.Writer) {
	fmt.Fprintf(w, "## wsbench replay: session %s\n\n", r.Session)
	fmt.Fprintf(w, "%d client events replayed at speed %g (recording %.1f s) against %s\n\n", r.ClientEvents, r.Speed, r.RecordedMs/1000, r.URL)
	fmt.Fprintln(w, "| turn | kind | recorded latency | replayed latency | user transcript | assistant transcript |")
	fmt.Fprintln(w, "| ---: | --- | ---: | ---: | --- | --- |")
	for _, tc := range r.Turns {
		kind := ""
		if tc.Recorded != nil {
			kind = tc.Recorded.Kind
		} else if tc.Replayed != nil {
			kind = tc.Replayed.Kind
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s |\n", tc.Turn, kind, latency(tc.Recorded), latency(tc.Replayed),
			change(tc.User, tc.Recorded, tc.Replayed, func(t *turn) string { return t.User }),
			change(tc.Assistant, tc.Recorded, tc.Replayed, func(t *turn) string { return t.Assistant }))
	}
	s := r.Summary
	fmt.Fprintf(w, "\nturns compared: %d (recorded %d, replayed %d)\n", s.Compared, s.RecordedTurns, s.ReplayedTurns)
	fmt.Fprintf(w, "latency p50 / p95: recorded %s / %s, replayed %s / %s\n", ms(s.RecordedP50), ms(s.RecordedP95), ms(s.ReplayedP50), ms(s.ReplayedP95))
	fmt.Fprintf(w, "transcripts differing: user %d, assistant %d\n", s.UserDiffering, s.AssistantDiffering)
}

func latency(t *turn) string {
	if t == nil {
		return "(no turn)"
	}
	return ms(t.LatencyMs)
}

func ms(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", *v)
}

func change(c *textChange, rec, rep *turn, get func(*turn) string) string {
	cell := func(s string) string { return strings.ReplaceAll(fmt.Sprintf("%q", s), "|", `\|`) }
	switch {
	case rec == nil:
		return "replayed only: " + cell(get(rep))
	case rep == nil:
		return "recorded only: " + cell(get(rec))
	case !c.Differs:
		return "same: " + cell(get(rec))
	}
	return fmt.Sprintf("differs (%.2f): %s", c.Similarity, cell(c.Diff))
}
