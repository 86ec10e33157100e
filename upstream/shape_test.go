package upstream

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"rtgate/internal/testwait"
	"rtgate/mockai"
)

// shapeTarget is a Target for the URL u with the headers given as pairs.
func shapeTarget(t *testing.T, u string, kv ...string) Target {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1]) // as written, as the gateway's target does
	}
	return Target{URL: parsed, Header: h}
}

func TestKeyIsTheSessionShape(t *testing.T) {
	const base = "wss://api.example/v1/realtime?model=gpt-realtime"
	plain := Key(shapeTarget(t, base, "Authorization", "Bearer sk-1"))
	for _, tc := range []struct {
		name string
		t    Target
		same bool
	}{
		{"the same connect", shapeTarget(t, base, "Authorization", "Bearer sk-1"), true},
		{"a client's nonce", shapeTarget(t, base+"&nonce=7", "Authorization", "Bearer sk-1"), true},
		{"a per-user safety identifier", shapeTarget(t, base, "Authorization", "Bearer sk-1", "OpenAI-Safety-Identifier", "u-1"), true},
		{"the header's name in another case", shapeTarget(t, base, "authorization", "Bearer sk-1"), true},
		{"another model", shapeTarget(t, "wss://api.example/v1/realtime?model=gpt-realtime-mini", "Authorization", "Bearer sk-1"), false},
		{"another credential", shapeTarget(t, base, "Authorization", "Bearer sk-2"), false},
		{"another host", shapeTarget(t, "wss://eu.api.example/v1/realtime?model=gpt-realtime", "Authorization", "Bearer sk-1"), false},
		{"the beta interface", shapeTarget(t, base, "Authorization", "Bearer sk-1", "OpenAI-Beta", "realtime=v1"), false},
		{"an Azure api-version", shapeTarget(t, base+"&api-version=2025-04-01-preview", "Authorization", "Bearer sk-1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if same := Key(tc.t) == plain; same != tc.same {
				t.Fatalf("same key as the plain connect: %v, want %v", same, tc.same)
			}
		})
	}
}

func TestUnpooled(t *testing.T) {
	const base = "wss://api.example/v1/realtime"
	for _, tc := range []struct {
		query  string
		header []string
		want   string
	}{
		{"model=gpt-realtime", nil, ""},
		{"api-version=2025-04-01-preview&deployment=rt", nil, ""},
		{"model=gpt-realtime", []string{"OpenAI-Beta", "realtime=v1"}, ""}, // another shape, poolable as such
		{"model=gpt-realtime&nonce=1", nil, MissQuery},
		{"model=gpt-realtime&intent=quick", nil, MissQuery},
		{"model=gpt-realtime", []string{"OpenAI-Safety-Identifier", "u-1"}, MissSafetyIdentifier},
		{"model=gpt-realtime&nonce=1", []string{"OpenAI-Safety-Identifier", "u-1"}, MissSafetyIdentifier},
		{"model=gpt-realtime", []string{"openai-safety-identifier", "u-1"}, MissSafetyIdentifier},
		{"call_id=rtc_1", nil, sideband},
		{"intent=transcription", nil, sideband},
		{"model=gpt-realtime&call_id=rtc_1&nonce=1", nil, sideband},
	} {
		if got := unpooled(shapeTarget(t, base+"?"+tc.query, tc.header...)); got != tc.want {
			t.Errorf("unpooled(?%s %v) = %q, want %q", tc.query, tc.header, got, tc.want)
		}
	}
}

// TestMaxTotalSharedFairly: one key's demand cannot take MaxTotal from
// another. Key A fills the whole cap while it is the only key; once B is
// configured, A gives back the oldest of its sockets over its share and B
// gets its share; sockets taken from A are then replaced only up to A's
// share. Counted at mockai: every socket the pool opened and closed.
func TestMaxTotalSharedFairly(t *testing.T) { eachScheme(t, testMaxTotalSharedFairly) }

func testMaxTotalSharedFairly(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{}, tls)
	p := newTestPool(t, m, PoolConfig{Size: 10, MaxTotal: 10, MaxIdle: time.Hour, PingInterval: -1, Clock: newManualClock()})
	a, b := target(t, m, "key-a"), target(t, m, "key-b")
	p.Prime(a, "m")
	testwait.For(t, "A to fill the whole cap", func() bool { return p.Warm(a) == 10 })

	p.Prime(b, "m")
	testwait.For(t, "B to get its share", func() bool { return p.Warm(b) == 5 })
	if got := p.Warm(a) + p.Dialing(a); got != 5 {
		t.Fatalf("A holds or dials %d, want its share 5", got)
	}
	testwait.For(t, "A's 5 over its share to be closed", func() bool { return m.Stats().Active == 10 })

	for range 3 {
		s := &sink{}
		if s.h, _ = p.Take(a, "m", s); s.h == nil {
			t.Fatal("A missed with 5 warm")
		}
		s.h.Endpoint().Close()
	}
	testwait.For(t, "A's replacements to land", func() bool { return p.Warm(a) == 5 })
	if got, n := p.Warm(b), p.Warm(a)+p.Dialing(a); got != 5 || n != 5 {
		t.Fatalf("B holds %d, A holds or dials %d; want 5 and 5", got, n)
	}
}
