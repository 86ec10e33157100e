package server

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/recording"
	"rtgate/server/recording/s3test"
)

// TestRecordingToS3AndReplay: a session on a deployment that records
// (record_sessions) is stored in an S3-compatible bucket (s3rver, a real
// server, as a process) when it ends: a two-channel WAV whose first channel
// is exactly the audio the client appended and whose second holds the
// assistant's, and every event both ways. `wsbench replay` plays its client
// side back through the gateway to another model group (the evaluation of
// a new deployment), whose upstream says something else, and reports the
// turns compared and the assistant's words that changed. A key that says
// record_sessions: false is never recorded. ws and wss.
func TestRecordingToS3AndReplay(t *testing.T) {
	s3 := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	t.Setenv("TEAM_QUIET_KEY", "sk-quiet-0123456789")
	wsbench := buildTool(t, "wsbench")
	for _, secure := range []bool{false, true} {
		name := map[bool]string{false: "ws", true: "wss"}[secure]
		t.Run(name, func(t *testing.T) { recordAndReplay(t, secure, s3, wsbench) })
	}
}

func recordAndReplay(t *testing.T, secure bool, s3 *s3test.Server, wsbench string) {
	mock := startMock(t, mockai.Config{TLS: secure, AudioDeltas: 3, OutputTranscripts: []string{"Your flight to Paris is booked."},
		InputTranscripts: []string{"book me a flight"}})
	next := startMock(t, mockai.Config{TLS: secure, AudioDeltas: 3, OutputTranscripts: []string{"Your flight to Rome is booked."},
		InputTranscripts: []string{"book me a flight"}})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(mock.CertPEM())
	roots.AppendCertsFromPEM(next.CertPEM())
	prefix := strings.ReplaceAll(t.Name(), "/", "-") + "/"
	path := writeConfig(t, `model_list:`+openaiEntry("gpt-realtime", mock, "record_sessions: true")+
		openaiEntry("gpt-realtime-next", next)+`
keys:
  - name: quiet
    key: os.environ/TEAM_QUIET_KEY
    record_sessions: false`+configTail)
	g := startGateway(t, nil, func(c *Settings) {
		if secure {
			c.UpstreamRoots = roots
		}
		c.RoutesFile, c.Continuity = path, false
		c.Recordings, c.RecordingsS3Endpoint = "s3://"+s3.Bucket+"/"+prefix, s3.Endpoint
	})
	store, err := recording.NewS3Store(recording.S3Config{Endpoint: s3.Endpoint, Region: s3.Region, Bucket: s3.Bucket,
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Prefix: prefix, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	// 200 ms of a recognisable pattern, twice.
	pcm := make([]byte, 9600)
	for i := 0; i < len(pcm); i += 2 {
		binary.LittleEndian.PutUint16(pcm[i:], uint16(int16(i%977-488)*40))
	}
	talk := func(key string) {
		// One frame per message, as SDKs send them (gorilla's default
		// buffer would fragment an append, and the gateway reads only
		// whole frames' events).
		d := dialer()
		d.WriteBufferSize = 64 << 10
		c := dialWith(t, d, g.url("model=gpt-realtime"), bearer(key))
		read(t, c)
		send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
			"audio": map[string]any{"input": map[string]any{"transcription": map[string]any{"model": "gpt-4o-transcribe"}}}}})
		eventsUntil(t, c, "session.updated")
		for range 2 {
			// type first, as clients write it: the gateway reads an
			// event's type from its first 256 bytes (a Go map puts
			// "audio" first).
			if err := c.WriteMessage(websocket.TextMessage,
				[]byte(`{"type":"input_audio_buffer.append","audio":"`+base64.StdEncoding.EncodeToString(pcm)+`"}`)); err != nil {
				t.Fatal(err)
			}
			send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
			send(t, c, map[string]any{"type": "response.create"})
			eventsUntil(t, c, "response.done")
		}
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
		closeOf(t, c)
	}
	talk("sk-quiet-0123456789")
	talk(testMasterKey)

	var objects []recording.Object
	waitFor(t, "the recording in the bucket", func() bool {
		objects, _ = store.List(context.Background(), "")
		return len(objects) == 3
	})
	id, err := recording.Latest(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := recording.Open(context.Background(), store, id)
	if err != nil {
		t.Fatal(err)
	}
	wav, err := recording.ParseWAV(rec.WAV)
	if err != nil || wav.Channels != 2 || wav.Rate != recording.SampleRate {
		t.Fatalf("the WAV: %+v, %v", wav, err)
	}
	events, err := rec.ReadEvents()
	if err != nil {
		t.Fatal(err)
	}
	var appends, deltas, clientEvents, upstreamEvents int
	for _, e := range events {
		if e.From == "client" {
			clientEvents++
		} else {
			upstreamEvents++
		}
		switch e.Type() {
		case "input_audio_buffer.append":
			got, err := rec.Samples(0, e.Audio.Offset, e.Audio.Samples)
			if err != nil || !bytes.Equal(got, pcm) {
				t.Fatalf("append %d: the WAV's first channel does not hold what the client sent (%v)", appends, err)
			}
			appends++
		case "response.output_audio.delta":
			if e.Audio == nil || e.Audio.Channel != 1 || e.Audio.Samples == 0 {
				t.Fatalf("an output delta without its audio on channel 1: %+v", e.Audio)
			}
			deltas++
		}
	}
	if appends != 2 || deltas != 6 || clientEvents < 7 || upstreamEvents < 10 {
		t.Fatalf("recorded %d appends, %d output deltas, %d client and %d upstream events", appends, deltas, clientEvents, upstreamEvents)
	}

	// The next model books Rome: the replay says which words changed.
	out, err := exec.Command(wsbench, "replay", "-json", "-speed", "4", "-s3-endpoint", s3.Endpoint, "-s3-bucket", s3.Bucket,
		"-s3-prefix", prefix, "-s3-region", s3.Region, "-session", id,
		"-url", g.url("model=gpt-realtime-next"), "-key", testMasterKey).Output()
	if err != nil {
		t.Fatalf("wsbench replay: %v\n%s", err, out)
	}
	var report struct {
		Turns   []json.RawMessage `json:"turns"`
		Summary struct {
			RecordedTurns     int `json:"recorded_turns"`
			ReplayedTurns     int `json:"replayed_turns"`
			AssistantDiffers  int `json:"assistant_differs"`
			TranscriptsDiffer int `json:"transcripts_differ"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("the replay's report %q: %v", out, err)
	}
	if report.Summary.RecordedTurns != 2 || report.Summary.ReplayedTurns != 2 || !strings.Contains(string(out), "rome") {
		t.Fatalf("the replay's report: %s", out)
	}
}
