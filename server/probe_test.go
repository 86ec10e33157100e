package server

import (
	"net/http"
	"testing"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/routes"
)

// TestConnectsDialTheDeploymentTheyReserved: whatever path a connect takes
// (a plain one, a transcription session, a client secret's primed session),
// it dials first the deployment it was routed to and holds the slot of:
// the probe of an ejected deployment whose backoff is over, and the
// deployment whose max_parallel_requests slot it took. Two deployments of
// one group, each with max_parallel_requests: 1; the first is ejected and
// its backoff runs out. The first connect must probe it (and so bring it
// back), the second goes to the other deployment, and a third is refused:
// each deployment serves exactly the one session whose slot it holds.
func TestConnectsDialTheDeploymentTheyReserved(t *testing.T) {
	type connect func(t *testing.T, g *gateway) (*websocket.Conn, *http.Response, error)
	kinds := []struct {
		name string
		dial connect
	}{
		{"plain", func(t *testing.T, g *gateway) (*websocket.Conn, *http.Response, error) {
			return dialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey))
		}},
		{"transcription", func(t *testing.T, g *gateway) (*websocket.Conn, *http.Response, error) {
			return dialer().Dial(g.url("intent=transcription&model=gpt-realtime"), bearer(testMasterKey))
		}},
		{"client secret", func(t *testing.T, g *gateway) (*websocket.Conn, *http.Response, error) {
			ek, _ := mint(t, g, testMasterKey, map[string]any{"session": map[string]any{"type": "realtime",
				"model": "gpt-realtime", "instructions": "probe"}})
			return dialSecret(t, g, ek, "")
		}},
	}
	for _, up := range upstreams {
		for _, kind := range kinds {
			t.Run(up.name+"/"+kind.name, func(t *testing.T) {
				probed, other := startMock(t, up.cfg), startMock(t, up.cfg)
				entry := func(m *mockai.Server) string {
					return openaiEntry("gpt-realtime", m) + "\n      max_parallel_requests: 1"
				}
				path := writeConfig(t, "model_list:"+entry(probed)+entry(other)+configTail)
				g := startGateway(t, nil, func(c *Settings) {
					c.RoutesFile = path
					if up.cfg.TLS {
						c.UpstreamRoots = trustMock(t, probed)
						c.UpstreamRoots.AppendCertsFromPEM(other.CertPEM())
					}
				})
				var dep *routes.Deployment
				for _, d := range g.srv.routes.Load().Groups["gpt-realtime"] {
					if d.Base.Host == mustURL(probed.BaseURL()).Host {
						dep = d
					}
				}
				if dep == nil {
					t.Fatal("no deployment for the probed mock")
				}
				ejectUntilDue(t, g, dep)

				session := func(which string) *websocket.Conn {
					c, resp, err := kind.dial(t, g)
					if err != nil {
						t.Fatalf("%s connect: %v (HTTP %d)", which, err, httpStatus(resp))
					}
					t.Cleanup(func() { _ = c.Close() })
					if e := read(t, c); e.typ() != "session.created" {
						t.Fatalf("%s connect: first event %v", which, e)
					}
					return c
				}
				session("first")
				if n, m := len(probed.Records()), len(other.Records()); n != 1 || m != 0 {
					t.Fatalf("the first connect reached the probed deployment %d times and the other %d: "+
						"it must dial the probe it was routed to (and whose slot it holds)", n, m)
				}
				if metricSum(t, g, "rtgate_upstream_ejected") != 0 {
					t.Fatal("the probe was answered but its deployment is still ejected")
				}
				session("second")
				if n, m := len(probed.Records()), len(other.Records()); n != 1 || m != 1 {
					t.Fatalf("after two connects the deployments served %d and %d sessions, want 1 each "+
						"(max_parallel_requests: 1)", n, m)
				}
				c, resp, err := kind.dial(t, g)
				if err == nil {
					_ = c.Close()
					t.Fatal("a third connect was upgraded while both deployments are at max_parallel_requests")
				}
				if httpStatus(resp) != http.StatusTooManyRequests {
					t.Fatalf("third connect: HTTP %d, want 429", httpStatus(resp))
				}
			})
		}
	}
}

// ejectUntilDue ejects d as a failed dial would and waits for its backoff
// to run out, so that the next connect routed to its group probes it.
func ejectUntilDue(t *testing.T, g *gateway, d *routes.Deployment) {
	t.Helper()
	g.srv.balancer.Failed(d, "ejected by the test")
	if metricSum(t, g, "rtgate_upstream_ejected") != 1 {
		t.Fatal("the deployment is not marked ejected")
	}
	waitFor(t, "the ejection's backoff to run out", func() bool {
		st := g.srv.balancer.Snapshot(d)
		return st.State == "ejected" && st.BackoffS == 0
	})
}
