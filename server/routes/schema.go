package routes

import (
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The routes config file's schema: one struct per mapping, decoded by
// yaml.v3. Every field is a yaml.Node rather than a string or number so that
// each check afterwards can name the line of the value it refuses, and so
// that a value of the wrong kind (a list where a name belongs) is reported in
// the file's terms rather than as a Go type error. A field absent from the
// file is the zero Node (Kind 0).
//
// The yaml tags are also the list of known fields (see decodeMapping): to
// accept a new field, add it here.

// fileDoc is the top level.
type fileDoc struct {
	ModelList       yaml.Node `yaml:"model_list"`
	Keys            yaml.Node `yaml:"keys"`
	GeneralSettings yaml.Node `yaml:"general_settings"`
	// LiteLLM's own tuning (callbacks, retries). Accepted and ignored
	// whole, so that users can point rtgate at the config file their
	// LiteLLM proxy already uses.
	LiteLLMSettings yaml.Node `yaml:"litellm_settings"`
	// The routing strategy and its arguments are read (loader.router); the
	// rest is accepted and named in the start-up notice.
	RouterSettings yaml.Node `yaml:"router_settings"`
	// The conversation record's settings (rtgate's own: transcripts.go).
	Transcripts yaml.Node `yaml:"transcripts"`
	// Guardrails in LiteLLM's shape (guardrails.go).
	Guardrails yaml.Node `yaml:"guardrails"`
}

// modelEntry is one model_list item: one deployment of a model group.
type modelEntry struct {
	ModelName     yaml.Node `yaml:"model_name"`
	LiteLLMParams yaml.Node `yaml:"litellm_params"`
	// ModelInfo is LiteLLM's free-form metadata (ids, descriptions,
	// pricing). Its price fields (spend.IsPriceField) are read and checked;
	// the rest is accepted and ignored: it does not affect routing.
	ModelInfo yaml.Node `yaml:"model_info"`
}

// litellmParams is a deployment's upstream.
type litellmParams struct {
	Model      yaml.Node `yaml:"model"`
	APIKey     yaml.Node `yaml:"api_key"`
	APIBase    yaml.Node `yaml:"api_base"`
	APIVersion yaml.Node `yaml:"api_version"`

	// LiteLLM's fields that mean something here (litellmExtras).
	RPM                 yaml.Node `yaml:"rpm"`
	MaxParallelRequests yaml.Node `yaml:"max_parallel_requests"`
	Organization        yaml.Node `yaml:"organization"`
	// Weights of simple-shuffle routing (Router).
	Weight yaml.Node `yaml:"weight"`
	TPM    yaml.Node `yaml:"tpm"`

	// Vertex AI's (vertex_ai/ models only; vertex.go).
	VertexProject     yaml.Node `yaml:"vertex_project"`
	VertexLocation    yaml.Node `yaml:"vertex_location"`
	VertexCredentials yaml.Node `yaml:"vertex_credentials"`

	// LogTranscripts keeps the conversation record of sessions that start
	// on this deployment (rtgate's own; opt-in).
	LogTranscripts yaml.Node `yaml:"log_transcripts"`
	// RecordSessions records the audio and events of sessions that start
	// on this deployment (rtgate's own; opt-in).
	RecordSessions yaml.Node `yaml:"record_sessions"`

	// LiteLLM's fields that mean nothing to a realtime relay: accepted, so
	// that a LiteLLM config loads as it is, and named in one start-up
	// notice. (timeout bounds a whole LiteLLM request, often 600 s: it is
	// no connect budget.)
	Timeout             yaml.Node `yaml:"timeout" rtgate:"ignored"`
	StreamTimeout       yaml.Node `yaml:"stream_timeout" rtgate:"ignored"`
	MaxRetries          yaml.Node `yaml:"max_retries" rtgate:"ignored"`
	RegionName          yaml.Node `yaml:"region_name" rtgate:"ignored"`
	Order               yaml.Node `yaml:"order" rtgate:"ignored"`
	DropParams          yaml.Node `yaml:"drop_params" rtgate:"ignored"`
	CustomLLMProvider   yaml.Node `yaml:"custom_llm_provider" rtgate:"ignored"`
	Tags                yaml.Node `yaml:"tags" rtgate:"ignored"`
	ExtraHeaders        yaml.Node `yaml:"extra_headers" rtgate:"ignored"`
	InputCostPerToken   yaml.Node `yaml:"input_cost_per_token" rtgate:"ignored"`
	OutputCostPerToken  yaml.Node `yaml:"output_cost_per_token" rtgate:"ignored"`
	UseInPassThrough    yaml.Node `yaml:"use_in_pass_through" rtgate:"ignored"`
	MergeReasoning      yaml.Node `yaml:"merge_reasoning_content_in_choices" rtgate:"ignored"`
	LiteLLMCredential   yaml.Node `yaml:"litellm_credential_name" rtgate:"ignored"`
	MockResponse        yaml.Node `yaml:"mock_response" rtgate:"ignored"`
	CacheControlInjects yaml.Node `yaml:"cache_control_injection_points" rtgate:"ignored"`
}

// keyEntry is one client key (rtgate's own section).
type keyEntry struct {
	Name        yaml.Node `yaml:"name"`
	KeyHash     yaml.Node `yaml:"key_hash"`
	Key         yaml.Node `yaml:"key"`
	Models      yaml.Node `yaml:"models"`
	MaxSessions yaml.Node `yaml:"max_sessions"`
	ConnectRate yaml.Node `yaml:"connect_rate"`
	// LiteLLM's names: USD per budget_duration (empty: lifetime).
	MaxBudget      yaml.Node `yaml:"max_budget"`
	BudgetDuration yaml.Node `yaml:"budget_duration"`
	Sideband       yaml.Node `yaml:"sideband"`
	Continuity     yaml.Node `yaml:"continuity"`
	MaxSessionSecs yaml.Node `yaml:"max_session_secs"`
	// ContinuityKeepAudio: the user's audio kept for a resume (opt-in).
	ContinuityKeepAudio yaml.Node `yaml:"continuity_keep_audio"`
	// TranscriptionModel: what a session.update naming a transcription
	// model the key may not use gets (rewrite, the default, or refuse).
	TranscriptionModel yaml.Node `yaml:"transcription_model"`
	// LogTranscripts: keep the conversation record of the key's sessions
	// (true), or never (false), whatever the deployment says.
	LogTranscripts yaml.Node `yaml:"log_transcripts"`
	// RecordSessions: record the audio and events of the key's sessions
	// (true), or never (false), whatever the deployment says.
	RecordSessions yaml.Node `yaml:"record_sessions"`
	// Guardrails: the guardrails (by guardrail_name) the key's sessions
	// run beyond the default ones.
	Guardrails yaml.Node `yaml:"guardrails"`
}

// generalSettings is LiteLLM's general_settings; only the master key means
// something here.
type generalSettings struct {
	MasterKey yaml.Node `yaml:"master_key"`

	// LiteLLM proxy settings a LiteLLM config commonly carries; accepted
	// and named in the start-up notice (rtgate's own spend log takes
	// DATABASE_URL from the environment).
	DatabaseURL                 yaml.Node `yaml:"database_url" rtgate:"ignored"`
	DatabaseConnectionPoolLimit yaml.Node `yaml:"database_connection_pool_limit" rtgate:"ignored"`
	Alerting                    yaml.Node `yaml:"alerting" rtgate:"ignored"`
	AlertingThreshold           yaml.Node `yaml:"alerting_threshold" rtgate:"ignored"`
	StoreModelInDB              yaml.Node `yaml:"store_model_in_db" rtgate:"ignored"`
	ProxyBatchWriteAt           yaml.Node `yaml:"proxy_batch_write_at" rtgate:"ignored"`
	DisableSpendLogs            yaml.Node `yaml:"disable_spend_logs" rtgate:"ignored"`
	BackgroundHealthChecks      yaml.Node `yaml:"background_health_checks" rtgate:"ignored"`
	HealthCheckInterval         yaml.Node `yaml:"health_check_interval" rtgate:"ignored"`
	MaxParallelRequests         yaml.Node `yaml:"max_parallel_requests" rtgate:"ignored"`
	GlobalMaxParallelRequests   yaml.Node `yaml:"global_max_parallel_requests" rtgate:"ignored"`
}

// given reports whether the field was in the file.
func given(n *yaml.Node) bool { return n.Kind != 0 }

// decodeMapping decodes mapping n (at path) into dst, a pointer to one of
// the structs above, reporting a value that is not a mapping, unknown fields
// and fields given twice. It reports false when n was not a mapping.
//
// Known fields are checked here rather than with yaml.v3's KnownFields
// because that option exists only on a Decoder reading a whole document and
// says "field x not found in type routes.keyEntry": the file's users need the
// field's path in the file and the fields they could have meant.
func (l *loader) decodeMapping(n *yaml.Node, path string, dst any) bool {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		l.fail(n, path, "must be a mapping (name: value lines), not %s", kindName(n))
		return false
	}
	known := yamlNames(reflect.TypeOf(dst).Elem())
	before := len(l.errs)
	first := make(map[string]int, len(n.Content)/2) // field -> line
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		switch line, dup := first[k.Value]; {
		case !slices.Contains(known, k.Value):
			l.fail(k, path, "unknown field %q (known fields: %s)", k.Value, strings.Join(known, ", "))
		case dup:
			l.fail(k, path, "field %q is given twice (first on line %d)", k.Value, line)
		default:
			first[k.Value] = k.Line
		}
	}
	// Fields of dst are yaml.Nodes, so the only errors left to yaml.v3 are
	// the repeated fields already reported; unknown fields it skips.
	if err := n.Decode(dst); err != nil && len(l.errs) == before {
		l.fail(n, path, "%v", err)
	}
	return true
}

// yamlNames lists the yaml tag names of struct type t, in order.
func yamlNames(t reflect.Type) []string {
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// deref follows YAML aliases (*name) to the anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// kindName says what a node is, in the file's terms.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "empty"
		}
		return "a single value"
	}
	return "this"
}
