package spend

import (
	"math"
	"testing"

	"rtgate/server/usage"
)

func ptr(f float64) *float64 { return &f }

// tokens builds a usage with one count per kind.
func tokens(inText, inAudio, inImage, cachedText, cachedAudio, cachedImage, outText, outAudio int64) usage.Usage {
	var u usage.Usage
	u.InputTokenDetails = usage.InputTokenDetails{TextTokens: inText, AudioTokens: inAudio, ImageTokens: inImage,
		CachedTokens:        cachedText + cachedAudio + cachedImage,
		CachedTokensDetails: usage.CachedTokensDetails{TextTokens: cachedText, AudioTokens: cachedAudio, ImageTokens: cachedImage}}
	u.OutputTokenDetails = usage.OutputTokenDetails{TextTokens: outText, AudioTokens: outAudio}
	u.InputTokens, u.OutputTokens = inText+inAudio+inImage, outText+outAudio
	u.TotalTokens = u.InputTokens + u.OutputTokens
	return u
}

// TestCostEveryKind prices one million tokens of each kind alone, so each
// expectation is the list price of that kind read off the pricing page, and
// then a mixed session worked out by hand.
func TestCostEveryKind(t *testing.T) {
	rt, _ := Lookup("gpt-realtime")
	mini, _ := Lookup("gpt-realtime-mini")
	for _, tc := range []struct {
		name   string
		p      Prices
		u      usage.Usage
		wantUS float64
	}{
		{"gpt-realtime uncached text in", rt, tokens(1e6, 0, 0, 0, 0, 0, 0, 0), 4},
		{"gpt-realtime cached text in", rt, tokens(1e6, 0, 0, 1e6, 0, 0, 0, 0), 0.40},
		{"gpt-realtime uncached audio in", rt, tokens(0, 1e6, 0, 0, 0, 0, 0, 0), 32},
		{"gpt-realtime cached audio in", rt, tokens(0, 1e6, 0, 0, 1e6, 0, 0, 0), 0.40},
		{"gpt-realtime image in", rt, tokens(0, 0, 1e6, 0, 0, 0, 0, 0), 5},
		{"gpt-realtime cached image in", rt, tokens(0, 0, 1e6, 0, 0, 1e6, 0, 0), 0.50},
		{"gpt-realtime text out", rt, tokens(0, 0, 0, 0, 0, 0, 1e6, 0), 16},
		{"gpt-realtime audio out", rt, tokens(0, 0, 0, 0, 0, 0, 0, 1e6), 64},
		{"gpt-realtime-mini uncached text in", mini, tokens(1e6, 0, 0, 0, 0, 0, 0, 0), 0.60},
		{"gpt-realtime-mini cached text in", mini, tokens(1e6, 0, 0, 1e6, 0, 0, 0, 0), 0.06},
		{"gpt-realtime-mini uncached audio in", mini, tokens(0, 1e6, 0, 0, 0, 0, 0, 0), 10},
		{"gpt-realtime-mini cached audio in", mini, tokens(0, 1e6, 0, 0, 1e6, 0, 0, 0), 0.30},
		{"gpt-realtime-mini image in", mini, tokens(0, 0, 1e6, 0, 0, 0, 0, 0), 0.80},
		{"gpt-realtime-mini cached image in", mini, tokens(0, 0, 1e6, 0, 0, 1e6, 0, 0), 0.08},
		{"gpt-realtime-mini text out", mini, tokens(0, 0, 0, 0, 0, 0, 1e6, 0), 2.40},
		{"gpt-realtime-mini audio out", mini, tokens(0, 0, 0, 0, 0, 0, 0, 1e6), 20},
		// A minute of conversation on gpt-realtime: 1,200 text in of which
		// 1,024 cached, 600 audio in of which 256 cached, 40 text out, 800
		// audio out.
		//   text   176 × 4e-6 + 1024 × 0.4e-6 = 0.000704 + 0.0004096
		//   audio  344 × 32e-6 + 256 × 0.4e-6 = 0.011008 + 0.0001024
		//   out     40 × 16e-6 + 800 × 64e-6  = 0.00064  + 0.0512
		//   total 0.0640640
		{"gpt-realtime mixed", rt, tokens(1200, 600, 0, 1024, 256, 0, 40, 800), 0.064064},
		{"nothing", rt, usage.Usage{Responses: 3}, 0},
		// A cached count without its split is charged uncached.
		{"cached without details", rt, func() usage.Usage {
			u := tokens(1e6, 0, 0, 0, 0, 0, 0, 0)
			u.InputTokenDetails.CachedTokens = 5e5
			return u
		}(), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Cost(tc.u); math.Abs(got-tc.wantUS) > 1e-9 {
				t.Fatalf("Cost = %.9f USD, want %.9f", got, tc.wantUS)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	rt := defaultPrices["gpt-realtime"]
	for _, tc := range []struct {
		name  string
		info  ModelInfo
		model string
		want  Prices
		known bool
	}{
		{"built-in", ModelInfo{}, "gpt-realtime", rt, true},
		{"provider prefix", ModelInfo{}, "openai/gpt-realtime", rt, true},
		{"dated snapshot", ModelInfo{}, "gpt-realtime-2025-08-28", rt, true},
		{"unknown model", ModelInfo{}, "my-azure-deployment", Prices{}, false},
		{"base_model for an Azure deployment", ModelInfo{BaseModel: "gpt-realtime"}, "my-azure-deployment", rt, true},
		{"one field overridden", ModelInfo{OutputCostPerAudioToken: ptr(1e-4)}, "gpt-realtime",
			func() Prices { p := rt; p.OutputCostPerAudioToken = 1e-4; return p }(), true},
		{"explicit zero stays zero", ModelInfo{CacheReadInputAudioTokenCost: ptr(0)}, "gpt-realtime",
			func() Prices { p := rt; p.CacheReadInputAudioTokenCost = 0; return p }(), true},
		// Only text prices stated: audio at text's rates, cached at the
		// uncached rate, images at text's input rate.
		{"text prices only", ModelInfo{InputCostPerToken: ptr(1e-6), OutputCostPerToken: ptr(2e-6)}, "custom-model",
			Prices{InputCostPerToken: 1e-6, OutputCostPerToken: 2e-6, InputCostPerAudioToken: 1e-6, OutputCostPerAudioToken: 2e-6,
				CacheReadInputTokenCost: 1e-6, CacheReadInputAudioTokenCost: 1e-6, InputCostPerImageToken: 1e-6}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, known := tc.info.Resolve(tc.model)
			if got != tc.want || known != tc.known {
				t.Fatalf("Resolve(%q) = %+v, %v; want %+v, %v", tc.model, got, known, tc.want, tc.known)
			}
		})
	}
}

// TestCostNewModels prices a million tokens of each kind on the
// gpt-realtime-2.1 models, each expectation the list price read off the
// pricing page on 2026-12-01, and the per-minute models by the minute.
func TestCostNewModels(t *testing.T) {
	r21, ok := Lookup("openai/gpt-realtime-2.1")
	mini21, ok2 := Lookup("gpt-realtime-2.1-mini-2026-11-20")
	if !ok || !ok2 {
		t.Fatalf("gpt-realtime-2.1 (%v) or its mini (%v) has no built-in prices", ok, ok2)
	}
	for _, tc := range []struct {
		name   string
		p      Prices
		u      usage.Usage
		wantUS float64
	}{
		{"2.1 text in", r21, tokens(1e6, 0, 0, 0, 0, 0, 0, 0), 4},
		{"2.1 cached text in", r21, tokens(1e6, 0, 0, 1e6, 0, 0, 0, 0), 0.40},
		{"2.1 text out", r21, tokens(0, 0, 0, 0, 0, 0, 1e6, 0), 24},
		{"2.1 audio in", r21, tokens(0, 1e6, 0, 0, 0, 0, 0, 0), 32},
		{"2.1 cached audio in", r21, tokens(0, 1e6, 0, 0, 1e6, 0, 0, 0), 0.40},
		{"2.1 audio out", r21, tokens(0, 0, 0, 0, 0, 0, 0, 1e6), 64},
		{"2.1 image in", r21, tokens(0, 0, 1e6, 0, 0, 0, 0, 0), 5},
		{"2.1 cached image in", r21, tokens(0, 0, 1e6, 0, 0, 1e6, 0, 0), 0.50},
		{"2.1-mini text in", mini21, tokens(1e6, 0, 0, 0, 0, 0, 0, 0), 0.60},
		{"2.1-mini cached text in", mini21, tokens(1e6, 0, 0, 1e6, 0, 0, 0, 0), 0.06},
		{"2.1-mini text out", mini21, tokens(0, 0, 0, 0, 0, 0, 1e6, 0), 2.40},
		{"2.1-mini audio in", mini21, tokens(0, 1e6, 0, 0, 0, 0, 0, 0), 10},
		{"2.1-mini cached audio in", mini21, tokens(0, 1e6, 0, 0, 1e6, 0, 0, 0), 0.30},
		{"2.1-mini audio out", mini21, tokens(0, 0, 0, 0, 0, 0, 0, 1e6), 20},
		{"2.1-mini image in", mini21, tokens(0, 0, 1e6, 0, 0, 0, 0, 0), 0.80},
		{"2.1-mini cached image in", mini21, tokens(0, 0, 1e6, 0, 0, 1e6, 0, 0), 0.08},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Cost(tc.u); math.Abs(got-tc.wantUS) > 1e-9 {
				t.Fatalf("Cost = %.9f USD, want %.9f", got, tc.wantUS)
			}
		})
	}
	for _, tc := range []struct {
		model     string
		perMinute float64
	}{
		{"gpt-realtime-translate", 0.034},
		{"openai/gpt-realtime-translate-2026-10-01", 0.034},
		{"gpt-realtime-whisper", 0.017},
		{"gpt-live-transcribe", 0.017},
	} {
		perSecond, ok := ModelInfo{}.SecondPrice(tc.model)
		if !ok {
			t.Fatalf("%s has no built-in price", tc.model)
		}
		// Ten minutes of session (translation) or of transcribed audio.
		if got := 600 * perSecond; math.Abs(got-10*tc.perMinute) > 1e-9 {
			t.Errorf("%s: 10 minutes cost %.6f USD, want %.6f", tc.model, got, 10*tc.perMinute)
		}
	}
	// A token-priced model bills no time.
	if _, ok := (ModelInfo{}).SecondPrice("gpt-realtime-2.1"); ok {
		t.Error("gpt-realtime-2.1 has a price per second")
	}
	// model_info's input_cost_per_second overrides the built-in rate.
	if p, _ := (ModelInfo{InputCostPerSecond: ptr(0.001)}).SecondPrice("gpt-realtime-translate"); p != 0.001 {
		t.Errorf("overridden: %v USD a second, want 0.001", p)
	}
}

// TestReasoningCountedOnce: newer models report reasoning tokens, and nest
// them inside the output text tokens (output_token_details.text_tokens
// includes output_tokens_details.reasoning_tokens). A response.done
// carrying both must be billed its text tokens once, not text plus
// reasoning.
func TestReasoningCountedOnce(t *testing.T) {
	r21, _ := Lookup("gpt-realtime-2.1")
	// 1,000 text out of which 600 reasoning, 2,000 audio out; 500 text in.
	done := []byte(`{"type":"response.done","event_id":"event_1","response":{"id":"resp_1","status":"completed","usage":{
		"total_tokens":3500,"input_tokens":500,"output_tokens":3000,
		"input_token_details":{"text_tokens":500,"audio_tokens":0,"image_tokens":0,"cached_tokens":0},
		"output_token_details":{"text_tokens":1000,"audio_tokens":2000,"reasoning_tokens":600},
		"output_tokens_details":{"reasoning_tokens":600}}}}`)
	u, err := usage.Parse(done)
	if err != nil {
		t.Fatal(err)
	}
	if u.OutputTokens != 3000 || u.OutputTokenDetails.TextTokens != 1000 || u.OutputTokenDetails.AudioTokens != 2000 {
		t.Fatalf("parsed %+v: want 3,000 out, 1,000 of them text and 2,000 audio", u)
	}
	// 500 × $4 + 1,000 × $24 + 2,000 × $64, a million each.
	want := (500*4.0 + 1000*24 + 2000*64) / 1e6
	if got := r21.Cost(u); math.Abs(got-want) > 1e-12 {
		t.Fatalf("Cost = %.9f USD, want %.9f (reasoning counted once, inside text)", got, want)
	}
}
