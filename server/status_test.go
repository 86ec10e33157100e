package server

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"rtgate/mockai"
	"rtgate/poller"
	"rtgate/server/routes"
)

// BenchmarkStatus: one sample (the sampler's work each second) and one
// /status.json report, with 10,000 sessions in the registry and one pooled
// key.
func BenchmarkStatus(b *testing.B) {
	// A server that is not serving: no watchdog walks the fake sessions.
	cfg := Defaults()
	cfg.MasterKey = testMasterKey
	cfg.UpstreamKey = testUpstreamKey
	cfg.AdminAddr = ""
	cfg.Pool.Size = 2
	mock := startMock(b, mockai.Config{})
	cfg.APIBase, _ = ParseAPIBase(mock.BaseURL())
	srv, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	primePool(srv.pool, srv.routes.Load())
	for srv.pool.Warm(srv.defaultTarget()) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	key := &routes.ClientKey{Name: "bench"}
	for range 10000 {
		srv.sessions[new(poller.Session)] = &sessionInfo{key: key, group: "gpt-realtime"}
	}
	for range 3 {
		srv.admin.Sample(time.Now())
	}
	b.Run("sample", func(b *testing.B) {
		for b.Loop() {
			srv.admin.Sample(time.Now())
		}
	})
	b.Run("report", func(b *testing.B) {
		for b.Loop() {
			srv.admin.Report(time.Now())
		}
	})
}
