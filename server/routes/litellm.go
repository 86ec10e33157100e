package routes

// LiteLLM compatibility: a LiteLLM proxy config.yaml loads as it is. Of
// litellm_params, rpm, max_parallel_requests and organization are honoured,
// weight and tpm weigh simple-shuffle routing; of router_settings, the
// routing strategy (Router);
// the fields that mean nothing to a realtime relay (modelEntry's, tagged
// rtgate:"ignored") are accepted and named in one notice; anything else is
// still a typo and stops the load. Entries for providers rtgate does not
// relay (anthropic/, bedrock/, ...) and entries whose model_info.mode says
// they are not realtime models are loaded as not served, with a notice; an
// openai/ entry for a model that has no realtime API (gpt-4o) is served and
// fails upstream like any bad deployment.

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// otherProviders are LiteLLM provider prefixes that are not OpenAI's
// realtime API. An unknown prefix is still an error (a typo of openai/).
var otherProviders = []string{"anthropic", "bedrock", "bedrock_converse",
	"cohere", "cohere_chat", "mistral", "groq", "ollama", "ollama_chat", "together_ai", "huggingface", "replicate",
	"deepseek", "perplexity", "fireworks_ai", "openrouter", "sagemaker", "databricks", "watsonx", "cerebras",
	"text-completion-openai", "azure_ai", "voyage", "jina_ai", "hosted_vllm", "vllm", "lm_studio", "nvidia_nim",
	"cloudflare", "deepinfra", "anyscale", "ai21", "nlp_cloud", "aleph_alpha", "petals", "baseten", "dashscope",
	"friendliai", "github", "sambanova", "litellm_proxy", "custom_openai", "openai_like"}

// notServed reports whether a model_list entry is one rtgate loads but does
// not serve, noting why. The modes served are realtime and live (GPT-Live).
func (l *loader) notServed(e *modelEntry, itemPath, group string) bool {
	mode := scalarField(&e.ModelInfo, "mode")
	if mode != "" && mode != "realtime" && mode != "live" {
		l.skipped = append(l.skipped, fmt.Sprintf("%s (%s: model_info.mode is %s)", group, itemPath, mode))
		return true
	}
	spec := scalarField(&e.LiteLLMParams, "model")
	if prefix, model, found := strings.Cut(spec, "/"); found && isGeminiPrefix(prefix) && mode != "realtime" && !IsGeminiLiveModel(model) {
		// A LiteLLM config lists Gemini's chat models too (and, on
		// Vertex AI, Claude's and others'): only Gemini's Live models
		// have a realtime API.
		l.skipped = append(l.skipped, fmt.Sprintf("%s (%s: %s is not a Gemini Live model; set model_info.mode: realtime if it is one)", group, itemPath, spec))
		return true
	}
	if prefix, _, found := strings.Cut(spec, "/"); found && slices.Contains(otherProviders, prefix) {
		l.skipped = append(l.skipped, fmt.Sprintf("%s (%s: %s/ is not a realtime API rtgate serves)", group, itemPath, prefix))
		return true
	}
	return false
}

// isGeminiPrefix reports whether a LiteLLM provider prefix is one of those
// rtgate serves Gemini Live through: AI Studio's (gemini) or Vertex AI's
// (vertex_ai, and LiteLLM's vertex_ai_beta).
func isGeminiPrefix(prefix string) bool {
	return prefix == "gemini" || prefix == "vertex_ai" || prefix == "vertex_ai_beta"
}

// IsGeminiLiveModel reports whether a Gemini model name is one of its Live
// API models: Google names them *-live*, or *native-audio* for the
// native-audio dialog models (gemini-3.8-live, gemini-3.1-flash-live-preview,
// gemini-2.5-flash-native-audio-preview-09-2025).
func IsGeminiLiveModel(model string) bool {
	return strings.Contains(model, "-live") || strings.Contains(model, "native-audio")
}

// protocolOf decides which protocol a served entry's deployment d speaks:
// GPT-Live when model_info.mode is live, or when its model (or
// model_info.base_model, for an Azure deployment name) is a GPT-Live model;
// Realtime translation when either is a translation model; Realtime
// otherwise. It reports false for a contradiction, noted.
func (l *loader) protocolOf(e *modelEntry, itemPath string, d *Deployment) bool {
	mode := scalarField(&e.ModelInfo, "mode")
	live := mode == "live" || IsLiveModel(d.Model) || IsLiveModel(scalarField(&e.ModelInfo, "base_model"))
	switch {
	case live && mode == "realtime":
		l.fail(deref(&e.ModelInfo), join(itemPath, "model_info.mode"),
			"%q is a GPT-Live model: its mode is live (or leave mode out)", d.Model)
		return false
	case (d.Kind == KindXAI || d.Kind == KindGemini || d.Kind == KindVertex) && (live || mode == "live" || IsTranslationModel(d.Model)):
		l.fail(deref(&e.LiteLLMParams), join(itemPath, "litellm_params.model"),
			"%s/ models are served on the Realtime API only (no GPT-Live or translation sessions)", d.Kind)
		return false
	case live && d.Kind == KindAzure && d.APIVersion != "":
		l.fail(deref(&e.LiteLLMParams), join(itemPath, "litellm_params.api_version"),
			"GPT-Live on Azure is served at /openai/v1/live/sessions only: drop api_version")
		return false
	}
	switch {
	case live:
		d.setProtocol(ProtocolLive)
	case IsTranslationModel(d.Model) || IsTranslationModel(scalarField(&e.ModelInfo, "base_model")):
		d.setProtocol(ProtocolTranslation) // Realtime translation (IsTranslationModel)
	default:
		d.setProtocol(ProtocolRealtime)
	}
	return true
}

// scalarField is the text of mapping n's scalar field name, or "".
func scalarField(n *yaml.Node, name string) string {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			if v := deref(n.Content[i+1]); v.Kind == yaml.ScalarNode {
				return v.Value
			}
		}
	}
	return ""
}

// litellmExtras reads the honoured LiteLLM fields into d and notes the
// ignored ones.
func (l *loader) litellmExtras(p *litellmParams, path string, d *Deployment) {
	l.number(&p.RPM, join(path, "rpm"), &d.RPM,
		"%q is not a number of connects per minute (at least 0)")
	l.wholeNumber(&p.MaxParallelRequests, join(path, "max_parallel_requests"), &d.MaxSessions,
		"%q is not a whole number of sessions (at least 0)")
	l.number(&p.Weight, join(path, "weight"), &d.Weight, "%q is not a weight (a number, at least 0)")
	l.number(&p.TPM, join(path, "tpm"), &d.TPM, "%q is not a number of tokens per minute (at least 0)")
	if b := l.boolean(&p.RecordSessions, join(path, "record_sessions")); b != nil {
		d.RecordSessions = *b
	}
	if b := l.boolean(&p.LogTranscripts, join(path, "log_transcripts")); b != nil {
		d.LogTranscripts = *b
	}
	if given(&p.Organization) {
		if org, ok := l.env(&p.Organization, join(path, "organization")); ok && org != "" {
			d.header.Set("OpenAI-Organization", org)
		}
	}
	l.noteIgnored(p)
}

// noteIgnored notes the fields of dst (a decoded schema struct) tagged
// rtgate:"ignored" that the file gives.
func (l *loader) noteIgnored(dst any) {
	v := reflect.ValueOf(dst).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Tag.Get("rtgate") != "ignored" {
			continue
		}
		if n := v.Field(i).Addr().Interface().(*yaml.Node); given(n) {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			l.noteIgnoredField(name, deref(n).Line)
		}
	}
}

// noteIgnoredField notes one accepted and ignored field, for the notice.
func (l *loader) noteIgnoredField(name string, line int) {
	if l.ignored == nil {
		l.ignored = map[string][]int{}
	}
	l.ignored[name] = append(l.ignored[name], line)
}

// typeOf is the struct type dst (a pointer to it) decodes into.
func typeOf(dst any) reflect.Type { return reflect.TypeOf(dst).Elem() }

// notices are the load's notes, each one line.
func (l *loader) notices() []string {
	var out []string
	if len(l.ignored) > 0 {
		names := make([]string, 0, len(l.ignored))
		for name := range l.ignored {
			names = append(names, name)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, name := range names {
			lines := make([]string, len(l.ignored[name]))
			for j, line := range l.ignored[name] {
				lines[j] = strconv.Itoa(line)
			}
			parts[i] = fmt.Sprintf("%s (line %s)", name, strings.Join(lines, ", "))
		}
		out = append(out, fmt.Sprintf("%s: LiteLLM fields accepted and ignored (they mean nothing to a realtime relay): %s",
			l.file, strings.Join(parts, "; ")))
	}
	if len(l.skipped) > 0 {
		out = append(out, fmt.Sprintf("%s: model_list entries loaded but not served: %s", l.file, strings.Join(l.skipped, "; ")))
	}
	return out
}
