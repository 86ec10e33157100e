package routes

// The routes config file (CONFIG_FILE or -config) is checked completely at
// start-up and on reload: unknown fields, unset environment variables, bad
// URLs and malformed hashes are all reported at once, each as
// "file:line: field: problem". Secrets (keys, and the values of the
// environment variables that hold them) never appear in those messages.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"rtgate/server/providers/vertexauth"
)

// envPrefix marks a value read from the environment, as in LiteLLM.
const envPrefix = "os.environ/"

// Load reads the routes config file at path; lookup reads the environment
// (os.LookupEnv in the binary). Every problem found is reported, joined,
// each naming the file, line and field.
//
// Environment fallbacks, as in LiteLLM: without general_settings.master_key
// the master key is LITELLM_MASTER_KEY (if set); a model without api_key uses
// OPENAI_API_KEY (openai/), AZURE_API_KEY (azure/) or XAI_API_KEY (xai/) if
// set. An openai/ model
// with no key at all sends no Authorization (a local test upstream); an
// azure/ one is an error. A vertex_ai/ model takes no key: its Google Cloud
// credentials and project (vertex.go).
func Load(path string, lookup func(string) (string, bool)) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the config file is empty", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: the file holds more than one YAML document (a second --- line?)", path, extra.Line)
	}
	l := &loader{file: path, lookup: lookup, groups: map[string]bool{}}
	t := l.table(doc.Content[0])
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return t, nil
}

// loader holds what checking one file needs: the problems found so far (all
// are reported, not only the first) and the model groups seen.
type loader struct {
	file   string
	lookup func(string) (string, bool)
	errs   []error
	// groups are the model names of model_list, including those of
	// entries with errors, so that keys referring to them are not
	// reported twice.
	groups map[string]bool
	// ignored are LiteLLM fields accepted and ignored, with their lines;
	// skipped the model_list entries not served (notServed).
	ignored map[string][]int
	skipped []string
	// vertexAuth holds the vertex_ai/ deployments' token sources, one
	// per distinct credentials (nil until the first).
	vertexAuth *vertexauth.Sources
}

func (l *loader) fail(n *yaml.Node, field, format string, args ...any) {
	if field == "" {
		field = "top level"
	}
	l.errs = append(l.errs, fmt.Errorf("%s:%d: %s: %s", l.file, n.Line, field, fmt.Sprintf(format, args...)))
}

// join builds a field's path, e.g. model_list[0].litellm_params.model.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// table checks the whole document.
func (l *loader) table(root *yaml.Node) *Table {
	var doc fileDoc
	if !l.decodeMapping(root, "", &doc) {
		return nil
	}
	t := &Table{Groups: map[string][]*Deployment{}}

	if !given(&doc.ModelList) {
		l.fail(root, "", "model_list is missing: the file must list at least one model")
	} else {
		l.modelList(&doc.ModelList, "model_list", t)
		if len(t.Groups) == 0 && len(l.skipped) > 0 && len(l.errs) == 0 {
			l.fail(&doc.ModelList, "model_list", "no entry is a Realtime or GPT-Live model rtgate serves: %s", strings.Join(l.skipped, "; "))
		}
	}

	hashes := map[keyHash]string{} // to refuse one key given twice
	masterSet := false
	if given(&doc.GeneralSettings) {
		var gs generalSettings
		if l.decodeMapping(&doc.GeneralSettings, "general_settings", &gs) {
			l.noteIgnored(&gs)
		}
		if given(&gs.MasterKey) {
			masterSet = true
			if v, ok := l.env(&gs.MasterKey, "general_settings.master_key"); ok {
				t.master = &ClientKey{Name: MasterKeyName, hash: hashKey(v)}
			}
		}
	}
	if !masterSet {
		if v, _ := l.lookup("LITELLM_MASTER_KEY"); v != "" {
			t.master = &ClientKey{Name: MasterKeyName, hash: hashKey(v)}
		}
	}
	if t.master != nil {
		hashes[t.master.hash] = "the master key"
	}

	l.guardrails(&doc.Guardrails, "guardrails", t) // before the keys, which name them
	if given(&doc.Keys) {
		l.keys(&doc.Keys, "keys", t, hashes)
	}
	if t.master == nil && len(t.Keys) == 0 && len(l.errs) == 0 {
		l.fail(root, "", "no client can connect: add a keys section or general_settings.master_key (or set LITELLM_MASTER_KEY)")
	}
	l.router(&doc.RouterSettings, "router_settings", t)
	l.transcripts(&doc.Transcripts, "transcripts", t)
	t.Notices = l.notices()
	return t
}

// boolean reads an optional true-or-false field: nil when absent.
func (l *loader) boolean(n *yaml.Node, path string) *bool {
	if !given(n) {
		return nil
	}
	s, ok := l.str(n, path)
	if !ok {
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		l.fail(deref(n), path, "%q is not true or false", s)
	}
	return &b
}

// wholeNumber reads an optional field holding a whole number of at least 0
// into dst; format is the error, given the field's text.
func (l *loader) wholeNumber(n *yaml.Node, path string, dst *int, format string) {
	if !given(n) {
		return
	}
	if s, ok := l.str(n, path); ok {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			l.fail(deref(n), path, format, s)
		}
		*dst = v
	}
}

// number reads an optional field holding a finite number of at least 0 into
// dst; format is the error, given the field's text.
func (l *loader) number(n *yaml.Node, path string, dst *float64, format string) {
	if !given(n) {
		return
	}
	if s, ok := l.str(n, path); ok {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			l.fail(deref(n), path, format, s)
		}
		*dst = v
	}
}

// str returns a required scalar's text.
func (l *loader) str(n *yaml.Node, path string) (string, bool) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode {
		l.fail(n, path, "must be a single value, not %s", kindName(n))
		return "", false
	}
	if n.ShortTag() == "!!null" || n.Value == "" {
		l.fail(n, path, "is empty")
		return "", false
	}
	if hasControl(n.Value) {
		l.fail(n, path, "holds a line break or other control character")
		return "", false
	}
	return n.Value, true
}

// hasControl reports control characters, which no key, name or URL holds
// and which must not reach an HTTP header.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// env returns a scalar's text, reading it from the environment when written
// as os.environ/NAME. A named variable must be set and not empty. Values are
// never quoted in errors: they may be secrets.
func (l *loader) env(n *yaml.Node, path string) (string, bool) {
	s, ok := l.str(n, path)
	if !ok {
		return "", false
	}
	n = deref(n)
	name, isEnv := strings.CutPrefix(s, envPrefix)
	if !isEnv {
		return s, true
	}
	if name == "" {
		l.fail(n, path, "%s needs a variable name after the slash", envPrefix)
		return "", false
	}
	v, set := l.lookup(name)
	switch {
	case !set:
		l.fail(n, path, "environment variable %s is not set", name)
		return "", false
	case v == "":
		l.fail(n, path, "environment variable %s is empty", name)
		return "", false
	case hasControl(v):
		l.fail(n, path, "environment variable %s holds a line break or other control character", name)
		return "", false
	}
	return v, true
}

// list returns the items of a list field; what names them in the error
// ("models", "keys").
func (l *loader) list(n *yaml.Node, path, what string) ([]*yaml.Node, bool) {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		l.fail(n, path, "must be a list of %s, not %s", what, kindName(n))
		return nil, false
	}
	return n.Content, true
}

func (l *loader) modelList(n *yaml.Node, path string, t *Table) {
	items, ok := l.list(n, path, "models")
	if !ok {
		return
	}
	if len(items) == 0 {
		l.fail(deref(n), path, "is empty: the file must list at least one model")
		return
	}
	for i, item := range items {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		var e modelEntry
		if !l.decodeMapping(item, itemPath, &e) {
			continue
		}
		if !given(&e.ModelName) {
			l.fail(deref(item), itemPath, "model_name is missing")
			continue
		}
		namePath := join(itemPath, "model_name")
		group, ok := l.str(&e.ModelName, namePath)
		if !ok {
			continue
		}
		l.groups[group] = true
		if group == "*" {
			l.fail(deref(&e.ModelName), namePath, `"*" is not a model name (in keys it means every model)`)
			continue
		}
		if !given(&e.LiteLLMParams) {
			l.fail(deref(item), itemPath, "litellm_params is missing")
			continue
		}
		if l.notServed(&e, itemPath, group) {
			continue
		}
		d := l.deployment(&e.LiteLLMParams, join(itemPath, "litellm_params"), group, len(t.Groups[group]))
		if d == nil {
			continue
		}
		if given(&e.ModelInfo) && !l.modelInfo(&e.ModelInfo, join(itemPath, "model_info"), d) {
			continue
		}
		if !l.protocolOf(&e, itemPath, d) {
			continue
		}
		if others := t.Groups[group]; len(others) > 0 && others[0].Protocol != d.Protocol {
			l.fail(deref(item), itemPath, "model group %q mixes Realtime and GPT-Live deployments (%s is %s, %s is %s): give each protocol its own model_name",
				group, others[0].Name, others[0].Protocol, d.Name, d.Protocol)
			continue
		}
		if t.Default == "" && d.Protocol == ProtocolRealtime {
			t.Default = group
		}
		t.Groups[group] = append(t.Groups[group], d)
	}
}

// deployment reads one litellm_params block.
func (l *loader) deployment(n *yaml.Node, path, group string, index int) *Deployment {
	var p litellmParams
	if !l.decodeMapping(n, path, &p) {
		return nil
	}
	n = deref(n)
	before := len(l.errs)
	// kind stays "" when the model is unusable; the other fields are
	// still checked, so that every problem is reported at once.
	var kind, model string
	if !given(&p.Model) {
		l.fail(n, path, "model is missing (openai/<model>, azure/<deployment>, xai/<model>, gemini/<model> or vertex_ai/<model>)")
	} else if spec, ok := l.str(&p.Model, join(path, "model")); ok {
		var known bool
		switch kind, model, known = splitModel(spec); {
		case !known:
			l.fail(deref(&p.Model), join(path, "model"), "%q: unknown provider prefix %q; rtgate serves openai/<model> (or a bare model name), azure/<deployment>, xai/<model>, gemini/<model> and vertex_ai/<model>",
				spec, spec[:strings.IndexByte(spec, '/')])
		case model == "":
			kind = ""
			l.fail(deref(&p.Model), join(path, "model"), "%q names no model after the provider prefix", spec)
		}
	}

	apiVersion := ""
	if given(&p.APIVersion) {
		apiVersion, _ = l.env(&p.APIVersion, join(path, "api_version"))
		if kind != KindAzure {
			l.fail(deref(&p.APIVersion), join(path, "api_version"), "api_version applies to azure/ models only")
		}
	}

	var base *url.URL
	basePath := join(path, "api_base")
	if given(&p.APIBase) {
		if s, ok := l.env(&p.APIBase, basePath); ok {
			base = l.parseBase(&p.APIBase, basePath, s)
		}
	} else if kind == KindAzure {
		l.fail(n, path, "azure/ models need api_base (https://RESOURCE.openai.azure.com)")
	} else if kind == KindOpenAI {
		base, _ = ParseAPIBase(defaultAPIBase)
	} else if kind == KindXAI {
		base, _ = ParseAPIBase(xAIAPIBase)
	} else if kind == KindGemini {
		base, _ = ParseAPIBase(geminiAPIBase)
	}
	if base != nil && kind == KindAzure {
		// api_base names the resource; Azure's paths are added per form.
		// Accept a base already ending in them, as some configs write it.
		switch trimmed := strings.TrimRight(base.Path, "/"); {
		case strings.HasSuffix(trimmed, "/openai/v1"):
			if apiVersion != "" {
				l.fail(deref(&p.APIBase), basePath, "ends in /openai/v1 (the GA API) but api_version asks for the preview API: drop one of them")
			}
			base.Path = strings.TrimSuffix(trimmed, "/openai/v1")
		case strings.HasSuffix(trimmed, "/openai"):
			base.Path = strings.TrimSuffix(trimmed, "/openai")
		default:
			base.Path = trimmed
		}
	}

	key := ""
	if given(&p.APIKey) {
		key, _ = l.env(&p.APIKey, join(path, "api_key"))
		if kind == KindVertex {
			l.fail(deref(&p.APIKey), join(path, "api_key"), "vertex_ai/ models authenticate with vertex_credentials (or Application Default Credentials), not api_key")
		}
	} else if kind != "" && kind != KindVertex {
		fallback := "OPENAI_API_KEY"
		switch kind {
		case KindAzure:
			fallback = "AZURE_API_KEY"
		case KindXAI:
			fallback = "XAI_API_KEY"
		case KindGemini:
			fallback = "GEMINI_API_KEY"
		}
		key, _ = l.lookup(fallback)
		if key == "" && kind == KindAzure {
			l.fail(n, path, "azure/ models need api_key (os.environ/NAME), or AZURE_API_KEY set")
		}
		if key == "" && kind == KindGemini {
			l.fail(n, path, "gemini/ models need api_key (os.environ/NAME), or GEMINI_API_KEY set")
		}
	}
	var vertex *vertexConfig
	if kind == KindVertex {
		vertex, base = l.vertex(&p, n, path, base)
	} else {
		for _, f := range vertexFields(&p) {
			if given(f.n) {
				l.fail(deref(f.n), join(path, f.name), "%s applies to vertex_ai/ models only", f.name)
			}
		}
	}
	if len(l.errs) > before || kind == "" || base == nil {
		return nil
	}
	h := http.Header{}
	switch {
	case key == "":
	case kind == KindAzure:
		h.Set("Api-Key", key)
	case kind == KindGemini:
		h.Set("X-Goog-Api-Key", key) // a header, not ?key=: URLs reach logs
	default:
		h.Set("Authorization", "Bearer "+key)
	}
	if vertex != nil && vertex.quotaProject != "" {
		h.Set("X-Goog-User-Project", vertex.quotaProject)
	}
	d := newDeployment(group, index, kind, base, model, apiVersion, h)
	d.vertex = vertex
	l.litellmExtras(&p, path, d)
	return d
}

// parseBase checks an api_base. URLs carrying credentials are refused
// without quoting them.
func (l *loader) parseBase(n *yaml.Node, path, s string) *url.URL {
	n = deref(n)
	if u, err := url.Parse(s); err == nil && u.User != nil {
		l.fail(n, path, "must not carry credentials (user:password@); put the key in api_key")
		return nil
	}
	u, err := ParseAPIBase(s)
	if err != nil {
		l.fail(n, path, "%v", err)
		return nil
	}
	return u
}

// splitModel reads LiteLLM's model spelling: "azure/<deployment>",
// "openai/<model>", "xai/<model>", "gemini/<model>", "vertex_ai/<model>"
// (or LiteLLM's "vertex_ai_beta/<model>", the same API) or a bare "<model>"
// (OpenAI). ok is false
// for any other provider prefix.
func splitModel(spec string) (kind, model string, ok bool) {
	prefix, rest, found := strings.Cut(spec, "/")
	switch {
	case !found:
		return KindOpenAI, spec, true
	case prefix == "openai":
		return KindOpenAI, rest, true
	case prefix == "azure":
		return KindAzure, rest, true
	case prefix == "xai":
		return KindXAI, rest, true
	case prefix == "gemini":
		return KindGemini, rest, true
	case prefix == "vertex_ai" || prefix == "vertex_ai_beta":
		return KindVertex, rest, true
	}
	return "", "", false
}

func (l *loader) keys(n *yaml.Node, path string, t *Table, hashes map[keyHash]string) {
	items, ok := l.list(n, path, "keys")
	if !ok {
		return
	}
	names := map[string]int{} // name -> line
	for i, item := range items {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		var e keyEntry
		if !l.decodeMapping(item, itemPath, &e) {
			continue
		}
		item = deref(item)
		before := len(l.errs)
		k := &ClientKey{}
		if !given(&e.Name) {
			l.fail(item, itemPath, "name is missing")
		} else if name, ok := l.str(&e.Name, join(itemPath, "name")); ok {
			line := deref(&e.Name).Line
			switch first, dup := names[name]; {
			case dup:
				l.fail(deref(&e.Name), join(itemPath, "name"), "the name %q is already used on line %d", name, first)
			case name == MasterKeyName:
				l.fail(deref(&e.Name), join(itemPath, "name"), "the name %q is reserved for the master key", name)
			default:
				names[name] = line
				k.Name = name
			}
		}

		switch hashPath, keyPath := join(itemPath, "key_hash"), join(itemPath, "key"); {
		case given(&e.KeyHash) && given(&e.Key):
			l.fail(item, itemPath, "give key_hash or key, not both")
		case given(&e.KeyHash):
			if s, ok := l.str(&e.KeyHash, hashPath); ok {
				// Not quoted in errors: a key pasted here by mistake
				// must not end up in logs.
				b, err := hex.DecodeString(s)
				switch {
				case err != nil || len(b) != sha256.Size:
					l.fail(deref(&e.KeyHash), hashPath, "must be 64 hexadecimal characters, the SHA-256 of the key (printf %%s \"$KEY\" | sha256sum)")
				case [sha256.Size]byte(b) == sha256.Sum256(nil):
					l.fail(deref(&e.KeyHash), hashPath, "is the SHA-256 of an empty key")
				default:
					k.hash = keyHash(b)
				}
			}
		case given(&e.Key):
			if s, ok := l.str(&e.Key, keyPath); ok && !strings.HasPrefix(s, envPrefix) {
				l.fail(deref(&e.Key), keyPath, "write the key as %sNAME, or give key_hash instead: keys are not kept in the file", envPrefix)
			} else if v, ok := l.env(&e.Key, keyPath); ok {
				k.hash = hashKey(v)
			}
		default:
			l.fail(item, itemPath, "key_hash or key is missing")
		}

		if given(&e.Models) {
			k.Models = l.modelRefs(&e.Models, join(itemPath, "models"))
		}
		l.wholeNumber(&e.MaxSessions, join(itemPath, "max_sessions"), &k.MaxSessions,
			"%q is not a whole number of at least 0")
		l.number(&e.ConnectRate, join(itemPath, "connect_rate"), &k.ConnectRate,
			"%q is not a rate of connects per second (a number of at least 0)")
		l.budget(&e, itemPath, k)
		if given(&e.Sideband) {
			p := join(itemPath, "sideband")
			if s, ok := l.str(&e.Sideband, p); ok {
				switch s {
				case SidebandOwn, SidebandAny:
					k.Sideband = s
				default:
					l.fail(deref(&e.Sideband), p, "%q is not %q or %q", s, SidebandOwn, SidebandAny)
				}
			}
		}
		k.Continuity = l.boolean(&e.Continuity, join(itemPath, "continuity"))
		k.ContinuityKeepAudio = l.boolean(&e.ContinuityKeepAudio, join(itemPath, "continuity_keep_audio"))
		k.LogTranscripts = l.boolean(&e.LogTranscripts, join(itemPath, "log_transcripts"))
		k.RecordSessions = l.boolean(&e.RecordSessions, join(itemPath, "record_sessions"))
		if given(&e.Guardrails) {
			k.Guardrails = l.keyGuardrails(&e.Guardrails, join(itemPath, "guardrails"), t)
		}
		if given(&e.TranscriptionModel) {
			p := join(itemPath, "transcription_model")
			if s, ok := l.str(&e.TranscriptionModel, p); ok {
				if s != TranscriptionRewrite && s != TranscriptionRefuse {
					l.fail(deref(&e.TranscriptionModel), p, "%q is not rewrite or refuse", s)
				}
				k.TranscriptionModel = s
			}
		}
		l.wholeNumber(&e.MaxSessionSecs, join(itemPath, "max_session_secs"), &k.MaxSessionSecs,
			"%q is not a whole number of seconds of at least 0")
		if len(l.errs) > before {
			continue
		}
		if other, dup := hashes[k.hash]; dup {
			l.fail(item, itemPath, "the same key as %s", other)
			continue
		}
		hashes[k.hash] = "key " + strconv.Quote(k.Name)
		t.Keys = append(t.Keys, k)
	}
}

// modelRefs reads a key's models list; each must be a model group of the
// file, or "*".
func (l *loader) modelRefs(n *yaml.Node, path string) []string {
	return l.names(n, path, "model names", func(s string) bool { return l.groups[s] || s == "*" },
		"%q is not a model_name in model_list")
}

// names reads a list of names (what names them in the error), each of
// which known must accept; unknown is the error for one it does not,
// given the name.
func (l *loader) names(n *yaml.Node, path, what string, known func(string) bool, unknown string) []string {
	items, ok := l.list(n, path, what)
	if !ok {
		return nil
	}
	var out []string
	for i, item := range items {
		s, ok := l.str(item, fmt.Sprintf("%s[%d]", path, i))
		if !ok {
			continue
		}
		if !known(s) {
			l.fail(deref(item), path, unknown, s)
			continue
		}
		out = append(out, s)
	}
	return out
}
