package routes

// Vertex AI's Gemini Live API (vertex_ai/<model>, or LiteLLM's
// vertex_ai_beta/<model>), configured as LiteLLM configures it:
//
//	litellm_params:
//	  model: vertex_ai/gemini-live-2.5-flash-native-audio
//	  vertex_project: my-project        # else VERTEXAI_PROJECT, the credentials' project_id, GOOGLE_CLOUD_PROJECT
//	  vertex_location: europe-west4     # else VERTEXAI_LOCATION, else us-central1; "global" for the global endpoint
//	  vertex_credentials: /etc/sa.json  # a key file's path, the JSON itself, or os.environ/NAME holding either;
//	                                    # else VERTEXAI_CREDENTIALS, else Application Default Credentials
//	  api_base: https://proxy.internal  # replaces the location's host; the Live path is appended
//
// The session speaks Gemini Live on Vertex's BidiGenerateContent WebSocket
// (translated like gemini/, see server/providers/gemini) with an OAuth 2
// access token as a bearer, fetched per dial from a cache
// (server/providers/vertexauth, Deployment.Authorizer), and names its model
// in the setup by its full resource (Deployment.UpstreamModel).
//
// Everything that can be checked without the network is checked at load,
// with the field and line: the credentials JSON's shape, the project, the
// location. Application Default Credentials from gcloud's well-known file or
// the metadata server are only found at the first dial (finding them may
// probe the network); their project is then not known at load, so such a
// deployment names vertex_project (or VERTEXAI_PROJECT, GOOGLE_CLOUD_PROJECT).

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"rtgate/server/providers/vertexauth"
)

// vertexLivePath is Vertex AI's Live API WebSocket path
// (LlmBidiService/BidiGenerateContent), in v1beta1 as Google's own SDKs
// (@google/genai, google-genai) dial it by default; LiteLLM dials v1.
const vertexLivePath = "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent"

// vertexDefaultLocation is LiteLLM's default vertex_location.
const vertexDefaultLocation = "us-central1"

// vertexConfig is what a KindVertex deployment adds: the Google Cloud project
// and location its model resource names, and the token source its dials
// take their bearer from.
type vertexConfig struct {
	project, location string
	auth              *vertexauth.Source
	// quotaProject is the credentials' quota_project_id, which Google's
	// auth libraries send as X-Goog-User-Project (the project a gcloud
	// user's calls are billed and rate-limited to); "" for none.
	quotaProject string
}

// vertexAPIBase is Vertex AI's API host for a location, as Google's
// @google/genai SDK picks it: the global endpoint's, a multi-region's (us,
// eu) .rep host, or the region's.
func vertexAPIBase(location string) string {
	switch location {
	case "global":
		return "https://aiplatform.googleapis.com"
	case "us", "eu":
		return "https://aiplatform." + location + ".rep.googleapis.com"
	}
	return "https://" + location + "-aiplatform.googleapis.com"
}

// validLocation reports whether s can be a Vertex AI location: it becomes
// part of a host name.
func validLocation(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') })
}

// validProject reports whether s can be a Google Cloud project id in a
// resource name: lowercase letters, digits and hyphens, and the domain and
// colon of the older domain-scoped ids (example.com:my-project).
func validProject(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == ':')
	})
}

// vertexModel is the model resource a Vertex AI setup names:
// projects/P/locations/L/publishers/google/models/M.
func (d *Deployment) vertexModel() string {
	return "projects/" + d.vertex.project + "/locations/" + d.vertex.location + "/publishers/google/models/" + d.Model
}

// Authorizer is what a dial to the deployment calls to add its short-lived
// credential to the upgrade's headers (upstream.Target.Authorize): a fresh
// or cached Vertex AI access token as a bearer. It is nil for deployments
// whose credentials are static (Address already carries them).
func (d *Deployment) Authorizer() func(context.Context, http.Header) error {
	if d.vertex == nil || d.vertex.auth == nil {
		return nil
	}
	return d.vertex.auth.Authorize
}

// vertexField is one litellm_params field only vertex_ai/ models take.
type vertexField struct {
	n    *yaml.Node
	name string
}

// vertexFields are p's fields only vertex_ai/ models take, to refuse on
// other models.
func vertexFields(p *litellmParams) []vertexField {
	return []vertexField{{&p.VertexProject, "vertex_project"}, {&p.VertexLocation, "vertex_location"}, {&p.VertexCredentials, "vertex_credentials"}}
}

// vertex reads a vertex_ai/ deployment's Google Cloud settings (block n at
// path); base is its api_base, nil when not given. It returns nil after
// reporting what is wrong.
func (l *loader) vertex(p *litellmParams, n *yaml.Node, path string, base *url.URL) (*vertexConfig, *url.URL) {
	before := len(l.errs)
	vc := &vertexConfig{location: vertexDefaultLocation}

	locPath := join(path, "vertex_location")
	if given(&p.VertexLocation) {
		if s, ok := l.env(&p.VertexLocation, locPath); ok {
			if !validLocation(s) {
				l.fail(deref(&p.VertexLocation), locPath, "%q is not a Vertex AI location (us-central1, europe-west4, global)", s)
			}
			vc.location = s
		}
	} else if s, _ := l.lookup("VERTEXAI_LOCATION"); s != "" {
		if !validLocation(s) {
			l.fail(n, path, "VERTEXAI_LOCATION %q is not a Vertex AI location (us-central1, europe-west4, global)", s)
		}
		vc.location = s
	}

	// The credentials: the field, LiteLLM's VERTEXAI_CREDENTIALS, or the
	// file GOOGLE_APPLICATION_CREDENTIALS names (Application Default
	// Credentials' first place, read here so that its errors and project
	// are known at load); failing all, the rest of Application Default
	// Credentials at the first dial.
	credPath := join(path, "vertex_credentials")
	var info vertexauth.Info
	switch {
	case given(&p.VertexCredentials):
		if s, ok := l.credentialsText(&p.VertexCredentials, credPath); ok {
			vc.auth, info = l.vertexCredentials(deref(&p.VertexCredentials), credPath, "", s)
		}
	case l.set("VERTEXAI_CREDENTIALS"):
		s, _ := l.lookup("VERTEXAI_CREDENTIALS")
		vc.auth, info = l.vertexCredentials(n, path, "VERTEXAI_CREDENTIALS: ", s)
	case l.set("GOOGLE_APPLICATION_CREDENTIALS"):
		s, _ := l.lookup("GOOGLE_APPLICATION_CREDENTIALS")
		vc.auth, info = l.vertexCredentials(n, path, "GOOGLE_APPLICATION_CREDENTIALS: ", s)
	default:
		vc.auth = l.vertexSources().Default()
	}

	vc.quotaProject = info.QuotaProjectID
	if vc.quotaProject != "" && !validProject(vc.quotaProject) {
		l.fail(n, path, "the credentials' quota_project_id %q is not a Google Cloud project id", vc.quotaProject)
	}

	projPath := join(path, "vertex_project")
	if given(&p.VertexProject) {
		if s, ok := l.env(&p.VertexProject, projPath); ok {
			if !validProject(s) {
				l.fail(deref(&p.VertexProject), projPath, "%q is not a Google Cloud project id", s)
			}
			vc.project = s
		}
	} else {
		for _, source := range []struct{ name, value string }{
			{"VERTEXAI_PROJECT", l.value("VERTEXAI_PROJECT")},
			{"the credentials' project_id", info.ProjectID},
			{"GOOGLE_CLOUD_PROJECT", l.value("GOOGLE_CLOUD_PROJECT")},
		} {
			if source.value == "" {
				continue
			}
			if !validProject(source.value) {
				l.fail(n, path, "%s %q is not a Google Cloud project id", source.name, source.value)
			}
			vc.project = source.value
			break
		}
		if vc.project == "" && len(l.errs) == before {
			l.fail(n, path, "vertex_ai/ models need vertex_project (or VERTEXAI_PROJECT or GOOGLE_CLOUD_PROJECT set, or credentials naming a project_id)")
		}
	}

	if base == nil {
		base, _ = ParseAPIBase(vertexAPIBase(vc.location))
	}
	if len(l.errs) > before {
		return nil, nil
	}
	return vc, base
}

// set reports whether environment variable name is set and not empty.
func (l *loader) set(name string) bool { return l.value(name) != "" }

// value is environment variable name's value, "" when it is not set.
func (l *loader) value(name string) string {
	v, _ := l.lookup(name)
	return v
}

// credentialsText reads vertex_credentials: a path, or the JSON itself
// (which may span lines, in the file or in the environment variable that
// os.environ/NAME names). It is never quoted in an error.
func (l *loader) credentialsText(n *yaml.Node, path string) (string, bool) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode {
		l.fail(n, path, "must be a single value (a key file's path, or its JSON as a string), not %s", kindName(n))
		return "", false
	}
	s := n.Value
	if n.ShortTag() == "!!null" || strings.TrimSpace(s) == "" {
		l.fail(n, path, "is empty")
		return "", false
	}
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
	case strings.TrimSpace(v) == "":
		l.fail(n, path, "environment variable %s is empty", name)
		return "", false
	}
	return v, true
}

// vertexCredentials turns a credentials value (a path, or JSON when it
// starts with "{") into its shared token source. what prefixes errors
// naming where the value came from. Neither the JSON nor a piece of it is
// ever in an error; a path is.
func (l *loader) vertexCredentials(n *yaml.Node, path, what, s string) (*vertexauth.Source, vertexauth.Info) {
	data := []byte(strings.TrimSpace(s))
	if !strings.HasPrefix(string(data), "{") {
		b, err := os.ReadFile(string(data))
		if err != nil {
			// Not the path itself: a value that was meant as JSON
			// and is not would be quoted whole.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			l.fail(n, path, "%scannot read the credentials file (a path, or the JSON itself starting with {): %v", what, err)
			return nil, vertexauth.Info{}
		}
		data = b
	}
	src, info, err := l.vertexSources().FromJSON(data)
	if err != nil {
		l.fail(n, path, "%sthe credentials are unusable: %v", what, err)
		return nil, info
	}
	return src, info
}

// vertexSources is the load's token sources, one per distinct credentials
// (deployments sharing a key share its token).
func (l *loader) vertexSources() *vertexauth.Sources {
	if l.vertexAuth == nil {
		l.vertexAuth = vertexauth.NewSources()
	}
	return l.vertexAuth
}
