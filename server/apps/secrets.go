// Package apps is what the gateway keeps for browser and phone apps: client
// secrets (Secrets: minted, signed, verified, their session configs kept)
// and the owners of the WebRTC and SIP calls it forwarded (Calls), which
// decide who may open a sideband. The HTTP endpoints and the sessions that
// use them are server/api's (Endpoints) and server/session's
// (checkSideband).
package apps

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
// MaxInlineSecret bytes, which fits a browser's Sec-WebSocket-Protocol header
// and the gateway's own MAX_HEADER_BYTES head limit with room to spare (see
// docs/apps.md for what Chromium accepts). A larger config is kept in Redis
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
	"strings"
	"sync"
	"time"

	"rtgate/server/cluster"
)

const (
	SecretPrefix = "ek_"
	// Bounds of expires_after.seconds, as OpenAI's.
	SecretMinTTL     = 10
	SecretMaxTTL     = 7200
	SecretDefaultTTL = 600
	// MaxInlineSecret bounds a token that carries its session config.
	// 4 KiB keeps a browser's whole upgrade head (the token plus some
	// 500 bytes of other headers) under the gateway's default 8 KiB
	// MAX_HEADER_BYTES and under common proxies' 8 KiB header-line limits
	// (nginx's large_client_header_buffers); Chromium itself accepts far
	// more (TestChromiumSubprotocolSizes measures it).
	MaxInlineSecret = 4096
	// MaxBody bounds an API request's body (a mint request, a call offer),
	// and so a session config and a token at all.
	MaxBody = 64 << 10
	// MaxConfigBytes bounds a session config at all.
	MaxConfigBytes = MaxBody
)

// Where a secret's session config lives.
const (
	StoreToken  = ""      // in the token's claims
	StoreRedis  = "redis" // in Redis, key rtgate:ek:<id>, expiring with the secret
	StoreMemory = "mem"   // in this process only
)

// Claims is what a client secret says. Field names are short: they
// travel in every browser upgrade.
type Claims struct {
	Version  int    `json:"v"`
	ID       string `json:"jti"` // random; names the stored config and appears in logs
	Key      string `json:"key"` // the issuing gateway key's name
	Group    string `json:"grp"` // the model group
	Type     string `json:"typ"` // "realtime" or "transcription"
	IssuedAt int64  `json:"iat"`
	Expires  int64  `json:"exp"`
	Digest   string `json:"dig"`           // base64url SHA-256 of the session config JSON
	Store    string `json:"st,omitempty"`  // where the config is when not in Config
	Config   string `json:"cfg,omitempty"` // base64url(Deflate(config JSON))
}

// Grant is a verified secret: its claims and, once fetched, the
// session config the gateway sends upstream as the session's first event.
type Grant struct {
	Claims Claims
	Config []byte // nil until loaded (Redis configs load off the poller)
}

// Secrets signs and verifies client secrets and keeps configs that did
// not fit a token.
type Secrets struct {
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

// NewSecrets takes CLIENT_SECRET_KEY's keys; with none it makes a
// random key and warns (when the first secret is minted, so that a gateway
// that mints none says nothing), since then only this process accepts its
// secrets.
func NewSecrets(keys []string, store *cluster.Store, log *slog.Logger) *Secrets {
	s := &Secrets{store: store, mem: map[string]memConfig{}}
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

func (s *Secrets) mac(key []byte, signed string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// Sign renders claims as a token.
func (s *Secrets) Sign(c Claims) string {
	if s.warnRandom != nil {
		s.warnRandom()
	}
	body, _ := json.Marshal(c)
	signed := SecretPrefix + b64.EncodeToString(body)
	return signed + "." + b64.EncodeToString(s.mac(s.keys[0], signed))
}

// Reasons a secret is refused; each is a 401 with its own message.
var (
	ErrSecretMalformed = errors.New("The client secret is malformed.")
	ErrSecretForged    = errors.New("The client secret's signature does not verify.")
	ErrSecretExpired   = errors.New("The client secret has expired.")
	ErrSecretConfig    = errors.New("The client secret's session config is not available.")
)

// Verify checks a token's signature (against every key, in constant time)
// and expiry, and returns its claims; a config carried in the token is
// decoded and checked against the digest.
func (s *Secrets) Verify(token string, now time.Time) (*Grant, error) {
	if !strings.HasPrefix(token, SecretPrefix) || len(token) > MaxBody {
		return nil, ErrSecretMalformed
	}
	dot := strings.LastIndexByte(token, '.')
	if dot < len(SecretPrefix) {
		return nil, ErrSecretMalformed
	}
	signed, sig := token[:dot], token[dot+1:]
	got, err := b64.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return nil, ErrSecretMalformed
	}
	ok := 0
	for _, k := range s.keys {
		ok |= subtle.ConstantTimeCompare(s.mac(k, signed), got)
	}
	if ok != 1 {
		return nil, ErrSecretForged
	}
	body, err := b64.DecodeString(signed[len(SecretPrefix):])
	if err != nil {
		return nil, ErrSecretMalformed
	}
	var c Claims
	if err := json.Unmarshal(body, &c); err != nil || c.Version != 1 || c.Key == "" || c.Group == "" {
		return nil, ErrSecretMalformed
	}
	if now.Unix() >= c.Expires {
		return nil, ErrSecretExpired
	}
	g := &Grant{Claims: c}
	if c.Store == StoreToken {
		cfg, err := inflate(c.Config)
		if err != nil || DigestOf(cfg) != c.Digest {
			return nil, ErrSecretMalformed
		}
		g.Config = cfg
	}
	return g, nil
}

// LoadConfig fetches a config kept outside the token and checks it against
// the digest. It may call Redis, so it never runs on a netpoll handler.
func (s *Secrets) LoadConfig(ctx context.Context, g *Grant) error {
	if g.Config != nil {
		return nil
	}
	var cfg []byte
	switch g.Claims.Store {
	case StoreRedis:
		if s.store == nil {
			return ErrSecretConfig
		}
		ctx, cancel := context.WithTimeout(ctx, max(time.Second, 20*s.store.Timeout))
		defer cancel()
		b, err := s.store.Client.Get(ctx, s.store.Key("ek", g.Claims.ID)).Bytes()
		if err != nil {
			return fmt.Errorf("%w (Redis: %w)", ErrSecretConfig, err)
		}
		cfg = b
	case StoreMemory:
		s.memMu.Lock()
		m, ok := s.mem[g.Claims.ID]
		s.memMu.Unlock()
		if !ok {
			return fmt.Errorf("%w (kept by the gateway instance that minted it)", ErrSecretConfig)
		}
		cfg = m.config
	default:
		return ErrSecretMalformed
	}
	if DigestOf(cfg) != g.Claims.Digest {
		return ErrSecretConfig
	}
	g.Config = cfg
	return nil
}

// Keep stores a config that does not fit a token, returning where.
func (s *Secrets) Keep(ctx context.Context, id string, cfg []byte, ttl time.Duration) (string, error) {
	if s.store != nil {
		ctx, cancel := context.WithTimeout(ctx, max(time.Second, 20*s.store.Timeout))
		defer cancel()
		if err := s.store.Client.Set(ctx, s.store.Key("ek", id), cfg, ttl).Err(); err != nil {
			return "", fmt.Errorf("keeping the session config in Redis: %w", err)
		}
		return StoreRedis, nil
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
	return StoreMemory, nil
}

func DigestOf(cfg []byte) string {
	d := sha256.Sum256(cfg)
	return b64.EncodeToString(d[:])
}

func Deflate(b []byte) string {
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
	return io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(raw)), MaxConfigBytes+1))
}

// RandomID is a new secret id: 12 random bytes, in hex.
func RandomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
