package apps

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestSecrets: a signed token verifies under the key that signed it and
// under a rotation that still lists that key; a forged, tampered, expired or
// malformed one is refused with its own error; a config kept outside the
// token (in this process) loads and is checked against the digest.
func TestSecrets(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Unix(1_000_000, 0)
	cfg := []byte(`{"instructions":"hi"}`)
	claims := func(exp time.Time, inline bool) Claims {
		c := Claims{Version: 1, ID: RandomID(), Key: "app", Group: "gpt-realtime", Type: "realtime",
			IssuedAt: now.Unix(), Expires: exp.Unix(), Digest: DigestOf(cfg)}
		if inline {
			c.Config = Deflate(cfg)
		} else {
			c.Store = StoreMemory
		}
		return c
	}
	old := NewSecrets([]string{"old-key"}, nil, log)
	rotated := NewSecrets([]string{"new-key", "old-key"}, nil, log)
	other := NewSecrets([]string{"another-key"}, nil, log)

	token := old.Sign(claims(now.Add(time.Minute), true))
	for name, s := range map[string]*Secrets{"signer": old, "rotation": rotated} {
		g, err := s.Verify(token, now)
		if err != nil || string(g.Config) != string(cfg) || g.Claims.Key != "app" {
			t.Fatalf("%s: %+v, %v", name, g, err)
		}
	}
	tampered := token[:len(SecretPrefix)+2] + "x" + token[len(SecretPrefix)+3:]
	for _, tc := range []struct {
		name, token string
		at          time.Time
		want        error
	}{
		{"other key", token, now, ErrSecretForged},
		{"tampered", tampered, now, ErrSecretForged},
		{"expired", token, now.Add(time.Minute), ErrSecretExpired},
		{"not a secret", "sk-something", now, ErrSecretMalformed},
		{"no signature", SecretPrefix + "abc", now, ErrSecretMalformed},
	} {
		s := other
		if tc.name != "other key" {
			s = old
		}
		if _, err := s.Verify(tc.token, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}

	// A config kept in this process.
	c := claims(now.Add(time.Minute), false)
	if where, err := old.Keep(context.Background(), c.ID, cfg, time.Minute); err != nil || where != StoreMemory {
		t.Fatalf("Keep: %q, %v", where, err)
	}
	g, err := old.Verify(old.Sign(c), now)
	if err != nil || g.Config != nil {
		t.Fatalf("a kept config's grant: %+v, %v", g, err)
	}
	if err := old.LoadConfig(context.Background(), g); err != nil || string(g.Config) != string(cfg) {
		t.Fatalf("LoadConfig: %q, %v", g.Config, err)
	}
	// Another process (another Secrets) does not have it.
	g2, err := rotated.Verify(old.Sign(c), now)
	if err != nil {
		t.Fatal(err)
	}
	if err := rotated.LoadConfig(context.Background(), g2); !errors.Is(err, ErrSecretConfig) ||
		!strings.Contains(err.Error(), "instance that minted it") {
		t.Fatalf("LoadConfig elsewhere: %v", err)
	}
}
