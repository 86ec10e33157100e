package server

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/upstream"
)

// livePoolTarget is the pooled target of the environment setup's GPT-Live
// deployment.
func livePoolTarget(g *gateway) upstream.Target {
	u, h := g.srv.routes.Load().Groups["gpt-live-1"][0].Address(nil)
	return upstream.Target{URL: u, Header: h}
}

// startLive opens a Live session through g with an independent client and
// returns it once session.started arrived.
func startLive(t *testing.T, g *gateway) *websocket.Conn {
	t.Helper()
	c := dialWith(t, dialer(), g.liveURL(), bearer(testMasterKey))
	send(t, c, map[string]any{"type": "session.start", "session": map[string]any{"model": "gpt-live-1"}})
	if e := read(t, c); e.typ() != "session.started" || e.str("session", "model") != "gpt-live-1" {
		t.Fatalf("first event %v, want session.started", e)
	}
	return c
}

// endLive closes a Live session the way the SDK does: session.close, then
// session.closed, then the close handshake.
func endLive(t *testing.T, c *websocket.Conn) {
	t.Helper()
	send(t, c, map[string]any{"type": "session.close"})
	readUntil(t, c, "session.closed")
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
}

// TestLivePoolSession: with LIVE_POOL_SIZE the gateway holds upgraded,
// unstarted sockets to the Live deployment (the upstream sees upgrades and
// no session), a client's session starts on one (its session.start,
// rewritten, goes first; the record says pool_hit) and the pool refills;
// ws:// and wss:// upstreams.
func TestLivePoolSession(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			mock := startMock(t, up.cfg)
			logPath := filepath.Join(t.TempDir(), "usage.jsonl")
			g := startAppGateway(t, mock, func(c *Settings) {
				c.LivePool.Size, c.UsageLog = 1, logPath
			})
			ta := livePoolTarget(g)
			waitFor(t, "an unstarted socket in the Live pool", func() bool { return g.srv.livePool.Warm(ta) == 1 })
			if n, live := mock.Stats().Upgrades, len(mock.LiveSessions()); n != 1 || live != 0 {
				t.Fatalf("before any client: %d upgrades and %d Live sessions, want 1 and 0", n, live)
			}
			c := startLive(t, g)
			if n := len(mock.LiveSessions()); n != 1 {
				t.Fatalf("%d Live sessions upstream, want 1", n)
			}
			waitFor(t, "the Live pool to refill", func() bool { return g.srv.livePool.Warm(ta) == 1 })
			endLive(t, c)
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			rec := oneRecord(t, g, logPath)
			if !rec.PoolHit || rec.Protocol != "live" || rec.Unconfirmed {
				t.Fatalf("record: pool_hit %v protocol %q unconfirmed %v", rec.PoolHit, rec.Protocol, rec.Unconfirmed)
			}
		})
	}
}

// TestLivePoolUpstreamDropsUnstarted: an upstream that closes sockets on
// which no session.start came (mockai's StartTimeout: an error event and
// close 4000; how long OpenAI waits is not documented) costs the clients
// nothing: the pool replaces what it loses, and every client's session
// starts, from the pool or a fresh dial, never on a socket the upstream
// gave up on.
func TestLivePoolUpstreamDropsUnstarted(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			cfg := up.cfg
			cfg.Live = mockai.LiveConfig{StartTimeout: 150 * time.Millisecond}
			mock := startMock(t, cfg)
			g := startAppGateway(t, mock, func(c *Settings) { c.LivePool.Size = 2 })
			ta := livePoolTarget(g)
			waitFor(t, "pooled sockets dropped by the upstream to be replaced", func() bool {
				return mock.Stats().Upgrades >= 4 && g.srv.livePool.Warm(ta) >= 1
			})
			for range 4 {
				c := startLive(t, g)
				endLive(t, c)
				time.Sleep(60 * time.Millisecond) // let the upstream drop a few more
			}
		})
	}
}
