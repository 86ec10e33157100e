package server

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"rtgate/internal/testwait"
	"rtgate/mockai"
	"rtgate/server/redistest"
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
			// MAX bounds the restored pool, so that it fills in a few
			// seconds over TLS on a loaded machine too.
			c.Pool.Auto, c.Pool.Min, c.Pool.Max = true, 1, 48
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
		for range 10 { // a burst: each connect takes from the pool or misses at once
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
		if target < 1+2*10 {
			t.Fatalf("restored target %d, want at least the burst's 21", target)
		}
		waitFor(t, "/health to say ok", func() bool { status, _ := health(second, "/health"); return status == 200 })
		if warm := second.srv.Pool().Warm(ta); float64(warm) < 0.9*float64(target) {
			t.Fatalf("ready with %d of %d warm, want most of the restored target", warm, target)
		}
	})
}

// TestRedisSharedPoolDemand: two gateways on one real Redis. The first sees
// a burst and writes its peak (every few seconds); the second, added while
// the first is live, starts its pool at its share of that peak (half: two
// live instances) and reports warming until the pool holds it. No state
// file: the demand comes only through REDIS_URL.
func TestRedisSharedPoolDemand(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		rd := redistest.Start(t)
		mock := startPoolMock(t, mockai.Config{UpgradeDelay: 500 * time.Millisecond}, tls)
		const maxPool = 96 // bounds the share's pool: it fills in seconds on a loaded machine too
		auto := func(c *Settings) {
			c.Pool.Auto, c.Pool.Min, c.Pool.Max = true, 1, maxPool
			c.RedisURL, c.RedisTimeout = rd.URL(), time.Second
			c.Pool.WarmupBound = time.Minute
		}
		first := startPoolGateway(t, mock, 0, auto)
		ta := first.srv.defaultTarget()
		var clients []*websocket.Conn
		for range 20 {
			clients = append(clients, first.dial(t, "model=gpt-realtime", bearer(testMasterKey)))
		}
		for _, c := range clients {
			if e := read(t, c); e.typ() != "session.created" {
				t.Fatalf("burst connect got %v", e.typ())
			}
			_ = c.Close()
		}
		// The first gateway writes its peak every 5 s.
		rc := redis.NewClient(&redis.Options{Addr: rd.Addr()})
		defer rc.Close()
		demandKey := "rtgate:pool:demand:" + upstream.Key(ta)
		var peak upstream.Remembered
		testwait.For(t, "the first gateway's peak in Redis", func() bool {
			f, _ := rc.HGetAll(context.Background(), demandKey).Result()
			for _, v := range f {
				_ = json.Unmarshal([]byte(v), &peak)
			}
			return len(f) == 1 && peak.Rate > 0
		})

		second := startPoolGateway(t, mock, 0, auto)
		req, _ := http.NewRequest("GET", "http://x/health", nil)
		if status, body := httpDo(t, second, req); status != 503 || body["status"] != "warming" {
			t.Fatalf("an instance added under load: /health %d %v, want 503 warming", status, body)
		}
		// Its share is half the first's peak (two live instances), sized
		// with the first's refill time: 1 + 2 × ceil(rate/2 × 250 ms) ×
		// max(1, refill / 250 ms), less a little for the seconds it faded.
		// The first rewrites its peak every 5 s: what it wrote before or
		// after the second started is what the second read.
		got := second.srv.Pool().Target(ta)
		share := func(peak upstream.Remembered) bool {
			perRefill := max(1, peak.RefillMS/250)
			want := min(1+int(math.Ceil(2*math.Ceil(peak.Rate/2*0.25)*perRefill)), maxPool)
			return got <= want && got >= min(want-int(2*perRefill)-1, maxPool) && got > 1
		}
		before := peak
		f, _ := rc.HGetAll(context.Background(), demandKey).Result()
		for _, v := range f {
			_ = json.Unmarshal([]byte(v), &peak)
		}
		if !share(before) && !share(peak) {
			t.Fatalf("added instance's target %d, want its half share of the first's peak (%.0f/s, refill %.0f ms)",
				got, peak.Rate, peak.RefillMS)
		}
		waitFor(t, "the added instance to be ready", func() bool {
			req, _ := http.NewRequest("GET", "http://x/health", nil)
			status, _ := httpDo(t, second, req)
			return status == 200
		})
	})
}
