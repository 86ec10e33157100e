package server

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/upstream"
)

// TestHealthWarmsFromPoolState: a gateway with REALTIME_POOL_STATE and no
// state yet is ready at once (a cold start, as without the setting); it sees
// a burst and shuts down, writing its demand. The gateway that replaces it
// on the same state file starts sized for that burst and answers /health
// and /health/readiness 503 {"status":"warming"} (liveness stays 200) until
// its pool holds most of the restored target, then 200.
func TestHealthWarmsFromPoolState(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		// Upgrades take a second, so the restored pool takes that long to
		// fill and its warming is seen whatever the machine's speed.
		mock := startPoolMock(t, mockai.Config{UpgradeDelay: time.Second}, tls)
		state := filepath.Join(t.TempDir(), "pool-state.json")
		auto := func(c *Settings) {
			c.Pool.Auto, c.Pool.Min, c.Pool.Max = true, 1, 512
			c.PoolState = state
			c.Pool.WarmupBound = time.Minute // ready because warm, not because of the bound
		}
		health := func(g *gateway, path string) (int, any) {
			req, _ := http.NewRequest("GET", "http://x"+path, nil)
			status, body := httpDo(t, g, req)
			return status, body["status"]
		}

		first := startPoolGateway(t, mock, 0, auto)
		if status, s := health(first, "/health"); status != 200 || s != "ok" {
			t.Fatalf("cold start without state: /health %d %v, want 200 ok", status, s)
		}
		var clients []*websocket.Conn
		for range 20 { // a burst: each connect takes from the pool or misses at once
			clients = append(clients, first.dial(t, "model=gpt-realtime", bearer(testMasterKey)))
		}
		for _, c := range clients {
			if e := read(t, c); e.typ() != "session.created" {
				t.Fatalf("burst connect got %v", e.typ())
			}
			_ = c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = first.srv.Shutdown(ctx) // writes the state
		remembered, err := upstream.FileMemory{Path: state}.Load(ctx, time.Now())
		if err != nil || remembered[upstream.Key(first.srv.defaultTarget())].Rate <= 0 {
			t.Fatalf("state after shutdown: %v, %v; want the burst's rate", remembered, err)
		}

		second := startPoolGateway(t, mock, 0, auto)
		for _, p := range []string{"/health", "/health/readiness"} {
			if status, s := health(second, p); status != 503 || s != "warming" {
				t.Fatalf("restart with remembered demand: %s %d %v, want 503 warming", p, status, s)
			}
		}
		if status, s := health(second, "/health/liveliness"); status != 200 {
			t.Fatalf("liveness while warming: %d %v, want 200", status, s)
		}
		ta := second.srv.defaultTarget()
		target := second.srv.Pool().Target(ta)
		if target < 1+2*20 {
			t.Fatalf("restored target %d, want at least the burst's 41", target)
		}
		waitFor(t, "/health to say ok", func() bool { status, _ := health(second, "/health"); return status == 200 })
		if warm := second.srv.Pool().Warm(ta); float64(warm) < 0.9*float64(target) {
			t.Fatalf("ready with %d of %d warm, want most of the restored target", warm, target)
		}
	})
}
