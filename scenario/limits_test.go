package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/proc"
	"rtgate/server/redistest"
)

// The key of TestSharedLimitHoldsOnABusyHost and what its clients try.
const (
	teamKey      = "sk-scenario-team"
	maxSessions  = 30
	instances    = 3
	attempts     = 2 * maxSessions // sessions the clients try to hold at once
	tries        = 5               // a refused client's attempts in all
	retryEvery   = 200 * time.Millisecond
	limitRounds  = 3
	burners      = 2
	burnerBudget = time.Minute // a burner's own bound; the test kills it sooner
)

// limitConfig is a CONFIG_FILE with one model and the team key, whose
// max_sessions is the limit under test. The gateway's other settings are
// its defaults (REDIS_TIMEOUT_MS, CLUSTER_INSTANCES or what replaces it).
func limitConfig(mock *proc.Mockai) string {
	return fmt.Sprintf(`model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_base: %s
      api_key: os.environ/OPENAI_API_KEY
keys:
  - name: team
    key: os.environ/SCENARIO_TEAM_KEY
    models: [gpt-realtime]
    max_sessions: %d
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
`, mock.Base, maxSessions)
}

// TestSharedLimitHoldsOnABusyHost: three gateway instances share one
// redis-server, two CPU burners keep the host busy, and 60 clients at once
// (20 on each instance) try to hold a session with a key whose max_sessions
// is 30, retrying a few times when refused, three rounds over. Every round
// ends with exactly 30 held: never more (the limit, whether Redis answered
// within its budget or the instances fell back to their shares of it), and
// never fewer (every session under the limit is usable: while Redis
// answers it decides, and with the clients spread evenly the three shares
// add up to the limit too); every client without a session was refused
// with 429 concurrent_sessions_exceeded. The Redis outages and fallback
// admissions of each round are logged: with the default budget on a busy
// host there may be some, and the counts must hold all the same.
func TestSharedLimitHoldsOnABusyHost(t *testing.T) {
	overBoth(t, func(t *testing.T, up proc.Upstream) {
		rd := redistest.Start(t)
		mock := startMockai(t, up)
		cfg := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(cfg, []byte(limitConfig(mock)), 0o600); err != nil {
			t.Fatal(err)
		}
		var gs []*proc.Gateway
		for range instances {
			gs = append(gs, startGateway(t, mock, map[string]string{
				"CONFIG_FILE": cfg, "REDIS_URL": rd.URL(), "SCENARIO_TEAM_KEY": teamKey}))
		}
		startBurners(t, burners, burnerBudget)
		for round := 1; round <= limitRounds; round++ {
			before := clusterCounts(t, gs)
			held, refused, failed := holdAtOnce(t, gs)
			after := clusterCounts(t, gs)
			outages, fallbacks := after.outages-before.outages, after.fallbacks-before.fallbacks
			what := fmt.Sprintf("round %d over %s", round, up.Scheme())
			t.Logf("%s: %d of %d sessions held at once across %d instances with %d CPU burners (max_sessions %d); %d clients refused with 429 on all %d tries; Redis outages %v, fallback admissions %v",
				what, len(held), attempts, instances, burners, maxSessions, refused, tries, outages, fallbacks)
			for _, c := range held {
				_ = hangUp(c)
				c.Close()
			}
			if len(held) > maxSessions {
				t.Errorf("%s: %d of %d sessions held at once, want at most %d (the key's max_sessions across %d instances sharing Redis, %v Redis outages)",
					what, len(held), attempts, maxSessions, instances, outages)
			}
			if len(failed) > 0 {
				t.Errorf("%s: %d of %d attempts neither held a session nor got 429 concurrent_sessions_exceeded: %v",
					what, len(failed), attempts, failed[:min(len(failed), 5)])
			}
			if len(held) < maxSessions {
				t.Errorf("%s: only %d of the %d sessions under the limit were held (%v Redis outages, %v fallback admissions)",
					what, len(held), maxSessions, outages, fallbacks)
			}
			waitNoSessions(t, gs)
		}
	})
}

// holdAtOnce has attempts clients try at once to open a session with the
// team key, spread evenly over the instances; a client refused with 429
// concurrent_sessions_exceeded tries again every retryEvery, up to tries
// times in all, as a client does that backs off and retries. Nobody hangs
// up meanwhile, so what is held at the end is the most held at once. It
// returns the sessions held (all still open), the clients refused every
// time and what else went wrong.
func holdAtOnce(t *testing.T, gs []*proc.Gateway) (held []*websocket.Conn, refused int, failed []string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for i := range attempts {
		c := newCaller(gs[i%len(gs)])
		c.header = http.Header{"Authorization": {"Bearer " + teamKey}}
		wg.Go(func() {
			for try := 1; ; try++ {
				conn, err := c.open(ctx, c.url, nil)
				var r *refusal
				full := errors.As(err, &r) && r.status == http.StatusTooManyRequests && r.code == "concurrent_sessions_exceeded"
				if full && try < tries {
					time.Sleep(retryEvery)
					continue
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					held = append(held, conn)
				case full:
					refused++
				default:
					failed = append(failed, err.Error())
				}
				return
			}
		})
	}
	wg.Wait()
	return held, refused, failed
}

// clusterTotals are the Redis outage and fallback counters summed over the
// instances.
type clusterTotals struct{ outages, fallbacks float64 }

func clusterCounts(t *testing.T, gs []*proc.Gateway) clusterTotals {
	t.Helper()
	var sum clusterTotals
	for _, g := range gs {
		m, err := scrape(g)
		if err != nil {
			t.Fatal(err)
		}
		sum.outages += counter(m, "rtgate_cluster_redis_outages_total")
		sum.fallbacks += counter(m, "rtgate_cluster_fallback_admissions_total")
	}
	return sum
}

// waitNoSessions waits (at most 10 s) until no instance has a session
// open, so that the next round starts from a count of 0.
func waitNoSessions(t *testing.T, gs []*proc.Gateway) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		open := 0.0
		for _, g := range gs {
			m, err := scrape(g)
			if err != nil {
				t.Fatal(err)
			}
			open += counter(m, "rtgate_sessions_open")
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v sessions still open on the instances 10 s after their clients hung up", open)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
