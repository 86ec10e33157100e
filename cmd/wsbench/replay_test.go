package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/recording"
	"rtgate/server/recording/s3test"
)

// recordSession runs a two-turn voice session against srv as a client
// would (transcription on, appends, commit, response.create), feeding
// every event both ways to a recorder, and returns the recording and how
// many audio bytes it appended.
func recordSession(t *testing.T, srv *mockai.Server, id string) (*recording.Recording, int) {
	t.Helper()
	conn, _, err := websocket.DefaultDialer.Dial(srv.BaseURL()+"/realtime?model=gpt-realtime", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	rec := recording.NewRecorder(id, start, recording.Limits{})
	events := make(chan string, 256)
	go func() {
		defer close(events)
		for {
			_, p, err := conn.ReadMessage()
			if err != nil {
				return
			}
			rec.Upstream(time.Now(), p)
			events <- typeOf(p)
		}
	}()
	waitType := func(typ string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case got, ok := <-events:
				if !ok {
					t.Fatalf("connection closed waiting for %s", typ)
				}
				if got == typ {
					return
				}
			case <-timeout:
				t.Fatalf("no %s within 10s", typ)
			}
		}
	}
	send := func(ev string) {
		t.Helper()
		rec.Client(time.Now(), []byte(ev))
		if err := conn.WriteMessage(websocket.TextMessage, []byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	waitType("session.created")
	send(`{"type":"session.update","session":{"type":"realtime","audio":{"input":{"transcription":{"model":"gpt-4o-transcribe"}}}}}`)
	waitType("session.updated")
	appended := 0
	for turn := range 2 {
		for i := range 10 { // 200 ms of speech, in real time
			chunk := mockai.PCMPattern(960)
			chunk[0] = byte(turn*10 + i) // each append its own bytes
			appended += len(chunk)
			send(fmt.Sprintf(`{"type":"input_audio_buffer.append","event_id":"a%d_%d","audio":%q}`, turn, i, base64.StdEncoding.EncodeToString(chunk)))
			time.Sleep(20 * time.Millisecond)
		}
		send(`{"type":"input_audio_buffer.commit"}`)
		send(`{"type":"response.create"}`)
		waitType("response.done")
	}
	time.Sleep(50 * time.Millisecond)
	return rec.Finish(time.Now()), appended
}

// TestReplay: a session recorded against one mockai, replayed by
// `wsbench replay` against another that says something else in its first
// answer: the report shows both turns with their latencies, the user's
// transcripts the same, the first answer's difference, and the second
// answer the same; the replayed appends carry exactly the recorded audio.
// The recording is read from a directory and from the S3 server.
func TestReplay(t *testing.T) {
	s3 := s3test.Start(t)
	cfg := mockai.Config{AudioDeltas: 3, AudioDeltaInterval: 5 * time.Millisecond, FirstAudioDelay: 30 * time.Millisecond,
		InputTranscripts: []string{"Book a flight to Paris.", "Thanks."}}
	recordedCfg, replayCfg := cfg, cfg
	recordedCfg.OutputTranscripts = []string{"Your flight to Paris is booked.", "You're welcome."}
	replayCfg.OutputTranscripts = []string{"Your flight to Rome is booked.", "You're welcome."}
	original, err := mockai.Start(recordedCfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer original.Close()
	rec, appended := recordSession(t, original, "sess_replay")

	for _, tc := range []struct {
		name  string
		store func(t *testing.T) (recording.Store, []string)
	}{
		{"dir", func(t *testing.T) (recording.Store, []string) {
			dir := t.TempDir()
			return recording.DirStore(dir), []string{"-dir", dir}
		}},
		{"s3", func(t *testing.T) (recording.Store, []string) {
			st, err := recording.NewS3Store(recording.S3Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: s3.Region,
				AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Prefix: "evals/", PathStyle: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
			t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
			return st, []string{"-s3-endpoint", s3.Endpoint, "-s3-bucket", s3.Bucket, "-s3-prefix", "evals/"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, flags := tc.store(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := recording.Write(ctx, store, rec); err != nil {
				t.Fatal(err)
			}
			target, err := mockai.Start(replayCfg, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer target.Close()
			var stdout, stderr bytes.Buffer
			args := append([]string{"replay"}, flags...)
			args = append(args, "-url", target.BaseURL()+"/realtime?model=gpt-realtime", "-key", "sk-replay", "-json")
			if code := run(ctx, args, &stdout, &stderr); code != 0 {
				t.Fatalf("wsbench replay exited %d: %s", code, stderr.String())
			}
			var rep replayReport
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("report: %v\n%s", err, stdout.String())
			}
			if rep.Session != "sess_replay" {
				t.Errorf("replayed session %q (the only one in the store)", rep.Session)
			}
			if got := target.Stats().AudioBytes; got != int64(appended) {
				t.Errorf("the replay appended %d audio bytes, the recording %d", got, appended)
			}
			s := rep.Summary
			if s.Compared != 2 || s.RecordedTurns != 2 || s.ReplayedTurns != 2 {
				t.Fatalf("turns: %+v\n%s", s, stdout.String())
			}
			if s.UserDiffering != 0 || s.AssistantDiffering != 1 {
				t.Errorf("differing: user %d, assistant %d; want 0, 1\n%s", s.UserDiffering, s.AssistantDiffering, stdout.String())
			}
			if s.RecordedP50 == nil || s.ReplayedP50 == nil || *s.ReplayedP50 < 30 || *s.RecordedP50 < 30 {
				t.Errorf("latency p50 recorded %v, replayed %v; want both at least the 30 ms first-audio delay", s.RecordedP50, s.ReplayedP50)
			}
			first := rep.Turns[0]
			if first.Recorded.Kind != "commit" || first.Recorded.User != "Book a flight to Paris." || first.Replayed.User != "Book a flight to Paris." {
				t.Errorf("turn 1: %+v / %+v", first.Recorded, first.Replayed)
			}
			if !first.Assistant.Differs || first.Assistant.Diff != "your flight to [-paris-] {+rome+} is booked" || first.Assistant.Similarity >= 1 {
				t.Errorf("turn 1's answer: %+v", first.Assistant)
			}
			if rep.Turns[1].Assistant.Differs || rep.Turns[1].Replayed.Assistant != "You're welcome." {
				t.Errorf("turn 2's answer: %+v, replayed %q", rep.Turns[1].Assistant, rep.Turns[1].Replayed.Assistant)
			}

			t.Logf("report:\n%s", stdout.String())

			// The Markdown report says the same.
			stdout.Reset()
			if code := run(ctx, args[:len(args)-1], &stdout, &stderr); code != 0 {
				t.Fatalf("wsbench replay exited %d: %s", code, stderr.String())
			}
			t.Logf("%s", stdout.String())
			for _, want := range []string{"turns compared: 2", "transcripts differing: user 0, assistant 1", "[-paris-] {+rome+}"} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("the report lacks %q:\n%s", want, stdout.String())
				}
			}
			if strings.Contains(stdout.String()+stderr.String(), "sk-replay") {
				t.Error("the key was printed")
			}
		})
	}
}

func TestParseReplayFlags(t *testing.T) {
	env := func(string) string { return "" }
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"dir", []string{"-dir", "d", "-url", "ws://127.0.0.1:1/v1/realtime"}, ""},
		{"s3", []string{"-s3-endpoint", "http://127.0.0.1:9", "-s3-bucket", "b", "-url", "wss://h/v1/realtime"}, ""},
		{"no store", []string{"-url", "ws://h/"}, "give -dir or -s3-endpoint"},
		{"both stores", []string{"-dir", "d", "-s3-endpoint", "http://h", "-s3-bucket", "b", "-url", "ws://h/"}, "give -dir or -s3-endpoint"},
		{"no bucket", []string{"-s3-endpoint", "http://h", "-url", "ws://h/"}, "needs -s3-bucket"},
		{"http url", []string{"-dir", "d", "-url", "http://h/"}, "ws:// or wss://"},
		{"speed", []string{"-dir", "d", "-url", "ws://h/", "-speed", "0"}, "-speed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseReplayFlags(tc.args, &bytes.Buffer{}, env)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("err = %v, want %q", err, tc.err)
			}
		})
	}
}
