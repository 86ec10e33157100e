package server

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/redistest"
	"rtgate/server/routes"
)

// clusterOf starts n gateways in front of mock sharing the Redis at url.
func clusterOf(t *testing.T, n int, mock *mockai.Server, url string, mutate func(*Settings)) []*gateway {
	t.Helper()
	gs := make([]*gateway, n)
	for i := range gs {
		gs[i] = startGateway(t, mock, func(c *Settings) {
			c.RedisURL = url
			c.RedisTimeout = 50 * time.Millisecond // -race on a shared 2-core box
			c.ClusterLease = 2 * time.Second
			if mock.CertPEM() != nil {
				c.UpstreamRoots = trustMock(t, mock)
			}
			if mutate != nil {
				mutate(c)
			}
		})
	}
	return gs
}

// TestClusterLimitsHoldAcrossInstances: three in-process instances sharing a
// real redis-server enforce one key's max_sessions and connect_rate between
// them, over ws:// and wss:// upstreams.
func TestClusterLimitsHoldAcrossInstances(t *testing.T) {
	rd := redistest.Start(t)
	for _, tc := range []struct {
		name string
		mock func(t *testing.T) *mockai.Server
	}{
		{"ws", func(t *testing.T) *mockai.Server { return startMock(t, mockai.Config{}) }},
		{"wss", startTLSMock},
	} {
		t.Run(tc.name+"/max_sessions", func(t *testing.T) {
			mock := tc.mock(t)
			gs := clusterOf(t, 3, mock, rd.URL(), func(c *Settings) { c.MaxSessionsPerKey = 3 })
			var live []*websocket.Conn
			for _, g := range gs {
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				read(t, c)
				live = append(live, c)
			}
			for i, g := range gs {
				if status, code, _ := dialStatus(t, g, bearer(testMasterKey)); status != 429 || code != "concurrent_sessions_exceeded" {
					t.Fatalf("4th session via instance %d: %d %q, want 429 concurrent_sessions_exceeded", i, status, code)
				}
			}
			_ = live[0].Close()
			waitFor(t, "the first session to end", func() bool { return gs[0].srv.SessionsOpen() == 0 })
			// Instance 2 sees the slot instance 0 gave back (written in the background).
			waitFor(t, "a connect via instance 2 to be admitted", func() bool {
				status, _, _ := dialStatus(t, gs[2], bearer(testMasterKey))
				return status == 0
			})
			for _, c := range live[1:] {
				_ = c.Close()
			}
		})
		t.Run(tc.name+"/connect_rate", func(t *testing.T) {
			rd.Flush() // a full bucket: the previous subtest used this key's
			mock := tc.mock(t)
			gs := clusterOf(t, 3, mock, rd.URL(), func(c *Settings) { c.ConnectRatePerKey = 2 })
			var statuses []int
			for _, g := range gs {
				status, code, h := dialStatus(t, g, bearer(testMasterKey))
				statuses = append(statuses, status)
				if status == 429 && (code != "rate_limit_exceeded" || h.Get("Retry-After") == "") {
					t.Fatalf("429 with code %q, Retry-After %q", code, h.Get("Retry-After"))
				}
			}
			if statuses[0] != 0 || statuses[1] != 0 || statuses[2] != 429 {
				t.Fatalf("three quick connects at 2/s over three instances got %v, want the third refused", statuses)
			}
		})
	}
}

// TestClusterFallsBackWhileRedisIsDown: Redis is killed while sessions are
// open and connects keep coming; none within the instances' shares fails
// for it, none beyond them is admitted, the outage is logged once per
// instance and counted, and when Redis is back (empty) every instance
// writes its counts again and the limit is cluster-wide again.
func TestClusterFallsBackWhileRedisIsDown(t *testing.T) {
	rd := redistest.Start(t)
	mock := startMock(t, mockai.Config{})
	const limit = 12
	gs := clusterOf(t, 3, mock, rd.URL(), func(c *Settings) { c.MaxSessionsPerKey = limit })
	var live []*websocket.Conn
	open := func(g *gateway) {
		t.Helper()
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		live = append(live, c)
	}
	defer func() {
		for _, c := range live {
			_ = c.Close()
		}
	}()
	waitShared(t, gs, 3)
	for i := range 3 {
		open(gs[i])
	}

	rd.Stop()
	waitSharing(t, gs)
	// Each instance admits its share by itself while Redis is down, its
	// own session counted: a third of 12, 3 more each, 12 open in all.
	for i := range 9 {
		open(gs[i%3]) // fails the test if any connect is refused
	}
	for i, g := range gs {
		if status, code, _ := dialStatus(t, g, bearer(testMasterKey)); status != 429 || code != "concurrent_sessions_exceeded" {
			t.Fatalf("Redis down, a 13th session via instance %d: %d %q, want 429: each instance holds its share", i, status, code)
		}
	}
	for i, g := range gs {
		if got := metricValue(t, g, "rtgate_cluster_redis_outages_total"); got != 1 {
			t.Fatalf("instance %d counted %v outages, want 1", i, got)
		}
		if metricValue(t, g, "rtgate_cluster_fallback_admissions_total") < 3 {
			t.Fatalf("instance %d decided %v connects locally, want at least 3", i, metricValue(t, g, "rtgate_cluster_fallback_admissions_total"))
		}
	}

	rd.Start() // empty: counts must be written again
	for i, g := range gs {
		waitFor(t, "instance "+strconv.Itoa(i)+" to use redis again", func() bool {
			return metricValue(t, g, "rtgate_cluster_redis_up") == 1
		})
	}
	waitFor(t, "redis to hold all 12 sessions", func() bool { return redisSessions(t, gs[0]) == limit })
	for i, g := range gs {
		if status, code, _ := dialStatus(t, g, bearer(testMasterKey)); status != 429 || code != "concurrent_sessions_exceeded" {
			t.Fatalf("after recovery, a 13th session via instance %d: %d %q, want 429", i, status, code)
		}
	}
}

// redisSessions sums the key's per-instance counts as stored in Redis
// (field <instance>; <instance># is the sequence number of its last write).
func redisSessions(t *testing.T, g *gateway) int {
	t.Helper()
	st := g.srv.store
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m, err := st.Client.HGetAll(ctx, st.Key("sessions", routes.MasterKeyName)).Result()
	if err != nil {
		return -1
	}
	n := 0
	for f, v := range m {
		if strings.HasSuffix(f, "#") { // a count's sequence number, not a count
			continue
		}
		c, _ := strconv.Atoi(v)
		n += c
	}
	return n
}

// TestClusterConfigErrors: a REDIS_URL that does not parse is a startup
// error naming the variable, without its password.
func TestClusterConfigErrors(t *testing.T) {
	_, err := New(func() Settings {
		c := Defaults()
		c.RedisURL = "redis://user:hunter2@127.0.0.1:1/notadb"
		return c
	}(), nil)
	if err == nil || !strings.Contains(err.Error(), "REDIS_URL") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad REDIS_URL gave %v", err)
	}
}

// pendingWriter sends after right behind the request head and later a
// little after it, while the gateway is still waiting for Redis.
type pendingWriter struct {
	net.Conn
	after, later []byte
	sent         bool
}

func (c *pendingWriter) Write(p []byte) (int, error) {
	if c.sent || !bytes.HasSuffix(p, []byte("\r\n\r\n")) {
		return c.Conn.Write(p)
	}
	c.sent = true
	if _, err := c.Conn.Write(append(append([]byte(nil), p...), c.after...)); err != nil {
		return 0, err
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = c.Conn.Write(c.later)
	}()
	return len(p), nil
}

// TestClusterAdmissionKeepsEarlyClientBytes: while the Redis check is out
// (Redis paused for 300 ms), frames the client sends behind its request, and
// after it, are kept and forwarded in order once the session opens.
func TestClusterAdmissionKeepsEarlyClientBytes(t *testing.T) {
	rd := redistest.Start(t)
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) {
		c.RedisURL, c.RedisTimeout, c.MaxSessionsPerKey = rd.URL(), 5*time.Second, 5
	})
	var frames []byte
	for i := range 3 {
		frames = append(frames, clientFrame(0x81, sessionUpdate(i), true)...)
	}
	split := len(clientFrame(0x81, sessionUpdate(0), true)) + 5 // frame 0 and 5 bytes of frame 1
	d := dialer()
	d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return &pendingWriter{Conn: conn, after: frames[:split], later: frames[split:]}, err
	}
	rd.Pause(300 * time.Millisecond)
	start := time.Now()
	c := dialWith(t, d, g.url("model=gpt-realtime"), bearer(testMasterKey))
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("the 101 came after %v: the admission did not wait for the paused Redis (fallbacks %v, calls %v)", waited, metricValue(t, g, "rtgate_cluster_fallback_admissions_total"), metricValue(t, g, "rtgate_cluster_admit_seconds_count"))
	}
	expectPipelined(t, c, 3)
	if got := metricValue(t, g, "rtgate_cluster_fallback_admissions_total"); got != 0 {
		t.Fatalf("%v connects fell back; the 5 s budget should have covered the pause", got)
	}
}
