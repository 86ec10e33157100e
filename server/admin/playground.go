package admin

// The playground (/playground on the admin port): a page that talks to a
// model through this gateway from the browser. The page asks the admin
// server for a client secret (POST /playground/client_secret), which mints
// one for the master key server-side, living PlaygroundSecretTTL, then
// connects to the client port with the secret in the
// openai-insecure-api-key subprotocol, exactly as a browser app would.
//
// The mint endpoint is what a hostile page would want, so besides the Host
// check of every admin request (HostAllowed) it requires:
//   - the page token: signed by this process, embedded in each served page,
//     sent back in the X-Playground-Token header. A cross-site page cannot
//     read the playground page, so it cannot know a token; and a custom
//     header makes a cross-site fetch a preflighted one, which the admin
//     server never answers with CORS headers.
//   - an Origin that is the admin page's own (and Sec-Fetch-Site
//     same-origin when the browser sends it).

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"rtgate/server/routes"
)

const (
	// PlaygroundSecretTTL is the life of the secrets the playground mints:
	// enough to connect, and a leaked one is useless a minute later.
	PlaygroundSecretTTL = 60
	// PageTokenTTL is how long a served page may mint; reload after.
	PageTokenTTL = 12 * time.Hour
	// maxPlaygroundBody bounds the mint request (a model name and
	// instructions).
	maxPlaygroundBody = 8 << 10
	PageTokenHeader   = "X-Playground-Token"
)

//go:embed playground.html
var playgroundPage []byte

// playgroundConfig is what the served page is told, embedded as JSON.
type playgroundConfig struct {
	Token   string   `json:"token"`
	Groups  []string `json:"groups"`
	Default string   `json:"default"`
	// Where the client port is: scheme, host ("" for the page's own
	// hostname) and port.
	Scheme string `json:"scheme"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
}

func (s *Server) servePlayground(w http.ResponseWriter, r *http.Request) {
	table := s.gw.Routes()
	cfg := playgroundConfig{Token: s.PageToken(time.Now()), Default: table.Default, Scheme: "ws", Port: s.clientPort}
	for g := range table.Groups {
		if table.Protocol(g) == routes.ProtocolRealtime { // the playground speaks Realtime only
			cfg.Groups = append(cfg.Groups, g)
		}
	}
	slices.Sort(cfg.Groups)
	addr, tls := s.gw.ClientListener()
	if tls {
		cfg.Scheme = "wss"
	}
	if addr != nil {
		if a, ok := addr.(*net.TCPAddr); ok {
			cfg.Port = a.Port
			if !a.IP.IsUnspecified() && !a.IP.IsLoopback() {
				cfg.Host = a.IP.String()
			}
		}
	}
	js, _ := json.Marshal(cfg) // escapes <, > and &: safe inside <script>
	page := bytes.Replace(playgroundPage, []byte("/*CONFIG*/null"), js, 1)
	pageHeaders(w)
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline' blob:; style-src 'unsafe-inline'; "+
		"connect-src 'self' ws: wss:; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	w.Header().Set("Permissions-Policy", "microphone=(self)")
	_, _ = w.Write(page)
}

// PageToken is base64url(expiry, nonce) "." base64url(HMAC).
func (s *Server) PageToken(now time.Time) string {
	var body [24]byte
	binary.BigEndian.PutUint64(body[:8], uint64(now.Add(PageTokenTTL).Unix()))
	_, _ = rand.Read(body[8:])
	b := base64.RawURLEncoding.EncodeToString(body[:])
	return b + "." + base64.RawURLEncoding.EncodeToString(s.pageMAC(b))
}

func (s *Server) pageMAC(b string) []byte {
	m := hmac.New(sha256.New, s.pageKey)
	m.Write([]byte("playground-page:" + b))
	return m.Sum(nil)
}

var (
	errNoPageToken  = errors.New("missing " + PageTokenHeader + " header (reload the playground page)")
	errBadPageToken = errors.New("invalid or expired page token (reload the playground page)")
)

func (s *Server) checkPageToken(tok string, now time.Time) error {
	if tok == "" {
		return errNoPageToken
	}
	b, sig, ok := strings.Cut(tok, ".")
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil || !hmac.Equal(mac, s.pageMAC(b)) {
		return errBadPageToken
	}
	body, err := base64.RawURLEncoding.DecodeString(b)
	if err != nil || len(body) != 24 || now.Unix() > int64(binary.BigEndian.Uint64(body[:8])) {
		return errBadPageToken
	}
	return nil
}

// playgroundRequest is the page's mint request.
type playgroundRequest struct {
	Model        string `json:"model"`
	Instructions string `json:"instructions"`
}

func (s *Server) servePlaygroundSecret(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	refuse := func(status int, code, msg string) {
		writeJSONError(w, status, "invalid_request_error", code, msg)
	}
	if origin := r.Header.Get("Origin"); origin == "" || origin != pageOrigin(r) {
		refuse(http.StatusForbidden, "origin_not_allowed", "the playground mints secrets only for its own page (Origin mismatch)")
		return
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		refuse(http.StatusForbidden, "origin_not_allowed", "the playground mints secrets only for its own page (Sec-Fetch-Site)")
		return
	}
	if err := s.checkPageToken(r.Header.Get(PageTokenHeader), time.Now()); err != nil {
		refuse(http.StatusForbidden, "invalid_page_token", err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPlaygroundBody))
	if err != nil {
		refuse(http.StatusRequestEntityTooLarge, "request_too_large", "the request body is over 8 KiB")
		return
	}
	var req playgroundRequest
	if err := json.Unmarshal(body, &req); err != nil {
		refuse(http.StatusBadRequest, "invalid_json", "the request body is not valid JSON")
		return
	}
	table := s.gw.Routes()
	master := table.Master()
	if master == nil {
		refuse(http.StatusServiceUnavailable, "no_master_key", "no master key is configured (LITELLM_MASTER_KEY), so the playground cannot mint")
		return
	}
	if req.Model == "" {
		req.Model = table.Default
	}
	session := map[string]any{"type": "realtime", "model": req.Model,
		"audio": map[string]any{
			"input":  map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000}},
			"output": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000}},
		}}
	if req.Instructions != "" {
		session["instructions"] = req.Instructions
	}
	mint, _ := json.Marshal(map[string]any{
		"expires_after": map[string]any{"anchor": "created_at", "seconds": PlaygroundSecretTTL},
		"session":       session,
	})
	a := s.gw.MintSecret(r.Context(), table, master, mint)
	if a.ErrMsg != "" {
		writeJSONError(w, a.Status, a.ErrType, a.ErrCode, a.ErrMsg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// writeJSONError writes an OpenAI-shaped error.
func writeJSONError(w http.ResponseWriter, status int, errType, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": errType, "param": nil, "code": code}})
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
