package scenario

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/proc"
)

// poolTarget is the fixed pool size of TestPerClientValuesOpenNoExtraSessions:
// the upstream sessions the gateway may hold beyond the ones it serves.
const poolTarget = 4

// TestPerClientValuesOpenNoExtraSessions: what a client adds to its connect
// (a query parameter of its own, a per-user OpenAI-Safety-Identifier
// header) cannot make the gateway open upstream sessions beyond one per
// connect served and the configured pool target: a warm socket is
// interchangeable for every client of a deployment, so such connects are
// served from (or dialed beside) the one pool, never given pools of their
// own. Counted at mockai, over ws:// and wss://.
func TestPerClientValuesOpenNoExtraSessions(t *testing.T) {
	overBoth(t, func(t *testing.T, up proc.Upstream) {
		mock := startMockai(t, up, "-upgrade-delay", "100ms")
		// No idle replacement or ping retirement within the test: every
		// upstream session it counts is one a connect caused.
		g := startGateway(t, mock, map[string]string{"REALTIME_POOL_SIZE": fmt.Sprint(poolTarget),
			"REALTIME_POOL_MAX_IDLE_SECS": "600", "REALTIME_POOL_PING_SECS": "0"})
		c := newCaller(g)
		// One ordinary connect first, so that the deployment's pool exists
		// however lazily it is made; then the counts start from a full pool.
		if err := c.openAndHangUp(context.Background(), c.url, nil); err != nil {
			t.Fatalf("an ordinary connect: %v", err)
		}

		cases := []struct {
			what     string
			connects int
			connect  func(i int) (url string, h http.Header)
		}{
			{"connects each with its own query parameter (&nonce=N)", 40, func(i int) (string, http.Header) {
				return fmt.Sprintf("%s&nonce=%d", c.url, i), nil
			}},
			{"connects each with its own OpenAI-Safety-Identifier", 10, func(i int) (string, http.Header) {
				return c.url, http.Header{"Openai-Safety-Identifier": {fmt.Sprintf("user-%d", i)}}
			}},
		}
		for _, tc := range cases {
			before := settledUpgrades(t, g, mock)
			var served atomic.Int64
			res := &loadResult{}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			load.ForEach(ctx, tc.connects, 4, func(i int) {
				url, h := tc.connect(i)
				err := c.openAndHangUp(ctx, url, h)
				if err == nil {
					served.Add(1)
				}
				res.add(err)
			})
			cancel()
			opened := settledUpgrades(t, g, mock) - before
			what := fmt.Sprintf("%d %s over %s", tc.connects, tc.what, up.Scheme())
			t.Logf("%s: %d served, %d upstream sessions opened (pool target %d)", what, served.Load(), opened, poolTarget)
			if res.ok < tc.connects {
				t.Errorf("%s: %d of %d failed: %s", what, tc.connects-res.ok, tc.connects, res.failureSummary())
			}
			if limit := served.Load() + poolTarget; opened > limit {
				t.Errorf("%s: %d upstream sessions opened, want at most %d (%d connects served + the pool target %d): %d beyond",
					what, opened, limit, served.Load(), poolTarget, opened-limit)
			}
		}
	})
}

// openAndHangUp opens a session at url with extra headers and hangs up.
func (c *caller) openAndHangUp(ctx context.Context, url string, extra http.Header) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	conn, err := c.open(ctx, url, extra)
	if err != nil {
		return err
	}
	defer conn.Close()
	return hangUp(conn)
}

// settledUpgrades waits until the gateway's pools are full (warm sockets
// = target, over every pool) and mockai's upgrade count has not moved for
// half a second (five times its upgrade delay), at most 15 s, and returns
// that count: the upstream sessions opened so far, dials in flight landed.
func settledUpgrades(t *testing.T, g *proc.Gateway, mock *proc.Mockai) int64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	last, since := int64(-1), time.Now()
	for {
		n := mockStats(t, mock).Upgrades
		if n != last {
			last, since = n, time.Now()
		}
		m, err := scrape(g)
		if err != nil {
			t.Fatal(err)
		}
		warm, _ := m.Sum("rtgate_pool_warm_sockets")
		target, _ := m.Sum("rtgate_pool_target_sockets")
		if warm >= target && time.Since(since) >= 500*time.Millisecond {
			return n
		}
		if time.Now().After(deadline) {
			t.Logf("the upstream sessions did not settle within 15 s (%d opened, %v of %v pool sockets warm): counting what there is", n, warm, target)
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}
