package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/cluster"
	"rtgate/server/redistest"
)

// limiterOf is g's cluster limiter (REDIS_URL set).
func limiterOf(t *testing.T, g *gateway) *cluster.Limiter {
	t.Helper()
	l, ok := g.srv.admitter.(*cluster.Limiter)
	if !ok {
		t.Fatalf("the gateway's admitter is a %T, not the cluster limiter", g.srv.admitter)
	}
	return l
}

// waitShared waits until every instance of gs would take its outage share
// over n instances: each has learned them all from Redis and been seen by
// every other (before that an instance left alone admits nothing).
func waitShared(t *testing.T, gs []*gateway, n int) {
	t.Helper()
	waitFor(t, "every instance to count "+strconv.Itoa(n)+" instances and be seen by the others", func() bool {
		for _, g := range gs {
			if limiterOf(t, g).Instances() != n {
				return false
			}
		}
		return true
	})
}

// waitSharing waits until every instance of gs decides alone by its share
// (Redis away): it admits none of a limited key's sessions until the others
// would count it at its share, or Redis refuses connections.
func waitSharing(t *testing.T, gs []*gateway) {
	t.Helper()
	waitFor(t, "every instance to decide alone by its share", func() bool {
		for _, g := range gs {
			if !limiterOf(t, g).Sharing() {
				return false
			}
		}
		return true
	})
}

// waitSynced waits until every instance has synced with Redis twice more
// (so that what each knows of every key's count is from after this call).
func waitSynced(t *testing.T, gs []*gateway) {
	t.Helper()
	marks := make([]uint64, len(gs))
	for i, g := range gs {
		marks[i] = limiterOf(t, g).Syncs()
	}
	waitFor(t, "every instance to sync twice more", func() bool {
		for i, g := range gs {
			if limiterOf(t, g).Syncs() < marks[i]+2 {
				return false
			}
		}
		return true
	})
}

// tryOpen connects to g with the master key: the open session (which the
// test must close), or the refusal's status, code and message.
func tryOpen(t *testing.T, g *gateway) (c *websocket.Conn, status int, code, message string) {
	t.Helper()
	c, resp, err := dialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey))
	if err == nil {
		read(t, c) // session.created
		return c, 0, "", ""
	}
	status, code, message = refusalOf(t, resp, err)
	return nil, status, code, message
}

// TestClusterLimitHoldsWhileRedisIsAway: three instances sharing a real
// redis-server hold 24 of a key's 30 sessions, spread unevenly (5, 14, 5).
// Redis then stops answering (SIGSTOP: every call waits) while connects
// keep coming to every instance: together they never hold more than 30,
// since each admits only its share (the one holding 14, more than its
// third, admits none), and each refusal says so. A fourth instance started
// during the outage admits none of the key's sessions and says why. Once
// Redis answers again, all four decide in Redis and the 30 are usable to
// the last. Over ws:// and wss:// upstreams.
func TestClusterLimitHoldsWhileRedisIsAway(t *testing.T) {
	rd := redistest.Start(t)
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, _ func(*Settings)) {
		rd.Flush()
		const limit = 30
		limited := func(c *Settings) { c.MaxSessionsPerKey = limit }
		gs := clusterOf(t, 3, mock, rd.URL(), limited)
		waitShared(t, gs, 3)

		held := 0
		open := func(g *gateway, n int) {
			t.Helper()
			for range n {
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				read(t, c)
				held++
			}
		}
		open(gs[0], 5)
		open(gs[1], 14)
		open(gs[2], 5)
		waitSynced(t, gs)

		rd.Freeze()
		thawed := false
		defer func() {
			if !thawed {
				rd.Thaw()
			}
		}()
		waitSharing(t, gs)
		admitted := make([]int, len(gs))
		for range 4 { // more tries than any share holds
			for i, g := range gs {
				c, status, code, msg := tryOpen(t, g)
				if c != nil {
					t.Cleanup(func() { _ = c.Close() })
					admitted[i]++
					held++
					continue
				}
				if status != 429 || code != "concurrent_sessions_exceeded" || !strings.Contains(msg, "share") {
					t.Fatalf("instance %d, Redis away: %d %q %q; want 429 concurrent_sessions_exceeded naming its share", i, status, code, msg)
				}
			}
		}
		t.Logf("Redis away: the instances admitted %v more, %d held of %d", admitted, held, limit)
		if held > limit {
			t.Fatalf("the instances held %d sessions of a key whose max_sessions is %d while Redis was away (admitted %v)", held, limit, admitted)
		}
		if admitted[0]+admitted[2] == 0 {
			t.Fatalf("no instance admitted any of the %d free sessions while Redis was away: a share should", limit-24)
		}
		if admitted[1] != 0 {
			t.Fatalf("the instance holding 14, more than its third, admitted %d", admitted[1])
		}
		for i, g := range gs {
			if metricValue(t, g, "rtgate_cluster_redis_outages_total") < 1 || metricValue(t, g, "rtgate_cluster_fallback_admissions_total") < 1 {
				t.Fatalf("instance %d counted no outage or no connect decided alone", i)
			}
		}

		// An instance that starts now has learned no count of the instances.
		var logs syncBuffer
		late := startGatewayLog(t, mock, func(c *Settings) {
			c.RedisURL = rd.URL()
			c.RedisTimeout = 50 * time.Millisecond
			c.ClusterLease = 2 * time.Second
			c.MaxSessionsPerKey = limit
			if mock.CertPEM() != nil {
				c.UpstreamRoots = trustMock(t, mock)
			}
		}, slog.New(slog.NewTextHandler(&logs, nil)))
		for range 2 {
			c, status, code, msg := tryOpen(t, late)
			if c != nil {
				_ = c.Close()
				t.Fatal("an instance started while Redis was away admitted a session of a limited key")
			}
			if status != 429 || code != "concurrent_sessions_exceeded" || !strings.Contains(msg, "not yet learned how many instances") {
				t.Fatalf("the late instance's refusal: %d %q %q", status, code, msg)
			}
		}
		if metricValue(t, late, "rtgate_cluster_no_share_refusals_total") != 2 {
			t.Fatalf("the late instance counted %v refusals for want of a share, want 2", metricValue(t, late, "rtgate_cluster_no_share_refusals_total"))
		}
		if !strings.Contains(logs.String(), "it has none yet") {
			t.Fatalf("the late instance did not log that it has no share: %s", logs.String())
		}

		rd.Thaw()
		thawed = true
		all := append(gs, late)
		for i, g := range all {
			waitFor(t, "instance "+strconv.Itoa(i)+" to decide in redis again", func() bool {
				return metricValue(t, g, "rtgate_cluster_redis_up") == 1
			})
		}
		waitFor(t, "redis to count every held session", func() bool { return redisSessions(t, gs[0]) == held })
		for i := 0; held < limit; i++ {
			g := all[i%len(all)]
			c, status, code, msg := tryOpen(t, g)
			if c == nil {
				t.Fatalf("with %d of %d held and Redis back, a connect got %d %q %q", held, limit, status, code, msg)
			}
			t.Cleanup(func() { _ = c.Close() })
			held++
		}
		for i, g := range all {
			if c, status, code, _ := tryOpen(t, g); c != nil || status != 429 || code != "concurrent_sessions_exceeded" {
				if c != nil {
					_ = c.Close()
				}
				t.Fatalf("with all %d held, a connect via instance %d got %d %q, want 429", limit, i, status, code)
			}
		}
	})
}

// TestBudgetShareWhileRedisIsAway: two instances share team-a's budget of
// 0.03 USD through a real Redis; one response (0.00556) is spent. Redis
// then stops answering (SIGSTOP): an instance may let the key spend only
// its half of the 0.02444 that remained (to 0.01778), so a session there is
// ended after its third response (the one that takes it over, as budgets
// always end), not its fifth (the whole budget), and the next connect is
// refused saying why; an instance started during the outage refuses the
// key at once, since it cannot know what the others spent.
func TestBudgetShareWhileRedisIsAway(t *testing.T) {
	rd := redistest.Start(t)
	m := startMock(t, mockai.Config{AudioDeltas: 4, AudioDeltaBytes: 9600})
	path := budgetConfig(t, m, "0.03")
	mutate := func(c *Settings) {
		c.RoutesFile, c.RedisURL = path, rd.URL()
		c.RedisTimeout = 50 * time.Millisecond
		c.ClusterLease = 2 * time.Second
	}
	a, b := startGateway(t, nil, mutate), startGateway(t, nil, mutate)
	waitShared(t, []*gateway{a, b}, 2)
	team := "sk-team-a-test"
	c := a.dial(t, "model=gpt-realtime", bearer(team))
	read(t, c)
	respond(t, c)
	_ = c.Close()
	waitFor(t, "instance b to see the first response's spend", func() bool {
		return budgetSpent(t, b, "team-a") >= responseCost
	})

	rd.Freeze()
	defer rd.Thaw()
	waitFor(t, "instance a's budget sync to fail", func() bool { return gathered(t, a.srv.reg, "rtgate_budget_sync_cut") == 1 })

	c = a.dial(t, "model=gpt-realtime", bearer(team))
	read(t, c)
	// 0.00556 + 2 × 0.00556 = 0.01668 is under the 0.01778 instance a may
	// reach: the third response takes it over and ends the session.
	for range 3 {
		respond(t, c)
	}
	if e := read(t, c); e.typ() != "error" || e.str("error", "code") != "budget_exceeded" {
		t.Fatalf("after three responses with Redis away, got %v, want budget_exceeded: instance a may spend only its half of what remained", e)
	}
	if ce := closeOf(t, c); ce.Code != 1008 {
		t.Fatalf("close %d, want 1008", ce.Code)
	}
	refusedForBudget(t, a, team)

	late := startGateway(t, nil, mutate)
	refusedForBudget(t, late, team)
}

// TestFailedStartLeavesNoLease: a gateway whose New fails after it joined
// the instances sharing a Redis (here USAGE_LOG cannot be opened) leaves
// no lease behind, so the others do not count it, and shrink their shares
// of each key's limits for it, until the lease runs out.
func TestFailedStartLeavesNoLease(t *testing.T) {
	rd := redistest.Start(t)
	cfg := Defaults()
	cfg.MasterKey, cfg.UpstreamKey, cfg.AdminAddr = testMasterKey, testUpstreamKey, ""
	cfg.RedisURL = rd.URL()
	cfg.UsageLog = filepath.Join(t.TempDir(), "no-such-folder", "usage.jsonl")
	if _, err := New(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "USAGE_LOG") {
		t.Fatalf("New with an unopenable USAGE_LOG: %v, want its error", err)
	}
	st, err := cluster.NewStore(rd.URL(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := st.Client.ZCard(context.Background(), st.InstancesKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d instances hold a lease after a start that failed, want 0", n)
	}
}
