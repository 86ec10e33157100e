package usage

import (
	"fmt"
	"testing"
)

// flightsOf is Flights with counters the test moves by hand.
func flightsOf(relayed, client *uint64) *Flights {
	return &Flights{
		Relayed:    func() uint64 { return *relayed },
		FromClient: func() uint64 { return *client },
		Cancel:     func(id string) []byte { return []byte("cancel " + id + ";") },
	}
}

func created(id string) []byte {
	return []byte(`{"type":"response.created","response":{"id":"` + id + `"}}`)
}

func done(id string, inText, inAudio, outText, outAudio int64) []byte {
	return fmt.Appendf(nil, `{"type":"response.done","response":{"id":%q,"usage":{"input_tokens":%d,"output_tokens":%d,`+
		`"input_token_details":{"text_tokens":%d,"audio_tokens":%d},"output_token_details":{"text_tokens":%d,"audio_tokens":%d}}}}`,
		id, inText+inAudio, outText+outAudio, inText, inAudio, outText, outAudio)
}

// TestFlightsEstimate follows the rule of Flights.Estimate: a confirmed response
// measures the output rate (200 tokens over 2 s of relayed audio: 100 a
// second); the response left in flight after 1 s of audio more is
// estimated 100 output audio tokens, and its input is the last response's
// input and output plus the client's half second since (5 tokens at 10 a
// second).
func TestFlightsEstimate(t *testing.T) {
	var relayed, client uint64
	f := flightsOf(&relayed, &client)
	if f.Farewell() != nil {
		t.Fatal("a farewell with nothing in flight")
	}
	f.Inspect(created("r1"))
	relayed += 2 * AudioBytesPerSecond
	client += 1000
	f.Inspect(done("r1", 10, 50, 5, 200))
	f.Inspect(created("r2"))
	relayed += AudioBytesPerSecond
	client += AudioBytesPerSecond / 2
	if got := string(f.Farewell()); got != "cancel r2;" {
		t.Fatalf("farewell %q, want one cancel for r2", got)
	}
	est := f.Estimate()
	if est.Responses != 1 || est.OutputTokenDetails.AudioTokens != 100 {
		t.Errorf("estimated output %+v, want 1 response of 100 audio tokens", est)
	}
	in := est.InputTokenDetails
	if in.TextTokens != 10+5 || in.AudioTokens != 50+200+5 || est.InputTokens != 15+255 {
		t.Errorf("estimated input %+v (%d), want 15 text and 255 audio", in, est.InputTokens)
	}
	if f.Estimate().Responses != 0 {
		t.Error("an estimate is billed twice")
	}
}

// TestFlightsSettle: once the farewell went, the last cancelled
// response.done settles the session, once; before any confirmed response
// the output rate is the default.
func TestFlightsSettle(t *testing.T) {
	var relayed, client uint64
	f := flightsOf(&relayed, &client)
	settled := 0
	f.OnSettled = func() { settled++ }
	f.Inspect(created("a"))
	f.Inspect(created("b"))
	relayed += AudioBytesPerSecond
	if got := string(f.Farewell()); got != "cancel a;cancel b;" {
		t.Fatalf("farewell %q", got)
	}
	f.Inspect(done("a", 1, 0, 3, 0)) // text only: no audio rate measured
	if settled != 0 {
		t.Fatal("settled with b still in flight")
	}
	if est := f.Estimate(); est.OutputTokenDetails.AudioTokens != int64(DefaultOutputAudioRate) {
		t.Errorf("estimate before a measured rate %+v, want %v tokens (the default's second)", est, DefaultOutputAudioRate)
	}
	f.Inspect(created("c"))
	f.Farewell()
	f.Inspect(done("c", 1, 0, 0, 3))
	if settled != 1 {
		t.Errorf("settled %d times, want 1", settled)
	}
}
