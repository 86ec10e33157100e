package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"rtgate/server/admin"
	"rtgate/server/balance"
	"rtgate/server/routes"
	"rtgate/server/transcript"
	"rtgate/upstream"
)

// newRegistry is the instance's metrics registry, with the Go runtime's
// and the process's collectors; each part registers its own metrics on it
// (the sessions', session.New; the pools', the balancer's, the front door's).
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newDialFailures is the counter of failed upstream dials, shared by the
// balancer (probes and failover) and the sessions.
func newDialFailures(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_upstream_dial_failures_total",
		Help: "Upstream dials for client connects that failed (each failover attempt counts)."}, []string{"model_group"})
	reg.MustRegister(c)
	return c
}

// ServeAdmin serves the admin port on ln until the listener closes:
// /metrics (Prometheus text format), /debug/pprof/, /status and
// /playground (server/admin), for loopback Hosts only.
func (s *Server) ServeAdmin(ln net.Listener) error {
	s.admin.Listening(ln.Addr())
	srv := &http.Server{Handler: s.admin.Handler(s.ctx), ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}

// adminGateway is the gateway as the admin port reads it. The sessions'
// manager is made after the admin server (it needs the admin's origin), so
// these read it when called.
func adminGateway(s *Server) admin.Gateway {
	return admin.Gateway{
		Routes:         s.routes.Load,
		Draining:       s.draining.Load,
		Pool:           func() *upstream.Pool { return s.pool },
		Sessions:       func() int { return s.sessions.Count() },
		SessionCounts:  func() (byGroup, byKey, byProtocol map[string]int) { return s.sessions.Counts() },
		SessionsEnded:  func() float64 { return s.sessions.SessionsEnded() },
		Deployment:     func(d *routes.Deployment) balance.HostStatus { return s.balancer.Snapshot(d) },
		ClientListener: func() (net.Addr, bool) { return s.front.Addr(), s.tlsConfig != nil },
		SessionViews: func() []admin.SessionView {
			var out []admin.SessionView
			for _, d := range s.sessions.Describe() {
				out = append(out, admin.SessionView{ID: d.ID, KeyName: d.KeyName, ModelGroup: d.ModelGroup, Protocol: d.Protocol,
					StartedAt: d.StartedAt, Kept: d.Kept})
			}
			return out
		},
		Conversation: func(id string) *transcript.Record { return s.sessions.Conversation(id) },
		MintSecret: func(ctx context.Context, table *routes.Table, key *routes.ClientKey, body []byte) admin.Answer {
			a := s.api.MintSecretFor(ctx, table, key, body, false)
			if r := a.Refused; r != nil {
				return admin.Answer{Status: r.Status, ErrType: r.Type, ErrCode: r.Code, ErrMsg: r.Message}
			}
			return admin.Answer{Status: a.Status, Body: a.Body}
		},
	}
}
