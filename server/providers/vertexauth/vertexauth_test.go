package vertexauth

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// tokenServer is a loopback stand-in for Google's OAuth token endpoint: it
// checks each JWT-bearer grant (signed by key, issued by email, for Scope)
// and answers with access token tok-N, expiring after what expiresIn says
// for grant N (1-based).
type tokenServer struct {
	*httptest.Server
	grants    atomic.Int32
	expiresIn func(n int32) int
	status    atomic.Int32  // when not 0, every grant is refused with it
	hold      chan struct{} // when not nil, each grant waits for it to close
}

func newTokenServer(t *testing.T, key *rsa.PrivateKey, email string, opts func(*tokenServer)) *tokenServer {
	t.Helper()
	ts := &tokenServer{expiresIn: func(int32) int { return 3600 }}
	if opts != nil {
		opts(ts) // before the server starts: its handler reads them
	}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ts.hold != nil {
			<-ts.hold
		}
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost ||
			r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		if err := checkAssertion(r.PostForm.Get("assertion"), &key.PublicKey, email, "http://"+r.Host+r.URL.Path); err != nil {
			t.Errorf("grant: %v", err)
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		n := ts.grants.Add(1)
		if code := ts.status.Load(); code != 0 {
			http.Error(w, `{"error":"invalid_grant","error_description":"account disabled"}`, int(code))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"tok-%d","expires_in":%d,"token_type":"Bearer"}`, n, ts.expiresIn(n))
	}))
	t.Cleanup(ts.Close)
	return ts
}

// checkAssertion verifies a JWT-bearer grant's assertion: RS256 under pub,
// issued by email for Scope, addressed to the token endpoint.
func checkAssertion(jwt string, pub *rsa.PublicKey, email, aud string) error {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return errors.New("the assertion is not a JWT")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
		return fmt.Errorf("the assertion is not signed by the key: %w", err)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	var claims struct {
		Iss, Scope, Aud string
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	if claims.Iss != email || claims.Scope != Scope || claims.Aud != aud {
		return fmt.Errorf("claims iss %q scope %q aud %q, want %q, %q, %q", claims.Iss, claims.Scope, claims.Aud, email, Scope, aud)
	}
	return nil
}

// keyAndServer is a key file and the token endpoint it names, set up by
// opts (nil: every grant answered, for an hour).
func keyAndServer(t *testing.T, opts func(*tokenServer)) ([]byte, *tokenServer) {
	t.Helper()
	// The key names the endpoint, and the endpoint checks the key: the
	// server starts first, on a key made for it.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const email = "rtgate-test@test-project.iam.gserviceaccount.com"
	ts := newTokenServer(t, key, email, opts)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "test-project", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": email, "token_uri": ts.URL + "/token",
	})
	if err != nil {
		t.Fatal(err)
	}
	return data, ts
}

func bearer(t *testing.T, src *Source) string {
	t.Helper()
	h := http.Header{}
	if err := src.Authorize(t.Context(), h); err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	return h.Get("Authorization")
}

// TestServiceAccountTokenIsCached: a service-account key's token is fetched
// with one signed grant and then served from the cache to every dial,
// concurrent ones included, and to every deployment sharing the key.
func TestServiceAccountTokenIsCached(t *testing.T) {
	data, ts := keyAndServer(t, nil)
	sources := NewSources()
	src, info, err := sources.FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != "service_account" || info.ProjectID != "test-project" {
		t.Fatalf("info %+v", info)
	}
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			h := http.Header{}
			if err := src.Authorize(t.Context(), h); err != nil {
				t.Errorf("Authorize: %v", err)
			}
			got[i] = h.Get("Authorization")
		})
	}
	wg.Wait()
	for i, g := range got {
		if g != "Bearer tok-1" {
			t.Fatalf("dial %d carried %q, want Bearer tok-1", i, g)
		}
	}
	again, _, err := sources.FromJSON(data)
	if err != nil || again != src {
		t.Fatalf("the same key gave another source (%v)", err)
	}
	if b := bearer(t, again); b != "Bearer tok-1" {
		t.Fatalf("a deployment sharing the key carried %q", b)
	}
	if n := ts.grants.Load(); n != 1 {
		t.Fatalf("the token endpoint saw %d grants for 9 dials, want 1", n)
	}
}

// TestTokenRefreshedBeforeExpiry: a token inside oauth2's expiry margin is
// not handed to a dial: the next dial fetches a new one, which is then
// cached.
func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	data, ts := keyAndServer(t, func(ts *tokenServer) {
		ts.expiresIn = func(n int32) int {
			if n == 1 {
				return 5 // within the 10 s margin: stale for the next dial
			}
			return 3600
		}
	})
	src, _, err := NewSources().FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		got = append(got, bearer(t, src))
	}
	if want := "Bearer tok-1,Bearer tok-2,Bearer tok-2,Bearer tok-2"; strings.Join(got, ",") != want {
		t.Fatalf("dials carried %v, want %s", got, want)
	}
	if n := ts.grants.Load(); n != 2 {
		t.Fatalf("%d grants, want 2", n)
	}
}

// TestRefusedGrantFailsTheDialAndIsRetried: a refused grant is an error for
// the dial that asked (naming the token endpoint's answer, never the key),
// and is not cached: the next dial asks again.
func TestRefusedGrantFailsTheDialAndIsRetried(t *testing.T) {
	data, ts := keyAndServer(t, nil)
	ts.status.Store(http.StatusBadRequest)
	src, _, err := NewSources().FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	err = src.Authorize(t.Context(), h)
	if err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("Authorize error %v, want the endpoint's refusal", err)
	}
	if strings.Contains(err.Error(), "PRIVATE KEY") || h.Get("Authorization") != "" {
		t.Fatalf("the error or the headers carry credentials: %v", err)
	}
	ts.status.Store(0)
	if b := bearer(t, src); b != "Bearer tok-2" {
		t.Fatalf("after the refusal the dial carried %q, want a fresh grant's token", b)
	}
}

// TestDialGivesUpOnASlowFetch: a dial waits for the token no longer than its
// context; the fetch it left goes on and serves the next dial, without a
// second grant.
func TestDialGivesUpOnASlowFetch(t *testing.T) {
	hold := make(chan struct{})
	data, ts := keyAndServer(t, func(ts *tokenServer) { ts.hold = hold })
	released := false
	t.Cleanup(func() { // before the server's Close, which waits for its handlers
		if !released {
			close(hold)
		}
	})
	src, _, err := NewSources().FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := src.Authorize(ctx, http.Header{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Authorize with the dial's context ended: %v, want context.Canceled", err)
	}
	close(hold)
	released = true
	if b := bearer(t, src); b != "Bearer tok-1" {
		t.Fatalf("the next dial carried %q", b)
	}
	if n := ts.grants.Load(); n != 1 {
		t.Fatalf("%d grants, want the one fetch both dials shared", n)
	}
}

// TestMetadataServer: with no credentials file, Application Default
// Credentials come from the GCE metadata server (GCE_METADATA_HOST points
// the library at a loopback one), asked with Metadata-Flavor: Google for
// the cloud-platform scope, once for several dials.
func TestMetadataServer(t *testing.T) {
	var tokens atomic.Int32
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "missing Metadata-Flavor", http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case "/computeMetadata/v1/instance/service-accounts/default/token":
			if got := r.URL.Query().Get("scopes"); got != Scope {
				t.Errorf("token asked for scopes %q, want %q", got, Scope)
			}
			n := tokens.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"access_token":"meta-tok-%d","expires_in":3599,"token_type":"Bearer"}`, n)
		case "/computeMetadata/v1/project/project-id":
			fmt.Fprint(w, "meta-project")
		default:
			http.NotFound(w, r)
		}
	}))
	defer md.Close()
	t.Setenv("GCE_METADATA_HOST", strings.TrimPrefix(md.URL, "http://"))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("HOME", t.TempDir()) // no gcloud well-known file

	sources := NewSources()
	src := sources.Default()
	if sources.Default() != src {
		t.Fatal("Application Default Credentials gave two sources")
	}
	for range 3 {
		if b := bearer(t, src); b != "Bearer meta-tok-1" {
			t.Fatalf("dial carried %q, want the metadata server's token", b)
		}
	}
	if n := tokens.Load(); n != 1 {
		t.Fatalf("the metadata server issued %d tokens for 3 dials, want 1", n)
	}
}

// TestParse: credentials that cannot work are refused at load with what is
// wrong, and never with their content.
func TestParse(t *testing.T) {
	const secret = "SECRET-MATERIAL-0123"
	sa := func(mut func(m map[string]string)) string {
		m := map[string]string{"type": "service_account", "client_email": "a@b", "private_key": "-----BEGIN PRIVATE KEY-----\n" + base64.StdEncoding.EncodeToString([]byte(secret)) + "\n-----END PRIVATE KEY-----\n"}
		mut(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tc := range []struct{ name, json, want string }{
		{"not JSON", `{"type": "service_account", "private_key": "` + secret + `" x}`, "not valid JSON (at byte"},
		{"not an object", `["` + secret + `"]`, "not a JSON object of credentials"},
		{"no type (an OAuth client file)", `{"installed": {"client_secret": "` + secret + `"}}`, `the credentials have no "type"`},
		{"unknown type", `{"type": "gdch_service_account", "private_key": "` + secret + `"}`, `type "gdch_service_account" are not accepted`},
		{"service account without email", sa(func(m map[string]string) { delete(m, "client_email") }), `needs "client_email"`},
		{"private key not PEM", sa(func(m map[string]string) { m["private_key"] = secret }), `"private_key" is not a PEM key`},
		{"private key not RSA", sa(func(m map[string]string) {}), `"private_key" is not an RSA private key`},
		{"user without refresh token", `{"type": "authorized_user", "client_id": "c", "client_secret": "` + secret + `"}`, `needs "client_id", "client_secret" and "refresh_token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := NewSources().FromJSON([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error quotes the credentials: %v", err)
			}
		})
	}
	info, err := Parse([]byte(`{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r", "quota_project_id": "quota-p"}`))
	if err != nil || info.ProjectID != "quota-p" {
		t.Fatalf("a gcloud user's file: %+v, %v; want its quota project", info, err)
	}
}
