package server

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/mockai"
	"rtgate/poller"
	"rtgate/server/admin"
	"rtgate/server/routes"
	"rtgate/upstream"
)

// BenchmarkStatus: one sample (the sampler's work each second) and one
// /status.json report, with 10,000 sessions in the registry and one pooled
// key. The registry is the sessions' own (server/session); here the admin
// page reads a stand-in of 10,000 entries, walked under a lock as
// session.Manager.Counts walks its map, so that the page's work is measured
// with a registry of that size without 10,000 real sessions. Its pool is
// wired as New wires the gateway's (its metrics teed into the page's own
// registry).
func BenchmarkStatus(b *testing.B) {
	// A server that is not serving: no watchdog walks, no pool of its own.
	cfg := Defaults()
	cfg.MasterKey = testMasterKey
	cfg.UpstreamKey = testUpstreamKey
	cfg.AdminAddr = ""
	mock := startMock(b, mockai.Config{})
	cfg.APIBase, _ = ParseAPIBase(mock.BaseURL())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	type entry struct{ group, key, protocol string }
	var mu sync.Mutex
	registry := map[*poller.Session]entry{}
	for range 10000 {
		registry[new(poller.Session)] = entry{"gpt-realtime", "bench", routes.ProtocolRealtime}
	}
	var pool *upstream.Pool
	gw := adminGateway(srv)
	gw.Pool = func() *upstream.Pool { return pool }
	gw.Sessions = func() int { mu.Lock(); defer mu.Unlock(); return len(registry) }
	gw.SessionCounts = func() (byGroup, byKey, byProtocol map[string]int) {
		byGroup, byKey, byProtocol = map[string]int{}, map[string]int{}, map[string]int{}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range registry {
			byGroup[e.group]++
			byKey[e.key]++
			byProtocol[e.protocol]++
		}
		return byGroup, byKey, byProtocol
	}
	page := admin.New(gw, srv.reg, nil, cfg.Port)
	pool = upstream.NewPool(srv.dialer, upstream.PoolConfig{Size: 2}, log, upstream.NewPoolMetrics(page.Tee(prometheus.NewRegistry())))
	b.Cleanup(pool.Close)
	pool.Prime(srv.defaultTarget(), "gpt-realtime")
	for pool.Warm(srv.defaultTarget()) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		page.Sample(time.Now())
	}
	b.Run("sample", func(b *testing.B) {
		for b.Loop() {
			page.Sample(time.Now())
		}
	})
	b.Run("report", func(b *testing.B) {
		for b.Loop() {
			page.Report(time.Now())
		}
	})
}
