package upstream

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/mockai"
	"rtgate/poller"
)

// sink is an Owner that takes a socket and closes it, as a session that
// ends at once would.
type sink struct{ h *poller.Handle }

func (s *sink) UpstreamReadable() {
	_ = s.h.Endpoint().Read(func(src frames.Source) error { return src.Skip(src.Len()) })
}
func (s *sink) UpstreamGone() {}

func target(t testing.TB, m *mockai.Server, key string) Target {
	t.Helper()
	u, err := url.Parse(m.BaseURL() + "/realtime?model=gpt-realtime")
	if err != nil {
		t.Fatal(err)
	}
	return Target{URL: u, Header: http.Header{"Authorization": {"Bearer " + key}}}
}

func newTestPool(t testing.TB, cfg PoolConfig) *Pool {
	t.Helper()
	p := NewPool(&Dialer{Timeout: 5 * time.Second, WriteTimeout: 5 * time.Second}, cfg,
		slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	t.Cleanup(p.Close)
	return p
}

func startMock(t testing.TB, cfg mockai.Config) *mockai.Server {
	t.Helper()
	m, err := mockai.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heldSessionID decodes the session id from a held session.created frame.
func heldSessionID(t testing.TB, held []byte) string {
	t.Helper()
	h, hlen, ok, err := frames.ParseHeader(held)
	if err != nil || !ok || h.OpCode != ws.OpText {
		t.Fatalf("held bytes are not a text frame: %v", err)
	}
	var ev struct {
		Type    string `json:"type"`
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if err := json.Unmarshal(held[hlen:], &ev); err != nil || ev.Type != "session.created" {
		t.Fatalf("held frame is %q, want session.created", ev.Type)
	}
	return ev.Session.ID
}

func TestPoolNeverReusesAcrossKeys(t *testing.T) {
	m := startMock(t, mockai.Config{}) // accepts any key, records each
	p := newTestPool(t, PoolConfig{Size: 2})
	ta, tb := target(t, m, "sk-team-a"), target(t, m, "sk-team-b")
	if Key(ta) == Key(tb) {
		t.Fatal("targets differing only in key share a pool key")
	}
	p.Prime(ta, "gpt-realtime")
	p.Prime(tb, "gpt-realtime")
	waitFor(t, "both pools to warm", func() bool { return p.Warm(ta) == 2 && p.Warm(tb) == 2 })

	keyOf := map[string]string{} // session id -> key it was dialed with
	for _, r := range m.Records() {
		keyOf[r.SessionID] = r.Key
	}
	for range 4 {
		for _, tc := range []struct {
			t   Target
			key string
		}{{ta, "sk-team-a"}, {tb, "sk-team-b"}} {
			s := &sink{}
			h, held := p.Take(tc.t, "gpt-realtime", s)
			if h == nil {
				waitFor(t, "refill", func() bool { return p.Warm(tc.t) > 0 })
				h, held = p.Take(tc.t, "gpt-realtime", s)
			}
			if h == nil {
				t.Fatal("no warm socket after refill")
			}
			s.h = h
			id := heldSessionID(t, held)
			for _, r := range m.Records() {
				keyOf[r.SessionID] = r.Key
			}
			if keyOf[id] != tc.key {
				t.Fatal("a socket dialed with one key was handed to a request for another")
			}
			h.Endpoint().Close()
		}
	}
}

func TestPoolDialsNothingWhenOff(t *testing.T) {
	m := startMock(t, mockai.Config{})
	p := newTestPool(t, PoolConfig{Size: 0})
	ta := target(t, m, "k")
	p.Prime(ta, "m")
	if h, _ := p.Take(ta, "m", &sink{}); h != nil {
		t.Fatal("a pool of size 0 handed out a socket")
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(m.Records()); n != 0 {
		t.Fatalf("a pool of size 0 dialed %d times", n)
	}
}

// TestAdaptiveSizeFollowsLoad drives a steady connect rate at an upstream
// with a 50 ms handshake and checks that the auto-sized pool serves nearly
// every connect in the last part of the run, then shrinks to its minimum.
func TestAdaptiveSizeFollowsLoad(t *testing.T) {
	m := startMock(t, mockai.Config{UpgradeDelay: 40 * time.Millisecond, SessionDelay: 10 * time.Millisecond})
	p := newTestPool(t, PoolConfig{Auto: true, Min: 1, Max: 64, MaxIdle: 30 * time.Second})
	ta := target(t, m, "k")
	p.Prime(ta, "m")

	const rate = 100 // connects per second
	const run = 4 * time.Second
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	start := time.Now()
	var lateHits, lateTotal int
	for now := range tick.C {
		if now.Sub(start) > run {
			break
		}
		s := &sink{}
		h, _ := p.Take(ta, "m", s)
		if h != nil {
			s.h = h
			h.Endpoint().Close()
		}
		if now.Sub(start) > run-time.Second {
			lateTotal++
			if h != nil {
				lateHits++
			}
		}
	}
	hitRate := float64(lateHits) / float64(lateTotal)
	t.Logf("last second: %d/%d hits (%.1f%%), target %d", lateHits, lateTotal, 100*hitRate, p.Target(ta))
	if hitRate < 0.95 {
		t.Fatalf("hit rate %.1f%% in the last second of a steady load, want at least 95%%", 100*hitRate)
	}
	if got := p.Target(ta); got <= 1 {
		t.Fatalf("under load the target stayed at %d", got)
	}
	// The busiest window is remembered for 10 s after the load stops.
	deadline := time.Now().Add(15 * time.Second)
	for p.Target(ta) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("15 s after the load stopped the target is %d, want the minimum 1", p.Target(ta))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPoolBackoffSchedule(t *testing.T) {
	m := startMock(t, mockai.Config{StatusCode: 500})
	p := newTestPool(t, PoolConfig{Size: 3})
	ta := target(t, m, "k")
	p.Prime(ta, "m")
	time.Sleep(2 * time.Second)
	// First round: 3 dials; then one probe after 0.5 s and after 1 s more.
	if n := len(m.Records()); n < 3 || n > 6 {
		t.Fatalf("%d dials in 2 s against an upstream answering 500", n)
	}
}

// A client's unusual query makes a key of its own: it gets warm sockets
// while it is used, and none (and no bookkeeping) once it is not, while the
// configured upstream keeps its floor.
func TestPoolForgetsOneOffKeys(t *testing.T) {
	m := startMock(t, mockai.Config{})
	p := newTestPool(t, PoolConfig{Size: 1, MaxIdle: 200 * time.Millisecond})
	primed, oneOff := target(t, m, "k"), target(t, m, "k")
	q := oneOff.URL.Query()
	q.Set("junk", "1")
	oneOff.URL.RawQuery = q.Encode()
	p.Prime(primed, "m")
	if h, _ := p.Take(oneOff, "m", &sink{}); h != nil {
		t.Fatal("a never-seen key had a warm socket")
	}
	waitFor(t, "the one-off key to warm", func() bool { return p.Warm(oneOff) == 1 })

	p.skew.Store(int64(time.Minute)) // a minute without a connect to it
	if got := p.Target(oneOff); got != 0 {
		t.Fatalf("an idle one-off key still targets %d sockets", got)
	}
	if got := p.Target(primed); got != 1 {
		t.Fatalf("the configured key's target fell to %d", got)
	}
	waitFor(t, "the one-off key's socket to expire", func() bool { return p.Warm(oneOff) == 0 })
	p.forgetIdleKeys(p.now())
	p.mu.Lock()
	n := len(p.keys)
	p.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d keys kept, want only the configured one", n)
	}
	waitFor(t, "the configured key to stay warm", func() bool { return p.Warm(primed) == 1 })
}
