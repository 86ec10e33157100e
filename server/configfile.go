package server

// The config file (CONFIG_FILE or -config) describes where sessions go and who
// may open them. Its shape is the one users already write for LiteLLM's
// proxy: a model_list of deployments grouped by model_name, plus
// general_settings.master_key; rtgate adds a keys section for client keys.
// The environment variables stay the zero-config path: RoutesFromConfig
// builds the same Routes from them.
//
// The file is checked completely at start-up: unknown fields, unset
// environment variables, bad URLs and malformed hashes are all reported at
// once, each as "file:line: field: problem". Secrets (keys, and the values of
// the environment variables that hold them) never appear in those messages.

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"rtgate/upstream"
)

// Upstream kinds.
const (
	KindOpenAI = "openai" // Authorization: Bearer, /realtime?model=
	KindAzure  = "azure"  // api-key header, Azure's /openai/... paths
)

// masterKeyName is the ClientKey name of the master key, for limits and logs.
const masterKeyName = "master"

// envPrefix marks a value read from the environment, as in LiteLLM.
const envPrefix = "os.environ/"

// Deployment is one upstream for a model group.
type Deployment struct {
	// Name is a stable id for logs and metrics: "<group>/<index in the
	// group>@<host>". It holds nothing secret.
	Name  string
	Group string // the model name clients ask for
	Kind  string // KindOpenAI or KindAzure
	// Base is the ws:// or wss:// base: for OpenAI the API root (/realtime
	// is appended), for Azure the resource root (Azure's paths are
	// appended).
	Base *url.URL
	// Model is the upstream model (OpenAI) or deployment name (Azure).
	Model string
	// APIVersion, for Azure only, selects the preview form
	// /openai/realtime?api-version=V&deployment=D; empty means the GA form
	// /openai/v1/realtime?model=D.
	APIVersion string

	header http.Header // upstream credentials; never logged
	path   string      // Base.Path plus the kind's realtime path
}

func newDeployment(group string, index int, kind string, base *url.URL, model, apiVersion string, header http.Header) *Deployment {
	d := &Deployment{
		Name: fmt.Sprintf("%s/%d@%s", group, index, base.Host), Group: group, Kind: kind,
		Base: base, Model: model, APIVersion: apiVersion, header: header,
	}
	switch {
	case kind == KindAzure && apiVersion != "":
		d.path = base.Path + "/openai/realtime"
	case kind == KindAzure:
		d.path = base.Path + "/openai/v1/realtime"
	default:
		d.path = base.Path + "/realtime"
	}
	return d
}

// String, GoString and LogValue show only the name, so that printing or
// logging a Deployment cannot leak its credentials.
func (d Deployment) String() string       { return d.Name }
func (d Deployment) GoString() string     { return "server.Deployment{" + d.Name + "}" }
func (d Deployment) LogValue() slog.Value { return slog.StringValue(d.Name) }

// Target builds the upstream connect for a client's query. The client's
// other parameters (intent, call_id, anything else) pass through; model,
// deployment and api-version, which say where the session goes, are the
// gateway's to set. As the gateway does for a single upstream, the
// deployment's model is named when the client named one or connected with
// neither call_id nor intent (a call_id or transcription socket may carry no
// model). The returned Target is fresh: callers may add headers to it.
func (d *Deployment) Target(clientQuery url.Values) upstream.Target {
	q := make(url.Values, len(clientQuery)+2)
	for k, v := range clientQuery {
		switch k {
		case "model", "deployment", "api-version":
			continue
		}
		q[k] = append([]string(nil), v...)
	}
	named := clientQuery.Get("model") != "" || (clientQuery.Get("call_id") == "" && clientQuery.Get("intent") == "")
	if d.Kind == KindAzure && d.APIVersion != "" {
		q.Set("api-version", d.APIVersion)
		if named {
			q.Set("deployment", d.Model)
		}
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
	return upstream.Target{URL: &u, Header: h}
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
}

// Allows reports whether the key may open sessions on the model group.
func (k *ClientKey) Allows(group string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, "*") || slices.Contains(k.Models, group)
}

// Routes is the gateway's routing table: model groups and client keys. It is
// read-only once built, so sessions may share it without locks.
type Routes struct {
	// Groups maps the model name a client asks for to its deployments.
	Groups map[string][]*Deployment
	// Default is the group for a client that names no model: the first
	// model_list entry's (the configured model on the environment path).
	Default string
	// Keys are the client keys, in file order; the master key is not
	// among them.
	Keys []*ClientKey

	master *ClientKey // nil when no master key is set
}

// Authenticate finds the client key key belongs to. It compares SHA-256
// digests with subtle.ConstantTimeCompare and always visits every key, so
// its timing says nothing about how much of a key was right, or which key
// matched. The master key yields a ClientKey named "master" that may use
// every model.
func (r *Routes) Authenticate(key string) (*ClientKey, bool) {
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
	if r.master != nil {
		check(r.master)
	}
	for _, k := range r.Keys {
		check(k)
	}
	return found, found != nil
}

// RoutesFromConfig is the zero-config path: one group, c.Model, going to the
// OpenAI-style upstream at OPENAI_API_BASE with OPENAI_API_KEY as Bearer
// (nothing when the key is empty), and LITELLM_MASTER_KEY as the only client
// key (none when it is empty, which refuses everyone).
func RoutesFromConfig(c Config) *Routes {
	base := c.APIBase
	if base == nil {
		base, _ = ParseAPIBase("wss://api.openai.com/v1")
	}
	h := http.Header{}
	if c.UpstreamKey != "" {
		h.Set("Authorization", "Bearer "+c.UpstreamKey)
	}
	d := newDeployment(c.Model, 0, KindOpenAI, base, c.Model, "", h)
	r := &Routes{Groups: map[string][]*Deployment{c.Model: {d}}, Default: c.Model}
	if c.MasterKey != "" {
		r.master = &ClientKey{Name: masterKeyName, hash: hashKey(c.MasterKey)}
	}
	return r
}

// LoadRoutes reads the config file at path; lookup reads the environment
// (os.LookupEnv in the binary). Every problem found is reported, joined,
// each naming the file, line and field.
//
// Environment fallbacks, as in LiteLLM: without general_settings.master_key
// the master key is LITELLM_MASTER_KEY (if set); a model without api_key uses
// OPENAI_API_KEY (openai/) or AZURE_API_KEY (azure/) if set. An openai/ model
// with no key at all sends no Authorization (a local test upstream); an
// azure/ one is an error.
func LoadRoutes(path string, lookup func(string) (string, bool)) (*Routes, error) {
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
	r := l.routes(doc.Content[0])
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return r, nil
}

// loader walks the YAML tree by hand rather than decoding into structs, so
// that every problem is reported in the file's own terms (field path and
// line) and all of them at once.
type loader struct {
	file   string
	lookup func(string) (string, bool)
	errs   []error
	// groups are the model names of model_list, including those of
	// entries with errors, so that keys referring to them are not
	// reported twice.
	groups map[string]bool
}

func (l *loader) fail(n *yaml.Node, field, format string, args ...any) {
	if field == "" {
		field = "top level"
	}
	l.errs = append(l.errs, fmt.Errorf("%s:%d: %s: %s", l.file, n.Line, field, fmt.Sprintf(format, args...)))
}

// entry is one key: value pair of a mapping.
type entry struct {
	key, val *yaml.Node
	path     string // the field's full path, e.g. model_list[0].litellm_params.model
}

// fields returns the pairs of mapping n, reporting fields not in known and
// fields given twice.
func (l *loader) fields(n *yaml.Node, path string, known ...string) map[string]entry {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		l.fail(n, path, "must be a mapping (name: value lines), not %s", kindName(n))
		return nil
	}
	out := make(map[string]entry, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		name := k.Value
		if !slices.Contains(known, name) {
			l.fail(k, path, "unknown field %q (known fields: %s)", name, strings.Join(known, ", "))
			continue
		}
		if prev, dup := out[name]; dup {
			l.fail(k, path, "field %q is given twice (first on line %d)", name, prev.key.Line)
			continue
		}
		p := name
		if path != "" {
			p = path + "." + name
		}
		out[name] = entry{key: k, val: v, path: p}
	}
	return out
}

// deref follows YAML aliases (*name) to the anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

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

// str returns a required scalar's text.
func (l *loader) str(e entry) (string, bool) {
	v := e.val
	if v.Kind != yaml.ScalarNode {
		l.fail(v, e.path, "must be a single value, not %s", kindName(v))
		return "", false
	}
	if v.ShortTag() == "!!null" || v.Value == "" {
		l.fail(v, e.path, "is empty")
		return "", false
	}
	if hasControl(v.Value) {
		l.fail(v, e.path, "holds a line break or other control character")
		return "", false
	}
	return v.Value, true
}

// hasControl reports control characters, which no key, name or URL holds
// and which must not reach an HTTP header.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// env returns a scalar's text, reading it from the environment when written
// as os.environ/NAME. A named variable must be set and not empty. Values are
// never quoted in errors: they may be secrets.
func (l *loader) env(e entry) (string, bool) {
	s, ok := l.str(e)
	if !ok {
		return "", false
	}
	name, isEnv := strings.CutPrefix(s, envPrefix)
	if !isEnv {
		return s, true
	}
	if name == "" {
		l.fail(e.val, e.path, "%s needs a variable name after the slash", envPrefix)
		return "", false
	}
	v, set := l.lookup(name)
	switch {
	case !set:
		l.fail(e.val, e.path, "environment variable %s is not set", name)
		return "", false
	case v == "":
		l.fail(e.val, e.path, "environment variable %s is empty", name)
		return "", false
	case hasControl(v):
		l.fail(e.val, e.path, "environment variable %s holds a line break or other control character", name)
		return "", false
	}
	return v, true
}

// routes checks the whole document.
func (l *loader) routes(root *yaml.Node) *Routes {
	// litellm_settings and router_settings are LiteLLM's own tuning
	// (callbacks, retries, routing strategy). They are accepted and ignored
	// whole so that users can point rtgate at the config file their LiteLLM
	// proxy already uses.
	top := l.fields(root, "", "model_list", "keys", "general_settings", "litellm_settings", "router_settings")
	if top == nil {
		return nil
	}
	r := &Routes{Groups: map[string][]*Deployment{}}

	if e, ok := top["model_list"]; !ok {
		l.fail(root, "", "model_list is missing: the file must list at least one model")
	} else {
		l.modelList(e, r)
	}

	hashes := map[keyHash]string{} // to refuse one key given twice
	masterSet := false
	if e, ok := top["general_settings"]; ok {
		gs := l.fields(e.val, e.path, "master_key")
		if mk, ok := gs["master_key"]; ok {
			masterSet = true
			if v, ok := l.env(mk); ok {
				r.master = &ClientKey{Name: masterKeyName, hash: hashKey(v)}
			}
		}
	}
	if !masterSet {
		if v, _ := l.lookup("LITELLM_MASTER_KEY"); v != "" {
			r.master = &ClientKey{Name: masterKeyName, hash: hashKey(v)}
		}
	}
	if r.master != nil {
		hashes[r.master.hash] = "the master key"
	}

	if e, ok := top["keys"]; ok {
		l.keys(e, r, hashes)
	}
	if r.master == nil && len(r.Keys) == 0 && len(l.errs) == 0 {
		l.fail(root, "", "no client can connect: add a keys section or general_settings.master_key (or set LITELLM_MASTER_KEY)")
	}
	return r
}

func (l *loader) modelList(e entry, r *Routes) {
	list := e.val
	if list.Kind != yaml.SequenceNode {
		l.fail(list, e.path, "must be a list of models, not %s", kindName(list))
		return
	}
	if len(list.Content) == 0 {
		l.fail(list, e.path, "is empty: the file must list at least one model")
		return
	}
	for i, item := range list.Content {
		path := fmt.Sprintf("%s[%d]", e.path, i)
		f := l.fields(item, path, "model_name", "litellm_params", "model_info")
		if f == nil {
			continue
		}
		// model_info is LiteLLM's free-form metadata (ids, descriptions,
		// pricing); it does not affect routing.
		nameEntry, ok := f["model_name"]
		if !ok {
			l.fail(deref(item), path, "model_name is missing")
			continue
		}
		group, ok := l.str(nameEntry)
		if !ok {
			continue
		}
		l.groups[group] = true
		if group == "*" {
			l.fail(nameEntry.val, nameEntry.path, `"*" is not a model name (in keys it means every model)`)
			continue
		}
		pe, ok := f["litellm_params"]
		if !ok {
			l.fail(deref(item), path, "litellm_params is missing")
			continue
		}
		d := l.deployment(pe, group, len(r.Groups[group]))
		if d == nil {
			continue
		}
		if r.Default == "" {
			r.Default = group
		}
		r.Groups[group] = append(r.Groups[group], d)
	}
}

// deployment reads one litellm_params block.
func (l *loader) deployment(e entry, group string, index int) *Deployment {
	p := l.fields(e.val, e.path, "model", "api_key", "api_base", "api_version")
	if p == nil {
		return nil
	}
	before := len(l.errs)
	// kind stays "" when the model is unusable; the other fields are
	// still checked, so that every problem is reported at once.
	var kind, model string
	if me, ok := p["model"]; !ok {
		l.fail(e.val, e.path, "model is missing (openai/<model> or azure/<deployment>)")
	} else if spec, ok := l.str(me); ok {
		var known bool
		switch kind, model, known = splitModel(spec); {
		case !known:
			l.fail(me.val, me.path, "%q: unknown provider prefix %q; rtgate serves openai/<model> (or a bare model name) and azure/<deployment>",
				spec, spec[:strings.IndexByte(spec, '/')])
		case model == "":
			kind = ""
			l.fail(me.val, me.path, "%q names no model after the provider prefix", spec)
		}
	}

	apiVersion := ""
	if ve, ok := p["api_version"]; ok {
		apiVersion, _ = l.env(ve)
		if kind == KindOpenAI {
			l.fail(ve.key, ve.path, "api_version applies to azure/ models only")
		}
	}

	var base *url.URL
	if be, ok := p["api_base"]; ok {
		if s, ok := l.env(be); ok {
			base = l.parseBase(be, s)
		}
	} else if kind == KindAzure {
		l.fail(e.val, e.path, "azure/ models need api_base (https://RESOURCE.openai.azure.com)")
	} else if kind == KindOpenAI {
		base, _ = ParseAPIBase("wss://api.openai.com/v1")
	}
	if base != nil && kind == KindAzure {
		// api_base names the resource; Azure's paths are added per form.
		// Accept a base already ending in them, as some configs write it.
		switch path := strings.TrimRight(base.Path, "/"); {
		case strings.HasSuffix(path, "/openai/v1"):
			if apiVersion != "" {
				l.fail(p["api_base"].val, e.path+".api_base", "ends in /openai/v1 (the GA API) but api_version asks for the preview API: drop one of them")
			}
			base.Path = strings.TrimSuffix(path, "/openai/v1")
		case strings.HasSuffix(path, "/openai"):
			base.Path = strings.TrimSuffix(path, "/openai")
		default:
			base.Path = path
		}
	}

	key := ""
	if ke, ok := p["api_key"]; ok {
		key, _ = l.env(ke)
	} else if kind != "" {
		fallback := "OPENAI_API_KEY"
		if kind == KindAzure {
			fallback = "AZURE_API_KEY"
		}
		key, _ = l.lookup(fallback)
		if key == "" && kind == KindAzure {
			l.fail(e.val, e.path, "azure/ models need api_key (os.environ/NAME), or AZURE_API_KEY set")
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
	default:
		h.Set("Authorization", "Bearer "+key)
	}
	return newDeployment(group, index, kind, base, model, apiVersion, h)
}

// parseBase checks an api_base. URLs carrying credentials are refused
// without quoting them.
func (l *loader) parseBase(e entry, s string) *url.URL {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		l.fail(e.val, e.path, "must not carry credentials (user:password@); put the key in api_key")
		return nil
	}
	u, err := ParseAPIBase(s)
	if err != nil {
		l.fail(e.val, e.path, "%v", err)
		return nil
	}
	return u
}

// splitModel reads LiteLLM's model spelling: "azure/<deployment>",
// "openai/<model>" or a bare "<model>" (OpenAI). ok is false for any other
// provider prefix.
func splitModel(spec string) (kind, model string, ok bool) {
	prefix, rest, found := strings.Cut(spec, "/")
	switch {
	case !found:
		return KindOpenAI, spec, true
	case prefix == "openai":
		return KindOpenAI, rest, true
	case prefix == "azure":
		return KindAzure, rest, true
	}
	return "", "", false
}

func (l *loader) keys(e entry, r *Routes, hashes map[keyHash]string) {
	list := e.val
	if list.Kind != yaml.SequenceNode {
		l.fail(list, e.path, "must be a list of keys, not %s", kindName(list))
		return
	}
	names := map[string]int{} // name -> line
	for i, item := range list.Content {
		path := fmt.Sprintf("%s[%d]", e.path, i)
		f := l.fields(item, path, "name", "key_hash", "key", "models", "max_sessions", "connect_rate")
		if f == nil {
			continue
		}
		before := len(l.errs)
		k := &ClientKey{}
		if ne, ok := f["name"]; !ok {
			l.fail(deref(item), path, "name is missing")
		} else if name, ok := l.str(ne); ok {
			switch line, dup := names[name]; {
			case dup:
				l.fail(ne.val, ne.path, "the name %q is already used on line %d", name, line)
			case name == masterKeyName:
				l.fail(ne.val, ne.path, "the name %q is reserved for the master key", name)
			default:
				names[name] = ne.val.Line
				k.Name = name
			}
		}

		he, hasHash := f["key_hash"]
		ke, hasKey := f["key"]
		switch {
		case hasHash && hasKey:
			l.fail(deref(item), path, "give key_hash or key, not both")
		case hasHash:
			if s, ok := l.str(he); ok {
				// Not quoted in errors: a key pasted here by mistake
				// must not end up in logs.
				b, err := hex.DecodeString(s)
				switch {
				case err != nil || len(b) != sha256.Size:
					l.fail(he.val, he.path, "must be 64 hexadecimal characters, the SHA-256 of the key (printf %%s \"$KEY\" | sha256sum)")
				case [sha256.Size]byte(b) == sha256.Sum256(nil):
					l.fail(he.val, he.path, "is the SHA-256 of an empty key")
				default:
					k.hash = keyHash(b)
				}
			}
		case hasKey:
			if s, ok := l.str(ke); ok && !strings.HasPrefix(s, envPrefix) {
				l.fail(ke.val, ke.path, "write the key as %sNAME, or give key_hash instead: keys are not kept in the file", envPrefix)
			} else if v, ok := l.env(ke); ok {
				k.hash = hashKey(v)
			}
		default:
			l.fail(deref(item), path, "key_hash or key is missing")
		}

		if me, ok := f["models"]; ok {
			k.Models = l.modelRefs(me)
		}
		if se, ok := f["max_sessions"]; ok {
			if s, ok := l.str(se); ok {
				n, err := strconv.Atoi(s)
				if err != nil || n < 0 {
					l.fail(se.val, se.path, "%q is not a whole number of at least 0", s)
				}
				k.MaxSessions = n
			}
		}
		if ce, ok := f["connect_rate"]; ok {
			if s, ok := l.str(ce); ok {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
					l.fail(ce.val, ce.path, "%q is not a rate of connects per second (a number of at least 0)", s)
				}
				k.ConnectRate = v
			}
		}
		if len(l.errs) > before {
			continue
		}
		if other, dup := hashes[k.hash]; dup {
			l.fail(deref(item), path, "the same key as %s", other)
			continue
		}
		hashes[k.hash] = "key " + strconv.Quote(k.Name)
		r.Keys = append(r.Keys, k)
	}
}

// modelRefs reads a key's models list; each must be a model group of the
// file, or "*".
func (l *loader) modelRefs(e entry) []string {
	list := e.val
	if list.Kind != yaml.SequenceNode {
		l.fail(list, e.path, "must be a list of model names, not %s", kindName(list))
		return nil
	}
	var out []string
	for i, item := range list.Content {
		item = deref(item)
		s, ok := l.str(entry{val: item, path: fmt.Sprintf("%s[%d]", e.path, i)})
		if !ok {
			continue
		}
		if !l.groups[s] && s != "*" {
			l.fail(item, e.path, "%q is not a model_name in model_list", s)
			continue
		}
		out = append(out, s)
	}
	return out
}
