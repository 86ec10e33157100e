// Package vertexauth supplies the OAuth 2 access tokens Vertex AI asks for
// on every connection (Authorization: Bearer), from Google credentials as
// LiteLLM takes them for vertex_ai/ models: a credentials JSON (a
// service-account key, the authorized_user file `gcloud auth
// application-default login` writes, a workload identity federation or
// impersonation config), or Application Default Credentials (gcloud's
// well-known file, then the GCE metadata server; GCE_METADATA_HOST redirects
// it), through golang.org/x/oauth2/google.
//
// An access token lives about an hour, and fetching one is a round trip to
// Google (a signed JWT grant, a refresh, or the metadata server), so a Source
// caches its token and fetches a new one only when it is about to expire
// (within oauth2's expiry margin, 10 s), one fetch at a time however many
// dials wait for it. A dial waits no longer than its own context allows; a
// fetch it gave up on still completes (within FetchTimeout) and serves the
// next dial. A failed fetch is not cached: the next dial tries again.
//
// Credentials never appear in an error or a log: errors about a credentials
// JSON name the field at fault, never its content.
package vertexauth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// Scope is the OAuth scope Vertex AI's API takes.
const Scope = "https://www.googleapis.com/auth/cloud-platform"

// FetchTimeout bounds one token request to Google's token endpoint (the
// metadata server's client has its own, shorter, bound). It outlives any
// one dial on purpose: a fetch a dial gave up on still fills the cache.
const FetchTimeout = 30 * time.Second

// Credential types a credentials JSON may hold ("type"): the ones an
// operator configures for a server. A client_secret.json (OAuth client, no
// type) needs a browser and is refused.
var acceptedTypes = []google.CredentialsType{
	google.ServiceAccount,
	google.AuthorizedUser,
	google.ExternalAccount,
	google.ExternalAccountAuthorizedUser,
	google.ImpersonatedServiceAccount,
}

// Info is what a credentials JSON says of itself that the configuration
// uses.
type Info struct {
	Type string
	// ProjectID is the key's project_id (a service account's), else its
	// quota_project_id (a gcloud user's, a federation config's); "" when
	// it names none.
	ProjectID string
	// QuotaProjectID is its quota_project_id alone ("" for none).
	QuotaProjectID string
}

// Parse checks a credentials JSON without using it (no I/O): its type, and
// the fields that type cannot work without. Its errors never quote the
// JSON.
func Parse(data []byte) (Info, error) {
	var f struct {
		Type           string `json:"type"`
		ProjectID      string `json:"project_id"`
		QuotaProjectID string `json:"quota_project_id"`
		ClientEmail    string `json:"client_email"`
		PrivateKey     string `json:"private_key"`
		ClientID       string `json:"client_id"`
		ClientSecret   string `json:"client_secret"`
		RefreshToken   string `json:"refresh_token"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		// json's messages quote the character they stopped at: a piece
		// of a key. Only the offset is kept.
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Info{}, fmt.Errorf("not valid JSON (at byte %d)", se.Offset)
		}
		return Info{}, errors.New("not a JSON object of credentials")
	}
	info := Info{Type: f.Type, ProjectID: f.ProjectID, QuotaProjectID: f.QuotaProjectID}
	if info.ProjectID == "" {
		info.ProjectID = f.QuotaProjectID
	}
	switch google.CredentialsType(f.Type) {
	case google.ServiceAccount:
		if f.ClientEmail == "" {
			return info, errors.New(`a service-account key needs "client_email"`)
		}
		if err := checkPrivateKey(f.PrivateKey); err != nil {
			return info, err
		}
	case google.AuthorizedUser:
		if f.ClientID == "" || f.ClientSecret == "" || f.RefreshToken == "" {
			return info, errors.New(`an authorized_user file needs "client_id", "client_secret" and "refresh_token" (gcloud auth application-default login writes one)`)
		}
	case "":
		return info, errors.New(`the credentials have no "type" (a service-account key file says "type": "service_account")`)
	default:
		ok := false
		for _, t := range acceptedTypes {
			ok = ok || google.CredentialsType(f.Type) == t
		}
		if !ok {
			return info, fmt.Errorf("credentials of type %q are not accepted (service_account, authorized_user, external_account, external_account_authorized_user or impersonated_service_account)", f.Type)
		}
	}
	return info, nil
}

// checkPrivateKey checks that a service-account key's private_key is the
// PEM RSA key Google issues (PKCS #8, or PKCS #1), as the JWT grant will
// need it.
func checkPrivateKey(s string) error {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return errors.New(`the service-account key's "private_key" is not a PEM key`)
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return nil
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return nil
	}
	return errors.New(`the service-account key's "private_key" is not an RSA private key`)
}

// Sources hands out Sources, one per distinct credentials, so that
// deployments sharing credentials share one token (and one fetch). One
// Sources serves one loaded configuration; it is safe for concurrent use.
type Sources struct {
	mu     sync.Mutex
	byKey  map[string]*Source
	client *http.Client // the token requests'
}

// NewSources makes an empty set whose token requests are bounded by
// FetchTimeout.
func NewSources() *Sources {
	return &Sources{byKey: map[string]*Source{}, client: &http.Client{Timeout: FetchTimeout}}
}

// FromJSON is the Source of a credentials JSON (checked by Parse), shared
// with every earlier call for the same bytes. It does no I/O.
func (s *Sources) FromJSON(data []byte) (*Source, Info, error) {
	info, err := Parse(data)
	if err != nil {
		return nil, info, err
	}
	sum := sha256.Sum256(data)
	key := "json:" + hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if src := s.byKey[key]; src != nil {
		return src, info, nil
	}
	creds, err := google.CredentialsFromJSONWithType(s.clientContext(), data, google.CredentialsType(info.Type), Scope)
	if err != nil {
		return nil, info, fmt.Errorf("unusable %s credentials: %w", info.Type, redact(err))
	}
	src := newSource(func() (oauth2.TokenSource, error) { return creds.TokenSource, nil })
	s.byKey[key] = src
	return src, info, nil
}

// Default is the Source of Application Default Credentials, shared by every
// caller. Finding them (which may probe the metadata server) waits for the
// first token a dial asks for, and is tried again after a failure.
func (s *Sources) Default() *Source {
	const key = "adc"
	s.mu.Lock()
	defer s.mu.Unlock()
	if src := s.byKey[key]; src != nil {
		return src
	}
	ctx := s.clientContext()
	src := newSource(func() (oauth2.TokenSource, error) {
		creds, err := google.FindDefaultCredentials(ctx, Scope)
		if err != nil {
			return nil, fmt.Errorf("application default credentials: %w", err)
		}
		return creds.TokenSource, nil
	})
	s.byKey[key] = src
	return src
}

// clientContext is the context the oauth2 token sources keep for all their
// later requests: it only carries the HTTP client (oauth2.HTTPClient), and
// is never cancelled.
func (s *Sources) clientContext() context.Context {
	return context.WithValue(context.Background(), oauth2.HTTPClient, s.client)
}

// redact drops the text of errors that could carry the credentials' content
// (a JSON decoder's message quotes what it stopped at).
func redact(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &te) {
		return errors.New("a field of the wrong shape")
	}
	return err
}

// Source is one set of credentials' access tokens: cached, refreshed as it
// nears its expiry, safe for concurrent use.
type Source struct {
	find func() (oauth2.TokenSource, error) // the credentials' token source, built on first need

	mu     sync.Mutex
	ts     oauth2.TokenSource // nil until find succeeded
	tok    *oauth2.Token      // the last token fetched
	flight *fetch             // the fetch under way, nil when none
}

// fetch is one token request; done closes once tok or err is set.
type fetch struct {
	done chan struct{}
	tok  *oauth2.Token
	err  error
}

func newSource(find func() (oauth2.TokenSource, error)) *Source {
	return &Source{find: find}
}

// Token returns a valid access token: the cached one, or one fetched now
// (joining a fetch already under way). It waits for the fetch no longer
// than ctx allows.
func (s *Source) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	if s.tok.Valid() {
		t := s.tok.AccessToken
		s.mu.Unlock()
		return t, nil
	}
	f := s.flight
	if f == nil {
		f = &fetch{done: make(chan struct{})}
		s.flight = f
		go s.run(f)
	}
	s.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return "", f.err
		}
		return f.tok.AccessToken, nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for a Google access token: %w", context.Cause(ctx))
	}
}

// run is fetch f, in a goroutine of its own: it ends when the token request
// does (FetchTimeout, or the metadata client's bound), whoever still waits.
func (s *Source) run(f *fetch) {
	tok, err := s.fetchToken()
	s.mu.Lock()
	if err == nil {
		s.tok = tok
	}
	s.flight = nil
	s.mu.Unlock()
	f.tok, f.err = tok, err
	close(f.done)
}

// fetchToken asks the credentials for a token, building their token source
// first when this is the first fetch (or the last build failed). The
// source is wrapped in oauth2.ReuseTokenSource, which hands back a token
// still valid without a request.
func (s *Source) fetchToken() (*oauth2.Token, error) {
	s.mu.Lock()
	ts := s.ts
	s.mu.Unlock()
	if ts == nil {
		base, err := s.find()
		if err != nil {
			return nil, err
		}
		ts = oauth2.ReuseTokenSource(nil, base)
		s.mu.Lock()
		s.ts = ts
		s.mu.Unlock()
	}
	tok, err := ts.Token()
	switch {
	case err != nil:
		return nil, fmt.Errorf("fetching a Google access token: %w", err)
	case tok.AccessToken == "":
		return nil, errors.New("fetching a Google access token: the answer held no access token")
	}
	return tok, nil
}

// Authorize sets h's Authorization to a bearer access token (Token): what
// upstream.Target.Authorize calls on every dial.
func (s *Source) Authorize(ctx context.Context, h http.Header) error {
	tok, err := s.Token(ctx)
	if err != nil {
		return err
	}
	h.Set("Authorization", "Bearer "+tok)
	return nil
}
