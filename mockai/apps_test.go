package mockai_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"

	"rtgate/mockai"
)

const offer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n" +
	"m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:1\r\n"

// TestCalls: an SDP offer gets 201, an SDP answer with the offer's mids and
// a Location; bad keys and offers are refused; the call is recorded.
func TestCalls(t *testing.T) {
	srv := start(t, mockai.Config{Key: "sk-up"})
	base := "http://" + srv.Addr() + "/v1/realtime/calls"
	for _, tc := range []struct {
		name, key, ctype, body string
		status                 int
	}{
		{"answered", "sk-up", "application/sdp", offer, 201},
		{"bad key", "sk-wrong", "application/sdp", offer, 401},
		{"not sdp", "sk-up", "application/sdp", "hello", 400},
		{"json", "sk-up", "application/json", "{}", 415},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, base, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+tc.key)
			req.Header.Set("Content-Type", tc.ctype)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.status != 201 {
				return
			}
			ans := string(b)
			if !strings.HasPrefix(ans, "v=0\r\n") || !strings.Contains(ans, "a=mid:0") || !strings.Contains(ans, "a=mid:1") ||
				!strings.Contains(ans, "m=application") || !strings.HasPrefix(resp.Header.Get("Location"), "/v1/realtime/calls/rtc_") {
				t.Fatalf("answer %q, Location %q", ans, resp.Header.Get("Location"))
			}
			calls := srv.Calls()
			if len(calls) != 1 || calls[0].Offer != offer || "/v1/realtime/calls/"+calls[0].ID != resp.Header.Get("Location") {
				t.Fatalf("calls recorded: %+v", calls)
			}
		})
	}
}

// TestTranscriptionSession: ?intent=transcription answers a commit with a
// completed transcription carrying token usage; the events are recorded.
func TestTranscriptionSession(t *testing.T) {
	srv := start(t, mockai.Config{})
	c, _, err := dial(t, "ws://"+srv.Addr()+"/v1/realtime?intent=transcription", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, c, "session.created")
	send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, 48000))})
	send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
	expect(t, c, "input_audio_buffer.committed")
	e := expect(t, c, "conversation.item.input_audio_transcription.completed")
	if e.num("usage.input_token_details.audio_tokens") != 100 || e.str("transcript") == "" {
		t.Fatalf("usage %v", e.get("usage"))
	}
	evs := srv.Events()
	if len(evs) != 1 || evs[0].Type != "input_audio_buffer.commit" || evs[0].Intent != "transcription" {
		t.Fatalf("events recorded: %+v (audio appends are not)", evs)
	}
}

// TestRejectedSessionUpdate: RejectInstructions gets an error and no update.
func TestRejectedSessionUpdate(t *testing.T) {
	srv := start(t, mockai.Config{})
	c, _ := connect(t, srv, nil)
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": mockai.RejectInstructions}})
	if e := expect(t, c, "error"); e.str("error.code") != "invalid_value" {
		t.Fatalf("error %v", e)
	}
}
