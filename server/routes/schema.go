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
	// LiteLLM's own tuning (callbacks, retries, routing strategy). Accepted
	// and ignored whole, so that users can point rtgate at the config file
	// their LiteLLM proxy already uses.
	LiteLLMSettings yaml.Node `yaml:"litellm_settings"`
	RouterSettings  yaml.Node `yaml:"router_settings"`
}

// modelEntry is one model_list item: one deployment of a model group.
type modelEntry struct {
	ModelName     yaml.Node `yaml:"model_name"`
	LiteLLMParams yaml.Node `yaml:"litellm_params"`
	// ModelInfo is LiteLLM's free-form metadata (ids, descriptions,
	// pricing). Accepted and ignored: it does not affect routing.
	ModelInfo yaml.Node `yaml:"model_info"`
}

// litellmParams is a deployment's upstream.
type litellmParams struct {
	Model      yaml.Node `yaml:"model"`
	APIKey     yaml.Node `yaml:"api_key"`
	APIBase    yaml.Node `yaml:"api_base"`
	APIVersion yaml.Node `yaml:"api_version"`
}

// keyEntry is one client key (rtgate's own section).
type keyEntry struct {
	Name        yaml.Node `yaml:"name"`
	KeyHash     yaml.Node `yaml:"key_hash"`
	Key         yaml.Node `yaml:"key"`
	Models      yaml.Node `yaml:"models"`
	MaxSessions yaml.Node `yaml:"max_sessions"`
	ConnectRate yaml.Node `yaml:"connect_rate"`
	Sideband    yaml.Node `yaml:"sideband"`
}

// generalSettings is LiteLLM's general_settings; only the master key means
// something here.
type generalSettings struct {
	MasterKey yaml.Node `yaml:"master_key"`
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
