package server

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	prom "github.com/prometheus/client_model/go"

	"rtgate/mockai"
)

// The turn clock (server/turns): a turn is timed from when the upstream had
// what it needed to answer, not from the upstream's response.created, so
// latency-based routing finds the fast deployment even when the upstream
// sends response.created only with its first audio (mockai's
// CreatedWithFirstOutput); tool time, out-of-band responses and failing
// deployments are measured apart.

// latencyPair is two mockai deployments of one group and a gateway
// routing by latency over them.
type latencyPair struct {
	g          *gateway
	a, b       *mockai.Server
	roots      *x509.CertPool // nil over ws://
	depA, depB string
}

// twoDeployments starts two mockai deployments of group gpt-realtime made
// from aCfg and bCfg (tlsUp: wss://) and a gateway routing by latency over
// them with args (routing_strategy_args); mutate changes its settings (a
// pool, continuity).
func twoDeployments(t *testing.T, tlsUp bool, aCfg, bCfg mockai.Config, args string, mutate func(*Settings)) latencyPair {
	t.Helper()
	p := latencyPair{a: startPoolMock(t, aCfg, tlsUp), b: startPoolMock(t, bCfg, tlsUp)}
	if tlsUp {
		p.roots = trustMock(t, p.a)
		p.roots.AppendCertsFromPEM(p.b.CertPEM())
	}
	path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", p.a)+openaiEntry("gpt-realtime", p.b)+`
router_settings:
  routing_strategy: latency-based-routing
  routing_strategy_args: `+args+configTail)
	p.g = startGateway(t, nil, func(c *Settings) {
		c.RoutesFile, c.UpstreamRoots = path, p.roots
		if mutate != nil {
			mutate(c)
		}
	})
	p.depA, p.depB = deploymentOf(t, p.g, p.a), deploymentOf(t, p.g, p.b)
	return p
}

// routingArgs are the routing_strategy_args the turn clock's tests use.
const routingArgs = "{max_latency_list_size: 10, lowest_latency_buffer: 0.5}"

// deploymentOf is the name the gateway gives the group's deployment on m.
func deploymentOf(t *testing.T, g *gateway, m *mockai.Server) string {
	t.Helper()
	for _, d := range g.srv.routes.Load().Groups["gpt-realtime"] {
		if d.Base.Host == hostOf(m) {
			return d.Name
		}
	}
	t.Fatalf("no deployment on %s", m.BaseURL())
	return ""
}

func hostOf(m *mockai.Server) string {
	u, err := ParseAPIBase(m.BaseURL())
	if err != nil {
		panic(err)
	}
	return u.Host
}

// oneTurn runs a session of one turn through g: response.create, its
// response.done, a close; safe from any goroutine (errors returned).
func oneTurn(g *gateway) error {
	c, resp, err := dialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey))
	if err != nil {
		return fmt.Errorf("dial: %w (HTTP %d)", err, httpStatus(resp))
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	until := func(typ string) error {
		for {
			_, p, err := c.ReadMessage()
			if err != nil {
				return fmt.Errorf("waiting for %s: %w", typ, err)
			}
			var ev struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(p, &ev)
			if ev.Type == typ {
				return nil
			}
		}
	}
	if err := until("session.created"); err != nil {
		return err
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create"}`)); err != nil {
		return err
	}
	if err := until("response.done"); err != nil {
		return err
	}
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
	return nil
}

// turnsConcurrently runs n one-turn sessions, at most conc at a time.
func turnsConcurrently(t *testing.T, g *gateway, n, conc int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range conc {
		wg.Go(func() {
			for range next {
				if err := oneTurn(g); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d sessions failed, the first: %v", len(errs), n, errs[0])
	}
	waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

// completedOn is the turns completed on deployment dep so far.
func completedOn(t *testing.T, g *gateway, dep string) float64 {
	t.Helper()
	return gatheredLabels(t, g.srv.reg, "rtgate_turns_total", map[string]string{"deployment": dep, "outcome": "completed"})
}

// closeSession closes c with 1000 and waits for g to have ended its session.
func closeSession(t *testing.T, g *gateway, c *websocket.Conn) {
	t.Helper()
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
	closeOf(t, c)
	waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

// routingSize is the latency routing run's warm-up and measured sessions
// and concurrency: lean in make test; TURNCLOCK_FULL=1 runs the issue's
// 60-session warm-up and 300 sessions at 10 concurrent.
func routingSize() (warm, n, conc int) {
	if full, _ := strconv.ParseBool(os.Getenv("TURNCLOCK_FULL")); full {
		return 60, 300, 10
	}
	return 20, 60, 10
}

// TestLatencyRoutingFindsTheFastDeployment: two deployments whose upstream
// sends response.created only with its first audio, one answering in 20 ms,
// the other in 200 ms. Timed from response.created both looked instant and
// routing was a coin toss (11-51 % on the fast one); timed from the
// forwarded response.create, at least 80 % of the measured turns go to the
// fast one, with the pool on and off, continuity on and off
// (SESSION_CONTINUITY=0), over ws:// and wss://.
func TestLatencyRoutingFindsTheFastDeployment(t *testing.T) {
	const fastDelay, slowDelay = 20 * time.Millisecond, 200 * time.Millisecond
	warm, n, conc := routingSize()
	for _, mode := range []struct {
		name       string
		pool       int
		continuity bool
	}{{"pool=off", 0, true}, {"pool=2", 2, true}, {"pool=off/continuity=off", 0, false}} {
		t.Run(mode.name, func(t *testing.T) {
			poolSchemes(t, func(t *testing.T, tlsUp bool) {
				p := twoDeployments(t, tlsUp,
					mockai.Config{FirstAudioDelay: fastDelay, CreatedWithFirstOutput: true},
					mockai.Config{FirstAudioDelay: slowDelay, CreatedWithFirstOutput: true}, routingArgs,
					func(c *Settings) { c.Pool.Size, c.Continuity = mode.pool, mode.continuity })
				g, fastDep, slowDep := p.g, p.depA, p.depB
				turnsConcurrently(t, g, warm, conc)
				before := completedOn(t, g, fastDep)
				beforeSlow := completedOn(t, g, slowDep)
				turnsConcurrently(t, g, n, conc)
				onFast, onSlow := completedOn(t, g, fastDep)-before, completedOn(t, g, slowDep)-beforeSlow
				share := onFast / (onFast + onSlow)
				t.Logf("%s: %.0f of %.0f turns (%.1f%%) on the 20 ms deployment after a %d-session warm-up, %d concurrent",
					mode.name, onFast, onFast+onSlow, 100*share, warm, conc)
				if onFast+onSlow != float64(n) {
					t.Fatalf("%v turns completed, want %d", onFast+onSlow, n)
				}
				if share < 0.8 {
					t.Fatalf("%.1f%% of turns on the fast deployment, want at least 80%%", 100*share)
				}
			})
		})
	}
}

// TestToolTimeExcluded: a tool chain where the client takes 400 ms to run
// its tool is one turn whose first audio is the deployment's (from the
// client's create after the tool output), and the 400 ms is the client's
// (rtgate_turn_tool_seconds). Timed from the first response.created, the
// tool time was counted as the deployment's latency.
func TestToolTimeExcluded(t *testing.T) {
	const toolTime = 400 * time.Millisecond
	poolSchemes(t, func(t *testing.T, tlsUp bool) {
		mock := startPoolMock(t, mockai.Config{FirstAudioDelay: 20 * time.Millisecond, CreatedWithFirstOutput: true}, tlsUp)
		g := startPoolGateway(t, mock, 0, nil)
		closeSession(t, g, toolChain(t, g, toolTime))
		firstAudio := histogramOfName(t, g, "rtgate_turn_first_audio_seconds")
		tool := histogramOfName(t, g, "rtgate_turn_tool_seconds")
		if firstAudio.GetSampleCount() != 1 || firstAudio.GetSampleSum() >= toolTime.Seconds() {
			t.Errorf("first audio: %d samples, sum %.3f s; want 1, the deployment's (under the client's %v tool time)",
				firstAudio.GetSampleCount(), firstAudio.GetSampleSum(), toolTime)
		}
		if tool.GetSampleCount() != 1 || tool.GetSampleSum() < toolTime.Seconds() {
			t.Errorf("tool time: %d samples, sum %.3f s; want 1 of at least %v", tool.GetSampleCount(), tool.GetSampleSum(), toolTime)
		}
		if got := metricWith(t, g, "rtgate_turns_total", "outcome", "completed"); got != 1 {
			t.Errorf("%v completed turns, want the chain as 1", got)
		}
	})
}

// TestOutOfBandBesideVoice: an out-of-band text response (conversation
// "none", a classifier) sent just before a voice turn's create is measured
// apart: it neither gives the voice turn its first audio nor ends it, and
// the voice turn's figure is its own (from its create, 150 ms of the
// upstream's delay, though the upstream sends response.created only with
// the audio).
func TestOutOfBandBesideVoice(t *testing.T) {
	const delay = 150 * time.Millisecond
	poolSchemes(t, func(t *testing.T, tlsUp bool) {
		mock := startPoolMock(t, mockai.Config{FirstAudioDelay: delay, CreatedWithFirstOutput: true}, tlsUp)
		g := startPoolGateway(t, mock, 0, nil)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		readUntil(t, c, "session.created")
		send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"conversation": "none",
			"output_modalities": []string{"text"}, "instructions": "Classify the user's mood."}})
		time.Sleep(50 * time.Millisecond)
		send(t, c, map[string]any{"type": "response.create"})
		for done := 0; done < 2; {
			if ev := read(t, c); ev.typ() == "response.done" {
				done++
			}
		}
		closeSession(t, g, c)
		voice := histogramOfName(t, g, "rtgate_turn_first_audio_seconds")
		if voice.GetSampleCount() != 1 || voice.GetSampleSum() < 0.9*delay.Seconds() || voice.GetSampleSum() > 5*delay.Seconds() {
			t.Errorf("voice first audio: %d samples, sum %.3f s; want 1, about the upstream's %v", voice.GetSampleCount(),
				voice.GetSampleSum(), delay)
		}
		if got := gatheredLabels(t, g.srv.reg, "rtgate_turn_first_output_seconds", map[string]string{"kind": "out_of_band"}); got != 1 {
			t.Errorf("%v out-of-band first outputs, want 1", got)
		}
		if got := metricWith(t, g, "rtgate_turns_total", "outcome", "completed"); got != 1 {
			t.Errorf("%v completed turns, want the voice turn alone", got)
		}
	})
}

// TestFailingDeploymentLosesItsTraffic: one deployment accepts sessions and
// fails every response (server_error). Each failed turn is a penalty sample,
// so after a few connects latency routing sends it no more than its
// exploration share; before, a failure added no sample and, unmeasured, it
// was tried first.
func TestFailingDeploymentLosesItsTraffic(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tlsUp bool) {
		p := twoDeployments(t, tlsUp, mockai.Config{FirstAudioDelay: 20 * time.Millisecond},
			mockai.Config{FirstAudioDelay: 20 * time.Millisecond, FailResponses: true}, routingArgs, nil)
		g, badDep := p.g, p.depB
		failed := func() float64 {
			return gatheredLabels(t, g.srv.reg, "rtgate_turns_total", map[string]string{"deployment": badDep, "outcome": "failed"})
		}
		turnsConcurrently(t, g, 4, 1) // a few connects: each deployment measured
		before := failed()
		const n = 30
		turnsConcurrently(t, g, n, 1)
		onBad := failed() - before
		t.Logf("%v of %d sessions after the first 4 went to the deployment that fails every response", onBad, n)
		// Its exploration share is 5 % (10 % of connects go to a random
		// one of the two): 1.5 expected; 19 runs gave 0-7, 2.0 on average.
		// More than 8 of 30 comes about one run in 7,000 even at 7 %
		// (the binomial tail). Before penalties about 90 % went there.
		if onBad > 8 {
			t.Fatalf("%v of %d sessions on the failing deployment, want at most 8", onBad, n)
		}
		if got := gatheredLabels(t, g.srv.reg, "rtgate_turn_failures_total", map[string]string{"deployment": badDep}); got < 1 {
			t.Errorf("turn failures on the failing deployment %v, want at least 1", got)
		}
		var status struct {
			Deployments []struct {
				Name     string `json:"name"`
				Failures int    `json:"turn_failures_5m"`
			} `json:"deployments"`
		}
		if err := json.Unmarshal([]byte(httpGet(t, "http://"+g.serveAdmin(t)+"/status.json", nil)), &status); err != nil {
			t.Fatal(err)
		}
		for _, d := range status.Deployments {
			if (d.Name == badDep) != (d.Failures > 0) {
				t.Errorf("status.json: %s turn_failures_5m %d", d.Name, d.Failures)
			}
		}
	})
}

// histogramOfName merges the series of histogram name in g's metrics.
func histogramOfName(t *testing.T, g *gateway, name string) *prom.Histogram {
	t.Helper()
	fams, err := g.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return &prom.Histogram{SampleCount: &n, SampleSum: &sum}
}
