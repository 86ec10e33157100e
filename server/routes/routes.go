// Package routes is the gateway's routing table: the model groups clients
// ask for, the upstream deployments each group goes to, and the client keys
// that may open sessions. It is built either from the routes config file
// (CONFIG_FILE, see Load) or, on the zero-config path, from the environment
// settings' single model and keys (see Single).
//
// The file's shape is the config.yaml users already write for LiteLLM's
// proxy: a model_list of deployments grouped by model_name, plus
// general_settings.master_key; rtgate adds a keys section for client keys.
//
// A Table is read-only once built, so sessions share it without locks; the
// server replaces it whole on SIGHUP. Nothing here knows about sockets or
// sessions.
package routes

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"rtgate/server/guardrail"
	"rtgate/server/spend"
)

// Upstream kinds.
const (
	KindOpenAI = "openai" // Authorization: Bearer, /realtime?model=
	KindAzure  = "azure"  // api-key header, Azure's /openai/... paths
	// KindXAI is xAI's Grok Voice Agent API: OpenAI's form (Authorization:
	// Bearer, /realtime?model=) speaking a dialect of the Realtime API
	// that the gateway normalises for OpenAI's SDKs (server/providers/xai),
	// billed per minute of connection.
	KindXAI = "xai"
	// KindGemini is Google's Gemini Live API on AI Studio
	// (BidiGenerateContent, the key in x-goog-api-key), translated to
	// and from the OpenAI Realtime API (server/providers/gemini).
	KindGemini = "gemini"
	// KindVertex is the same Gemini Live API on Vertex AI (LiteLLM's
	// vertex_ai/): a regional endpoint, an OAuth 2 access token per dial
	// (Authorizer), the model as its full resource in the setup
	// (vertex.go).
	KindVertex = "vertex_ai"
)

// Protocols a deployment speaks.
const (
	ProtocolRealtime = "realtime" // OpenAI's Realtime API: /realtime?model=
	ProtocolLive     = "live"     // GPT-Live: /live/sessions, the model in session.start
	// ProtocolTranslation is Realtime translation: /realtime/translations?model=
	// (IsTranslationModel).
	ProtocolTranslation = "translation"
)

// IsLiveModel reports whether model (a provider prefix and a dated suffix
// looked through) is a GPT-Live model: gpt-live-1, gpt-live-1.1, ... but not
// gpt-live-transcribe, a per-minute transcription model of the Realtime API.
func IsLiveModel(model string) bool {
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	return strings.HasPrefix(model, "gpt-live-") && !strings.HasPrefix(model, "gpt-live-transcribe")
}

// MasterKeyName is the ClientKey name of the master key, for limits and
// logs.
const MasterKeyName = "master"

// Deployment is one upstream for a model group.
type Deployment struct {
	// Name is a stable id for logs, metrics and health: "<group>/<index in
	// the group>@<host>". It holds nothing secret.
	Name  string
	Group string // the model name clients ask for
	Kind  string // KindOpenAI, KindAzure, KindXAI, KindGemini or KindVertex
	// Base is the ws:// or wss:// base: for OpenAI the API root (/realtime
	// is appended), for Azure the resource root (Azure's paths are
	// appended).
	Base *url.URL
	// Model is the upstream model (OpenAI) or deployment name (Azure).
	Model string
	// Protocol is ProtocolRealtime or ProtocolLive: which client route
	// serves the deployment's group, and which upstream path it dials
	// (/realtime, or /live/sessions; Azure /openai/v1/live/sessions).
	Protocol string
	// APIVersion, for Azure only, selects the preview form
	// /openai/realtime?api-version=V&deployment=D; empty means the GA form
	// /openai/v1/realtime?model=D.
	APIVersion string
	// Prices are what sessions on this deployment are charged per token:
	// the built-in prices of Model (or of model_info's base_model),
	// overridden field by field by model_info's prices. Priced is false
	// when nothing prices the deployment (its sessions cost 0).
	Prices spend.Prices
	Priced bool
	// SecondPrice is what a second of session time costs, in USD (GPT-Live:
	// the built-in price of Model, or model_info's input_cost_per_second).
	SecondPrice float64
	// RPM (litellm_params.rpm) bounds connects a minute to this deployment
	// and MaxSessions (max_parallel_requests) its live sessions; 0 is no
	// limit.
	RPM         float64
	MaxSessions int
	// Weight (litellm_params.weight) and TPM (tpm) weigh simple-shuffle
	// routing; 0 is none.
	Weight, TPM float64
	// LogTranscripts (litellm_params.log_transcripts) keeps the
	// conversation record of sessions that start on this deployment, unless
	// their key says otherwise (ClientKey.LogTranscripts).
	LogTranscripts bool
	// RecordSessions (litellm_params.record_sessions) records the audio
	// and events of sessions that start on this deployment, unless their
	// key says otherwise (ClientKey.RecordSessions; server/recording).
	RecordSessions bool

	header http.Header   // upstream credentials; never logged
	path   string        // Base.Path plus the kind's and protocol's path
	vertex *vertexConfig // KindVertex's project, location and token source; nil otherwise
}

func newDeployment(group string, index int, kind string, base *url.URL, model, apiVersion string, header http.Header) *Deployment {
	d := &Deployment{
		Name: fmt.Sprintf("%s/%d@%s", group, index, base.Host), Group: group, Kind: kind,
		Base: base, Model: model, APIVersion: apiVersion, header: header,
	}
	d.Prices, d.Priced = spend.ModelInfo{}.Resolve(model)
	if sp, ok := (spend.ModelInfo{}).SecondPrice(model); ok {
		d.SecondPrice, d.Priced = sp, true
	}
	protocol := ProtocolRealtime
	if IsLiveModel(model) {
		protocol = ProtocolLive
	} else if IsTranslationModel(model) {
		protocol = ProtocolTranslation
	}
	d.setProtocol(protocol)
	return d
}

// setProtocol sets the protocol the deployment speaks, and with it its
// upstream path.
func (d *Deployment) setProtocol(p string) {
	d.Protocol = p
	base := d.Base.Path
	switch {
	case p == ProtocolLive && d.Kind == KindAzure:
		d.path = base + "/openai/v1/live/sessions"
	case p == ProtocolLive:
		d.path = base + "/live/sessions"
	case p == ProtocolTranslation && d.Kind == KindAzure:
		d.path = base + "/openai/v1/realtime/translations"
	case p == ProtocolTranslation:
		d.path = base + "/realtime/translations"
	case d.Kind == KindAzure && d.APIVersion != "":
		d.path = base + "/openai/realtime"
	case d.Kind == KindAzure:
		d.path = base + "/openai/v1/realtime"
	case d.Kind == KindGemini:
		d.path = base + geminiLivePath
	case d.Kind == KindVertex:
		d.path = base + vertexLivePath
	default:
		d.path = base + "/realtime"
	}
}

// String, GoString and LogValue show only the name, so that printing or
// logging a Deployment cannot leak its credentials.
func (d Deployment) String() string       { return d.Name }
func (d Deployment) GoString() string     { return "routes.Deployment{" + d.Name + "}" }
func (d Deployment) LogValue() slog.Value { return slog.StringValue(d.Name) }

// Address is where a session for a client's query connects: the URL and the
// headers (the deployment's credential among them). The client's
// other parameters (intent, call_id, anything else) pass through; model,
// deployment and api-version, which say where the session goes, are the
// gateway's to set. As the gateway does for a single upstream, the
// deployment's model is named when the client named one or connected with
// neither call_id nor intent (a call_id or transcription socket may carry no
// model). Both are fresh: callers may add headers. An address carrying the
// client's other parameters is forwarded as asked, and so is never served
// from the warm pool (upstream.Poolable). The session turns it into a dial
// target; the configuration does no I/O and knows nothing of dialing.
func (d *Deployment) Address(clientQuery url.Values) (*url.URL, http.Header) {
	q := make(url.Values, len(clientQuery)+2)
	for k, v := range clientQuery {
		switch k {
		case "model", "deployment", "api-version",
			"guardrails": // the gateway's own (GuardrailsFor), never the upstream's
			continue
		}
		q[k] = append([]string(nil), v...)
	}
	named := d.Protocol != ProtocolLive &&
		(clientQuery.Get("model") != "" || (clientQuery.Get("call_id") == "" && clientQuery.Get("intent") == ""))
	if d.Kind == KindAzure && d.APIVersion != "" {
		q.Set("api-version", d.APIVersion)
		if named {
			q.Set("deployment", d.Model)
		}
	} else if d.Kind == KindGemini || d.Kind == KindVertex {
		q = url.Values{} // the model is in the setup; nothing of the client's query means anything to Gemini
	} else if named {
		q.Set("model", d.Model)
	}
	u := *d.Base
	u.Path, u.RawPath = d.path, ""
	u.RawQuery = q.Encode()

	h := d.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("User-Agent", "rtgate")
	return &u, h
}

// ClientKey is a key clients present to the gateway.
type ClientKey struct {
	Name string
	hash keyHash
	// Models are the model groups the key may use; empty (or "*") means
	// all of them.
	Models []string
	// MaxSessions and ConnectRate (connects per second) limit this key;
	// 0 means the key sets no limit of its own.
	MaxSessions int
	ConnectRate float64
	// Budget is the key's spending limit (max_budget, budget_duration);
	// Budget.Max 0 means none.
	Budget spend.Budget
	// Sideband is SidebandAny for a key that may attach (?call_id=) to
	// calls the gateway did not make; empty or SidebandOwn means only to
	// its own calls.
	Sideband string
	// Continuity, when set, turns session continuity on or off for this
	// key's sessions (continuity: false); nil follows SESSION_CONTINUITY.
	Continuity *bool
	// ContinuityKeepAudio, when set, turns the keeping of the user's audio
	// itself on or off for this key's sessions (continuity_keep_audio);
	// nil follows CONTINUITY_KEEP_AUDIO.
	ContinuityKeepAudio *bool
	// LogTranscripts, when set, keeps (or never keeps) the conversation
	// record of this key's sessions, whatever their deployment says
	// (log_transcripts).
	LogTranscripts *bool
	// RecordSessions, when set, records (or never records) the audio and
	// events of this key's sessions, whatever their deployment says
	// (record_sessions).
	RecordSessions *bool
	// TranscriptionModel is what a Realtime session of this key gets when
	// it asks for input transcription on a model its Models list does not
	// name (transcription_model): TranscriptionRewrite (the default, "")
	// puts the gateway's configured transcription model in its place;
	// TranscriptionRefuse does that too and tells the client with an error
	// event.
	TranscriptionModel string
	// MaxSessionSecs, when above 0, caps this key's sessions (the
	// gateway's own cap; max_session_secs), instead of MAX_SESSION_SECS.
	MaxSessionSecs int
	// Guardrails names the guardrails this key's sessions run beyond the
	// default ones (guardrails).
	Guardrails []string
}

// Sideband settings of a key.
const (
	SidebandOwn = "own"
	SidebandAny = "any"
)

// Master returns the master key, or nil when none is set.
func (t *Table) Master() *ClientKey { return t.master }

// The values of a key's transcription_model.
const (
	TranscriptionRewrite = "rewrite"
	TranscriptionRefuse  = "refuse"
)

// Allows reports whether the key may open sessions on the model group.
func (k *ClientKey) Allows(group string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, "*") || slices.Contains(k.Models, group)
}

// keyHash is a key reduced to a fixed-size digest, so that comparisons take
// the same time whatever the key's length or content, and so that the table
// holds no key in the clear.
type keyHash [sha256.Size]byte

func hashKey(k string) keyHash { return sha256.Sum256([]byte(k)) }

// Table is the gateway's routing table: model groups and client keys.
type Table struct {
	// Groups maps the model name a client asks for to its deployments.
	Groups map[string][]*Deployment
	// Default is the group for a Realtime client that names no model: the
	// first Realtime model_list entry's (the configured model on the
	// environment path). GPT-Live has no default: session.start names its
	// model.
	Default string
	// Keys are the client keys, in file order; the master key is not
	// among them.
	Keys []*ClientKey
	// Notices are what the gateway says once at start-up (and reload)
	// about the file: LiteLLM fields it ignores, entries it does not serve.
	Notices []string
	// Router is router_settings' routing strategy.
	Router Router
	// Transcripts is the conversation record's settings (transcripts:).
	Transcripts Transcripts
	// Guardrails are the configured guardrails by name (guardrails:);
	// GuardrailsFor picks a session's.
	Guardrails     map[string]*guardrail.Guardrail
	guardrailOrder []string // their names in file order

	master *ClientKey // nil when no master key is set
}

// Authenticate finds the client key key belongs to. It compares SHA-256
// digests with subtle.ConstantTimeCompare and always visits every key, so
// its timing says nothing about how much of a key was right, or which key
// matched. The master key yields a ClientKey named "master" that may use
// every model.
func (t *Table) Authenticate(key string) (*ClientKey, bool) {
	if key == "" {
		return nil, false
	}
	h := hashKey(key)
	var found *ClientKey
	check := func(k *ClientKey) {
		if subtle.ConstantTimeCompare(k.hash[:], h[:]) == 1 && found == nil {
			found = k
		}
	}
	if t.master != nil {
		check(t.master)
	}
	for _, k := range t.Keys {
		check(k)
	}
	return found, found != nil
}

// Current is the key of t that k is now: the key of the same name and the
// same secret, nil when a reload removed k or changed its secret (k is
// revoked). It is how a live session reads the limits and budget in force.
func (t *Table) Current(k *ClientKey) *ClientKey {
	if t.master != nil && t.master.Name == k.Name {
		if t.master.hash == k.hash {
			return t.master
		}
		return nil
	}
	for _, c := range t.Keys {
		if c.Name == k.Name {
			if c.hash == k.hash {
				return c
			}
			return nil
		}
	}
	return nil
}

// KeyNamed finds a client key by name, the master key included (nil if
// none): who a client secret or a call owner names.
func (t *Table) KeyNamed(name string) *ClientKey {
	if name == MasterKeyName {
		return t.Master()
	}
	for _, k := range t.Keys {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// Protocol is the protocol group g's deployments speak ("" for no such
// group). A group never mixes protocols (Load refuses it).
func (t *Table) Protocol(g string) string {
	if ds := t.Groups[g]; len(ds) > 0 {
		return ds[0].Protocol
	}
	return ""
}

// Single is the zero-config table: the Realtime group model and, unless
// liveModel is empty, the GPT-Live group liveModel, both going to the
// OpenAI-style upstream at base (wss://api.openai.com/v1 when nil: /realtime
// and /live/sessions under it) with upstreamKey as Bearer (nothing when it is
// empty), and masterKey as the only client key (none when it is empty, which
// refuses everyone). The server builds it from OPENAI_REALTIME_MODEL,
// LIVE_MODEL, OPENAI_API_BASE, OPENAI_API_KEY and LITELLM_MASTER_KEY.
func Single(model, liveModel string, base *url.URL, upstreamKey, masterKey string) *Table {
	if base == nil {
		base, _ = ParseAPIBase(defaultAPIBase)
	}
	h := http.Header{}
	if upstreamKey != "" {
		h.Set("Authorization", "Bearer "+upstreamKey)
	}
	d := newDeployment(model, 0, KindOpenAI, base, model, "", h)
	d.setProtocol(ProtocolRealtime) // whatever its name: OPENAI_REALTIME_MODEL is the Realtime model
	t := &Table{Groups: map[string][]*Deployment{model: {d}}, Default: model, Router: DefaultRouter()}
	if liveModel != "" && liveModel != model {
		ld := newDeployment(liveModel, 0, KindOpenAI, base, liveModel, "", h.Clone())
		ld.setProtocol(ProtocolLive)
		t.Groups[liveModel] = []*Deployment{ld}
	}
	if masterKey != "" {
		t.master = &ClientKey{Name: MasterKeyName, hash: hashKey(masterKey)}
	}
	return t
}

// xAIAPIBase is xAI's API root, for xai/ deployments that name no
// api_base: the Voice Agent API is wss://api.x.ai/v1/realtime.
const xAIAPIBase = "https://api.x.ai/v1"

// geminiAPIBase and geminiLivePath are AI Studio's Live API endpoint
// (ai.google.dev/api/live): wss://generativelanguage.googleapis.com/ws/
// google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent.
const (
	geminiAPIBase  = "https://generativelanguage.googleapis.com"
	geminiLivePath = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
)

// Translated reports whether the deployment's provider speaks a protocol
// other than OpenAI's, which the gateway translates (Gemini, on AI Studio or
// Vertex AI): its socket cannot be warmed (the setup carries the client's
// configuration), and a session on it is not resumed or rolled over by the
// gateway.
func (d *Deployment) Translated() bool { return d.Kind == KindGemini || d.Kind == KindVertex }

// UpstreamModel is the model as the provider's protocol names it: Gemini's
// resource name (models/<model>) for Gemini, Vertex AI's
// (projects/P/locations/L/publishers/google/models/<model>) for Vertex, the
// model otherwise.
func (d *Deployment) UpstreamModel() string {
	switch {
	case d.Kind == KindGemini:
		return "models/" + d.Model
	case d.Kind == KindVertex && d.vertex != nil:
		return d.vertexModel()
	}
	return d.Model
}

// HasWebRTC reports whether the deployment's provider takes WebRTC calls
// (/realtime/calls): OpenAI's and Azure's do, xAI and Gemini have none.
func (d *Deployment) HasWebRTC() bool { return d.Kind == KindOpenAI || d.Kind == KindAzure }

// BilledByTime reports whether the deployment's provider bills a Realtime
// session by its connection time (xAI: per minute) rather than by tokens:
// its record's seconds are then the session's wall clock, priced at
// SecondPrice.
func (d *Deployment) BilledByTime() bool { return d.Kind == KindXAI }

// defaultAPIBase is OpenAI's, for deployments that name no api_base.
const defaultAPIBase = "wss://api.openai.com/v1"

// ParseAPIBase accepts ws://, wss://, http:// and https:// base URLs (the
// http forms are what LiteLLM configs usually hold) and returns the WebSocket
// form.
func ParseAPIBase(v string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(v, "/"))
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %w", v, err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return nil, fmt.Errorf("%q: scheme must be ws, wss, http or https", v)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q has no host", v)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: a base URL takes no query or fragment", v)
	}
	return u, nil
}
