package server

// Client secrets: short-lived ek_ tokens a browser or phone app connects
// with, minted by POST /v1/realtime/client_secrets in OpenAI's GA shape.
//
// The secret is the gateway's own, never OpenAI's: an HMAC-SHA256 signed
// token, so that any instance sharing CLIENT_SECRET_KEY verifies it without
// shared storage.
//
//	ek_<base64url(claims JSON)>.<base64url(HMAC-SHA256(key, "ek_"+claims))>
//
// The claims name the issuing gateway key, the model group, the session type,
// the expiry and a SHA-256 digest of the session config. The config itself
// travels inside the claims (deflated) when the whole token stays within
// maxInlineSecret bytes, which fits a browser's Sec-WebSocket-Protocol header
// and the gateway's own MAX_HEADER_BYTES head limit with room to spare (see
// the README for what Chromium accepts). A larger config is kept in Redis
// under the secret's id with the expiry as TTL when REDIS_URL is set, so that
// any instance can serve it; without Redis it is kept in this process's
// memory, and only this instance accepts that secret.

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"rtgate/server/cluster"
	"rtgate/server/routes"
)

const (
	secretPrefix = "ek_"
	// Bounds of expires_after.seconds, as OpenAI's.
	secretMinTTL     = 10
	secretMaxTTL     = 7200
	secretDefaultTTL = 600
	// maxInlineSecret bounds a token that carries its session config.
	// 4 KiB keeps a browser's whole upgrade head (the token plus some
	// 500 bytes of other headers) under the gateway's default 8 KiB
	// MAX_HEADER_BYTES and under common proxies' 8 KiB header-line limits
	// (nginx's large_client_header_buffers); Chromium itself accepts far
	// more (TestChromiumSubprotocolSizes measures it).
	maxInlineSecret = 4096
	// maxConfigBytes bounds a session config at all (a JSON body is at most
	// maxAPIBody anyway).
	maxConfigBytes = maxAPIBody
)

// Where a secret's session config lives.
const (
	storeToken  = ""      // in the token's claims
	storeRedis  = "redis" // in Redis, key rtgate:ek:<id>, expiring with the secret
	storeMemory = "mem"   // in this process only
)

// secretClaims is what a client secret says. Field names are short: they
// travel in every browser upgrade.
type secretClaims struct {
	Version  int    `json:"v"`
	ID       string `json:"jti"` // random; names the stored config and appears in logs
	Key      string `json:"key"` // the issuing gateway key's name
	Group    string `json:"grp"` // the model group
	Type     string `json:"typ"` // "realtime" or "transcription"
	IssuedAt int64  `json:"iat"`
	Expires  int64  `json:"exp"`
	Digest   string `json:"dig"`           // base64url SHA-256 of the session config JSON
	Store    string `json:"st,omitempty"`  // where the config is when not in Config
	Config   string `json:"cfg,omitempty"` // base64url(deflate(config JSON))
}

// secretGrant is a verified secret: its claims and, once fetched, the
// session config the gateway sends upstream as the session's first event.
type secretGrant struct {
	claims secretClaims
	config []byte // nil until loaded (Redis configs load off the poller)
}

// secretSigner signs and verifies client secrets and keeps configs that did
// not fit a token.
type secretSigner struct {
	keys  [][]byte // the first signs; all verify
	store *cluster.Store

	memMu sync.Mutex
	mem   map[string]memConfig // configs kept in this process, by secret id

	// warnRandom, when CLIENT_SECRET_KEY is unset, logs once, at the first
	// secret minted, that only this process will accept it.
	warnRandom func()
}

type memConfig struct {
	config  []byte
	expires time.Time
}

// newSecretSigner takes CLIENT_SECRET_KEY's keys; with none it makes a
// random key and warns (when the first secret is minted, so that a gateway
// that mints none says nothing), since then only this process accepts its
// secrets.
func newSecretSigner(keys []string, store *cluster.Store, log *slog.Logger) *secretSigner {
	s := &secretSigner{store: store, mem: map[string]memConfig{}}
	for _, k := range keys {
		s.keys = append(s.keys, []byte(k))
	}
	if len(s.keys) == 0 {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		s.keys = [][]byte{k}
		s.warnRandom = sync.OnceFunc(func() {
			log.Warn("CLIENT_SECRET_KEY is not set: client secrets are signed with a random per-process key, " +
				"so only this process accepts them and a restart invalidates them")
		})
	}
	return s
}

var b64 = base64.RawURLEncoding

func (s *secretSigner) mac(key []byte, signed string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// sign renders claims as a token.
func (s *secretSigner) sign(c secretClaims) string {
	if s.warnRandom != nil {
		s.warnRandom()
	}
	body, _ := json.Marshal(c)
	signed := secretPrefix + b64.EncodeToString(body)
	return signed + "." + b64.EncodeToString(s.mac(s.keys[0], signed))
}

// Reasons a secret is refused; each is a 401 with its own message.
var (
	errSecretMalformed = errors.New("The client secret is malformed.")
	errSecretForged    = errors.New("The client secret's signature does not verify.")
	errSecretExpired   = errors.New("The client secret has expired.")
	errSecretConfig    = errors.New("The client secret's session config is not available.")
)

// verify checks a token's signature (against every key, in constant time)
// and expiry, and returns its claims; a config carried in the token is
// decoded and checked against the digest.
func (s *secretSigner) verify(token string, now time.Time) (*secretGrant, error) {
	if !strings.HasPrefix(token, secretPrefix) || len(token) > maxAPIBody {
		return nil, errSecretMalformed
	}
	dot := strings.LastIndexByte(token, '.')
	if dot < len(secretPrefix) {
		return nil, errSecretMalformed
	}
	signed, sig := token[:dot], token[dot+1:]
	got, err := b64.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return nil, errSecretMalformed
	}
	ok := 0
	for _, k := range s.keys {
		ok |= subtle.ConstantTimeCompare(s.mac(k, signed), got)
	}
	if ok != 1 {
		return nil, errSecretForged
	}
	body, err := b64.DecodeString(signed[len(secretPrefix):])
	if err != nil {
		return nil, errSecretMalformed
	}
	var c secretClaims
	if err := json.Unmarshal(body, &c); err != nil || c.Version != 1 || c.Key == "" || c.Group == "" {
		return nil, errSecretMalformed
	}
	if now.Unix() >= c.Expires {
		return nil, errSecretExpired
	}
	g := &secretGrant{claims: c}
	if c.Store == storeToken {
		cfg, err := inflate(c.Config)
		if err != nil || digestOf(cfg) != c.Digest {
			return nil, errSecretMalformed
		}
		g.config = cfg
	}
	return g, nil
}

// loadConfig fetches a config kept outside the token and checks it against
// the digest. It may call Redis, so it never runs on a netpoll handler.
func (s *secretSigner) loadConfig(ctx context.Context, g *secretGrant) error {
	if g.config != nil {
		return nil
	}
	var cfg []byte
	switch g.claims.Store {
	case storeRedis:
		if s.store == nil {
			return errSecretConfig
		}
		ctx, cancel := context.WithTimeout(ctx, max(time.Second, 20*s.store.Timeout))
		defer cancel()
		b, err := s.store.Client.Get(ctx, s.store.Key("ek", g.claims.ID)).Bytes()
		if err != nil {
			return fmt.Errorf("%w (Redis: %w)", errSecretConfig, err)
		}
		cfg = b
	case storeMemory:
		s.memMu.Lock()
		m, ok := s.mem[g.claims.ID]
		s.memMu.Unlock()
		if !ok {
			return fmt.Errorf("%w (kept by the gateway instance that minted it)", errSecretConfig)
		}
		cfg = m.config
	default:
		return errSecretMalformed
	}
	if digestOf(cfg) != g.claims.Digest {
		return errSecretConfig
	}
	g.config = cfg
	return nil
}

// keep stores a config that does not fit a token, returning where.
func (s *secretSigner) keep(ctx context.Context, id string, cfg []byte, ttl time.Duration) (string, error) {
	if s.store != nil {
		ctx, cancel := context.WithTimeout(ctx, max(time.Second, 20*s.store.Timeout))
		defer cancel()
		if err := s.store.Client.Set(ctx, s.store.Key("ek", id), cfg, ttl).Err(); err != nil {
			return "", fmt.Errorf("keeping the session config in Redis: %w", err)
		}
		return storeRedis, nil
	}
	now := time.Now()
	s.memMu.Lock()
	for k, m := range s.mem { // expired ones go as new ones come
		if now.After(m.expires) {
			delete(s.mem, k)
		}
	}
	s.mem[id] = memConfig{config: cfg, expires: now.Add(ttl)}
	s.memMu.Unlock()
	return storeMemory, nil
}

func digestOf(cfg []byte) string {
	d := sha256.Sum256(cfg)
	return b64.EncodeToString(d[:])
}

func deflate(b []byte) string {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	return b64.EncodeToString(buf.Bytes())
}

func inflate(s string) ([]byte, error) {
	raw, err := b64.DecodeString(s)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(raw)), maxConfigBytes+1))
}

// clientSecretRequest is the GA request body.
type clientSecretRequest struct {
	ExpiresAfter *struct {
		Anchor  string `json:"anchor"`
		Seconds *int   `json:"seconds"`
	} `json:"expires_after"`
	Session json.RawMessage `json:"session"`
}

// mintClientSecret answers POST /v1/realtime/client_secrets.
func (s *Server) mintClientSecret(req *http.Request, body []byte) apiAnswer {
	table := s.routes.Load()
	creds := credentials(req.Header)
	key, ok := table.Authenticate(creds.key)
	if !ok {
		return errorAnswer(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"Incorrect or missing API key. Mint client secrets with a gateway key as Authorization: Bearer.")
	}
	return s.mintSecretFor(req.Context(), table, key, body)
}

// mintSecretFor mints a client secret for key, already authenticated (the
// admin playground mints for the master key without holding it in clear).
func (s *Server) mintSecretFor(ctx context.Context, table *routes.Table, key *routes.ClientKey, body []byte) apiAnswer {
	var r clientSecretRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &r); err != nil {
			return errorAnswer(http.StatusBadRequest, "invalid_request_error", "invalid_json",
				"The request body is not valid JSON: "+err.Error())
		}
	}
	ttl := secretDefaultTTL
	if ea := r.ExpiresAfter; ea != nil {
		if ea.Anchor != "" && ea.Anchor != "created_at" {
			return paramError("expires_after.anchor", "Invalid value for 'expires_after.anchor': expected 'created_at'.")
		}
		if ea.Seconds != nil {
			ttl = *ea.Seconds
		}
	}
	if ttl < secretMinTTL || ttl > secretMaxTTL {
		return paramError("expires_after.seconds", fmt.Sprintf(
			"Invalid 'expires_after.seconds': %d; expected a number of seconds from %d to %d.", ttl, secretMinTTL, secretMaxTTL))
	}
	session := map[string]any{}
	if len(r.Session) > 0 && string(r.Session) != "null" {
		if err := json.Unmarshal(r.Session, &session); err != nil || session == nil {
			return paramError("session", "Invalid 'session': expected an object.")
		}
	}
	typ, _ := session["type"].(string)
	switch typ {
	case "":
		typ = "realtime"
	case "realtime", "transcription":
	default:
		return paramError("session.type", "Invalid value for 'session.type': expected 'realtime' or 'transcription'.")
	}
	session["type"] = typ
	var group string
	if typ == "realtime" {
		model, _ := session["model"].(string)
		if model == "" {
			model = table.Default
		}
		group = model
	} else {
		group = s.transcriptionGroup(table, transcriptionModelOf(session))
	}
	if refusal, ok := groupRefusal(table, key, group); !ok {
		return refusal
	}
	if typ == "realtime" {
		session["model"] = group
	}
	cfg, _ := json.Marshal(session) // map keys sorted: the digest is stable
	now := time.Now()
	c := secretClaims{Version: 1, ID: randomID(), Key: key.Name, Group: group, Type: typ,
		IssuedAt: now.Unix(), Expires: now.Add(time.Duration(ttl) * time.Second).Unix(), Digest: digestOf(cfg)}
	inline := c
	inline.Config = deflate(cfg)
	token := s.secrets.sign(inline)
	if len(token) > maxInlineSecret {
		where, err := s.secrets.keep(ctx, c.ID, cfg, time.Duration(ttl)*time.Second)
		if err != nil {
			s.log.Error("client secret not minted", "key", key.Name, "err", err)
			return errorAnswer(http.StatusServiceUnavailable, "server_error", "secret_store_unavailable",
				"The session config is too large for a stateless secret and could not be stored; try again.")
		}
		c.Store = where
		token = s.secrets.sign(c)
	}
	s.log.Info("client secret minted", "key", key.Name, "model_group", group, "type", typ, "secret_id", c.ID,
		"expires_in_s", ttl, "config_in", configPlace(c.Store), "token_bytes", len(token))
	out := map[string]any{}
	for k, v := range session {
		out[k] = v
	}
	out["object"] = "realtime.session"
	out["expires_at"] = c.Expires
	return jsonAnswer(http.StatusOK, map[string]any{"value": token, "expires_at": c.Expires, "session": out})
}

func configPlace(store string) string {
	if store == storeToken {
		return "token"
	}
	return store
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func paramError(param, msg string) apiAnswer {
	a := errorAnswer(http.StatusBadRequest, "invalid_request_error", "invalid_value", msg)
	a.param = param
	return a
}

// authenticateConnect finds who a connect is for: a gateway key, or a client
// secret standing for the key that minted it (which the session then counts
// against). A refused secret is a 401 that says why, never what it was.
func (s *Server) authenticateConnect(table *routes.Table, presented string) (*routes.ClientKey, *secretGrant, *httpError) {
	if key, ok := table.Authenticate(presented); ok {
		return key, nil, nil
	}
	unauthorized := func(msg string) *httpError {
		return &httpError{status: http.StatusUnauthorized, errType: "invalid_request_error", code: "invalid_api_key", message: msg}
	}
	if !strings.HasPrefix(presented, secretPrefix) {
		return nil, nil, unauthorized("Incorrect or missing API key. Send it as Authorization: Bearer, api-key, or the openai-insecure-api-key subprotocol.")
	}
	g, err := s.secrets.verify(presented, time.Now())
	if err != nil {
		s.log.Info("client secret refused", "reason", err.Error())
		return nil, nil, unauthorized(err.Error())
	}
	key := keyNamed(table, g.claims.Key)
	if key == nil || !key.Allows(g.claims.Group) {
		s.log.Info("client secret refused", "reason", "the issuing key no longer exists or may not use the model",
			"key", g.claims.Key, "secret_id", g.claims.ID)
		return nil, nil, unauthorized("The key that minted this client secret is no longer valid for its model.")
	}
	return key, g, nil
}

// keyNamed finds a client key by name (the master key included).
func keyNamed(table *routes.Table, name string) *routes.ClientKey {
	if name == routes.MasterKeyName {
		return table.Master()
	}
	for _, k := range table.Keys {
		if k.Name == name {
			return k
		}
	}
	return nil
}
