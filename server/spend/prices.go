// Package spend turns token usage into dollars and keeps account of them:
// the price of each token kind per model (LiteLLM's model_info names, with
// built-in defaults for OpenAI's realtime models), the cost of a session,
// and budgets per key (a Ledger, saved to a file or shared through Redis).
// The durable spend log in Postgres is server/spenddb.
package spend

import (
	"regexp"
	"slices"
	"strings"

	"rtgate/server/usage"
)

// Prices are USD per token for each kind the realtime API reports, named as
// LiteLLM names them in model_info (so a LiteLLM config's prices carry over).
type Prices struct {
	InputCostPerToken            float64 `json:"input_cost_per_token" yaml:"input_cost_per_token"`
	OutputCostPerToken           float64 `json:"output_cost_per_token" yaml:"output_cost_per_token"`
	InputCostPerAudioToken       float64 `json:"input_cost_per_audio_token" yaml:"input_cost_per_audio_token"`
	OutputCostPerAudioToken      float64 `json:"output_cost_per_audio_token" yaml:"output_cost_per_audio_token"`
	CacheReadInputTokenCost      float64 `json:"cache_read_input_token_cost" yaml:"cache_read_input_token_cost"`
	CacheReadInputAudioTokenCost float64 `json:"cache_read_input_audio_token_cost" yaml:"cache_read_input_audio_token_cost"`
	InputCostPerImageToken       float64 `json:"input_cost_per_image_token" yaml:"input_cost_per_image_token"`
}

// ModelInfo is the price part of a model_list entry's model_info: each
// field overrides the built-in price of that kind when set. BaseModel, as in
// LiteLLM, names the model whose built-in prices apply when the deployment's
// own name is not a model (an Azure deployment name, say).
type ModelInfo struct {
	BaseModel                    string   `yaml:"base_model"`
	InputCostPerToken            *float64 `yaml:"input_cost_per_token"`
	OutputCostPerToken           *float64 `yaml:"output_cost_per_token"`
	InputCostPerAudioToken       *float64 `yaml:"input_cost_per_audio_token"`
	OutputCostPerAudioToken      *float64 `yaml:"output_cost_per_audio_token"`
	CacheReadInputTokenCost      *float64 `yaml:"cache_read_input_token_cost"`
	CacheReadInputAudioTokenCost *float64 `yaml:"cache_read_input_audio_token_cost"`
	InputCostPerImageToken       *float64 `yaml:"input_cost_per_image_token"`
	// InputCostPerSecond is LiteLLM's price of session time, USD per
	// second: what GPT-Live bills (see SecondPrice).
	InputCostPerSecond *float64 `yaml:"input_cost_per_second"`
}

// priceFields are the model_info fields ModelInfo reads.
var priceFields = []string{"base_model", "input_cost_per_token", "output_cost_per_token", "input_cost_per_audio_token",
	"output_cost_per_audio_token", "cache_read_input_token_cost", "cache_read_input_audio_token_cost",
	"input_cost_per_image_token", "input_cost_per_second"}

// IsPriceField reports whether name is a model_info field ModelInfo reads.
func IsPriceField(name string) bool { return slices.Contains(priceFields, name) }

// perM is a price per million tokens, as OpenAI's pricing page states them.
func perM(usd float64) float64 { return usd / 1e6 }

// defaultPrices are OpenAI's list prices for the realtime models, in USD per
// token, from OpenAI's API pricing page (developers.openai.com/api/docs/pricing,
// "Realtime API" table) as published in October 2026 and read for this
// table on 2026-12-01. Prices change: a model_info block on a model_list
// entry overrides any of them, and a model not listed here costs 0 unless
// its entry states prices (the gateway says so at start-up).
var defaultPrices = map[string]Prices{
	// gpt-realtime, and gpt-realtime-1.5 at the same prices: text $4 in,
	// $0.40 cached, $16 out; audio $32 in, $0.40 cached, $64 out; image $5.
	"gpt-realtime":     {perM(4), perM(16), perM(32), perM(64), perM(0.40), perM(0.40), perM(5)},
	"gpt-realtime-1.5": {perM(4), perM(16), perM(32), perM(64), perM(0.40), perM(0.40), perM(5)},
	// gpt-realtime-2: as gpt-realtime but text out $24.
	"gpt-realtime-2": {perM(4), perM(24), perM(32), perM(64), perM(0.40), perM(0.40), perM(5)},
	// gpt-realtime-2.1 (read 2026-12-01): text $4 in, $0.40 cached, $24
	// out; audio $32 in, $0.40 cached, $64 out; image $5 ($0.50 cached).
	"gpt-realtime-2.1": {perM(4), perM(24), perM(32), perM(64), perM(0.40), perM(0.40), perM(5)},
	// gpt-realtime-2.1-mini (read 2026-12-01): text $0.60 in, $0.06 cached,
	// $2.40 out; audio $10 in, $0.30 cached, $20 out; image $0.80 ($0.08
	// cached).
	"gpt-realtime-2.1-mini": {perM(0.60), perM(2.40), perM(10), perM(20), perM(0.06), perM(0.30), perM(0.80)},
	// gpt-realtime-mini: text $0.60 in, $0.06 cached, $2.40 out; audio $10
	// in, $0.30 cached, $20 out; image $0.80.
	"gpt-realtime-mini": {perM(0.60), perM(2.40), perM(10), perM(20), perM(0.06), perM(0.30), perM(0.80)},
	// The previews, still served: text $5/$2.50/$20, audio $40/$2.50/$80;
	// mini text $0.60/$0.30/$2.40, audio $10/$0.30/$20. No image input.
	"gpt-4o-realtime-preview":      {perM(5), perM(20), perM(40), perM(80), perM(2.50), perM(2.50), 0},
	"gpt-4o-mini-realtime-preview": {perM(0.60), perM(2.40), perM(10), perM(20), perM(0.30), perM(0.30), 0},
}

// defaultModelPrices are OpenAI's list prices of the models a Realtime or
// GPT-Live session makes the gateway pay for beside its own model, in USD
// per token: the Responses models GPT-Live delegates to (their tokens come
// in response.event) and the transcription models a Realtime session's
// input transcription runs on (their tokens come in
// conversation.item.input_audio_transcription.completed). From OpenAI's API
// pricing page (developers.openai.com/api/docs/pricing, the "Text tokens"
// and "Audio tokens" tables) as quoted by deploybase.ai's "OpenAI Pricing"
// (March 2026) and margindash.com's model comparison, read for this table
// on 2026-12-04. Text models have no audio or image rates: Resolve charges
// those kinds at the text rates if they ever come. A deployment's model_info
// overrides these as it overrides the Realtime prices.
var defaultModelPrices = map[string]Prices{
	// Responses models (text in, cached in, out, per million).
	"gpt-5":        text(1.25, 0.125, 10),
	"gpt-5-mini":   text(0.25, 0.025, 2),
	"gpt-5-nano":   text(0.05, 0.005, 0.40),
	"gpt-5.1":      text(1.25, 0.125, 10),
	"gpt-5.2":      text(1.75, 0.175, 14),
	"gpt-5.2-mini": text(0.25, 0.025, 2),
	"gpt-5.4":      text(2.50, 0.25, 15),
	"gpt-5.4-mini": text(0.75, 0.075, 4.50),
	"gpt-5-pro":    text(15, 15, 120),
	"gpt-4.1":      text(2, 0.50, 8),
	"gpt-4.1-mini": text(0.40, 0.10, 1.60),
	"gpt-4.1-nano": text(0.10, 0.025, 0.40),
	"gpt-4o":       text(2.50, 1.25, 10),
	"gpt-4o-mini":  text(0.15, 0.075, 0.60),
	"o3":           text(2, 0.50, 8),
	"o3-pro":       text(20, 20, 80), // no cached rate: cached input at the input rate
	"o3-mini":      text(1.10, 0.55, 4.40),
	"o4-mini":      text(1.10, 0.275, 4.40),
	"o1":           text(15, 7.50, 60),
	"o1-pro":       text(150, 150, 600),
	// Transcription models: text in (the prompt), audio in, text out.
	// gpt-4o-transcribe $2.50, $6, $10; gpt-4o-mini-transcribe $1.25, $3,
	// $5 (whisper-1 is billed by the minute: defaultSecondPrices).
	"gpt-4o-transcribe":      {InputCostPerToken: perM(2.50), OutputCostPerToken: perM(10), InputCostPerAudioToken: perM(6)},
	"gpt-4o-mini-transcribe": {InputCostPerToken: perM(1.25), OutputCostPerToken: perM(5), InputCostPerAudioToken: perM(3)},
}

// text is a text-only model's prices per million tokens.
func text(in, cached, out float64) Prices {
	return Prices{InputCostPerToken: perM(in), CacheReadInputTokenCost: perM(cached), OutputCostPerToken: perM(out)}
}

// defaultSecondPrices are OpenAI's list prices of the models billed by
// session time, in USD per second, from the same pricing page and the model
// pages, read on 2026-12-01. gpt-live-1: $0.05 per minute. gpt-live-1.1:
// $0.05 per active minute and $0.02 per standby minute; standby time is not
// reported in any event SDK 7.59 knows, so every second is billed as active
// (an upper bound; model_info.input_cost_per_second overrides it).
// gpt-realtime-translate (Realtime translation sessions): $0.034 per minute
// of session. gpt-realtime-whisper and gpt-live-transcribe (per-minute
// transcription on /v1/realtime?intent=transcription): $0.017 per minute of
// audio, the seconds the transcription events report. whisper-1 (a
// Realtime session's input transcription, read 2026-12-04): $0.006 per
// minute of audio. xAI's Voice Agent API (grok-voice-*, xai/ deployments,
// docs.x.ai/developers/models/voice-agent-api, read 2026-12-05): $0.05 per
// minute of connection; tool invocations are billed apart by xAI and are
// not in the gateway's figure.
var defaultSecondPrices = map[string]float64{
	"grok-voice-latest":         0.05 / 60,
	"grok-voice-think-fast-1.0": 0.05 / 60,
	"gpt-live-1":                0.05 / 60,
	"gpt-live-1.1":              0.05 / 60,
	"gpt-realtime-translate":    0.034 / 60,
	"gpt-realtime-whisper":      0.017 / 60,
	"gpt-live-transcribe":       0.017 / 60,
	"whisper-1":                 0.006 / 60,
}

// SecondPrice is the price per second of session time of a deployment of
// model: info's input_cost_per_second, else the built-in price of
// info.BaseModel (or of model); known is false when neither prices it.
func (info ModelInfo) SecondPrice(model string) (usd float64, known bool) {
	if info.InputCostPerSecond != nil {
		return *info.InputCostPerSecond, true
	}
	name := model
	if info.BaseModel != "" {
		name = info.BaseModel
	}
	return lookupIn(defaultSecondPrices, name)
}

// snapshot matches a dated snapshot suffix (gpt-realtime-2025-08-28): a
// snapshot costs what its model costs unless it is listed itself.
var snapshot = regexp.MustCompile(`-\d{4}-\d{2}-\d{2}$`)

// Lookup returns the built-in prices of an upstream model name ("openai/"
// and similar provider prefixes and dated snapshot suffixes are looked
// through), and whether there are any: the Realtime models', else the
// other models' a session may pay for (defaultModelPrices).
func Lookup(model string) (Prices, bool) {
	if p, ok := lookupIn(defaultPrices, model); ok {
		return p, true
	}
	return lookupIn(defaultModelPrices, model)
}

// lookupIn finds model in a built-in table, looking through a provider
// prefix and a dated snapshot suffix.
func lookupIn[T any](table map[string]T, model string) (T, bool) {
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	if p, ok := table[model]; ok {
		return p, true
	}
	p, ok := table[snapshot.ReplaceAllString(model, "")]
	return p, ok
}

// Resolve is the price list of a deployment of model: the built-in prices
// of info.BaseModel (or of model), each overridden by info where it sets a
// price. known is false when neither the built-in table nor info prices
// anything, so that the caller can warn.
func (info ModelInfo) Resolve(model string) (p Prices, known bool) {
	name := model
	if info.BaseModel != "" {
		name = info.BaseModel
	}
	p, known = Lookup(name)
	for _, f := range []struct {
		dst *float64
		src *float64
	}{
		{&p.InputCostPerToken, info.InputCostPerToken},
		{&p.OutputCostPerToken, info.OutputCostPerToken},
		{&p.InputCostPerAudioToken, info.InputCostPerAudioToken},
		{&p.OutputCostPerAudioToken, info.OutputCostPerAudioToken},
		{&p.CacheReadInputTokenCost, info.CacheReadInputTokenCost},
		{&p.CacheReadInputAudioTokenCost, info.CacheReadInputAudioTokenCost},
		{&p.InputCostPerImageToken, info.InputCostPerImageToken},
	} {
		if f.src != nil {
			*f.dst = *f.src
			known = true
		}
	}
	if !known {
		return p, false
	}
	// A kind left without a price is charged at the nearest stated one,
	// never less: audio at text's rate, cached input at the uncached rate
	// of its kind, images at text's input rate. (LiteLLM does the same for
	// a missing cache price.)
	if info.InputCostPerAudioToken == nil && p.InputCostPerAudioToken == 0 {
		p.InputCostPerAudioToken = p.InputCostPerToken
	}
	if info.OutputCostPerAudioToken == nil && p.OutputCostPerAudioToken == 0 {
		p.OutputCostPerAudioToken = p.OutputCostPerToken
	}
	if info.CacheReadInputTokenCost == nil && p.CacheReadInputTokenCost == 0 {
		p.CacheReadInputTokenCost = p.InputCostPerToken
	}
	if info.CacheReadInputAudioTokenCost == nil && p.CacheReadInputAudioTokenCost == 0 {
		p.CacheReadInputAudioTokenCost = p.InputCostPerAudioToken
	}
	if info.InputCostPerImageToken == nil && p.InputCostPerImageToken == 0 {
		p.InputCostPerImageToken = p.InputCostPerToken
	}
	return p, true
}

// Cost is the price in USD of usage u. Cached input tokens are counted
// inside each kind's input tokens, so the uncached part is the kind's count
// less its cached part:
//
//	text   (in − cached) × input_cost_per_token + cached × cache_read_input_token_cost
//	audio  (in − cached) × input_cost_per_audio_token + cached × cache_read_input_audio_token_cost
//	image  (in − cached) × input_cost_per_image_token + cached × the image rate discounted as text's cache discounts text
//	output text × output_cost_per_token + audio × output_cost_per_audio_token
//
// LiteLLM has no field for cached image tokens; OpenAI prices them at the
// image rate times text's cache ratio (gpt-realtime: $5 and $0.50 a million).
// Duration-billed transcription (TranscriptionSeconds) is priced per second
// (a deployment's SecondPrice), not here.
//
// Reasoning tokens, which newer models report, are part of the output text
// tokens (output_token_details.text_tokens): they are priced there, once.
func (p Prices) Cost(u usage.Usage) float64 {
	in, c, out := u.InputTokenDetails, u.InputTokenDetails.CachedTokensDetails, u.OutputTokenDetails
	imageCached := 0.0
	if p.InputCostPerToken > 0 {
		imageCached = p.InputCostPerImageToken * p.CacheReadInputTokenCost / p.InputCostPerToken
	}
	return float64(max(in.TextTokens-c.TextTokens, 0))*p.InputCostPerToken +
		float64(c.TextTokens)*p.CacheReadInputTokenCost +
		float64(max(in.AudioTokens-c.AudioTokens, 0))*p.InputCostPerAudioToken +
		float64(c.AudioTokens)*p.CacheReadInputAudioTokenCost +
		float64(max(in.ImageTokens-c.ImageTokens, 0))*p.InputCostPerImageToken +
		float64(c.ImageTokens)*imageCached +
		float64(out.TextTokens)*p.OutputCostPerToken +
		float64(out.AudioTokens)*p.OutputCostPerAudioToken
}
