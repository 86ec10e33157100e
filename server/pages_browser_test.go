package server

// Tests of the admin pages in a real browser: Debian's headless Chromium (installed by .ci/run
// when missing), driven over the DevTools protocol by chromedp. Chromium's
// fake media devices give the playground a microphone (a beep).
//
// With -screenshots=DIR the tests also write what they saw to DIR
// (make screenshots writes docs/status.png and docs/playground.png).

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image/png"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"
)

const chromiumPath = "/usr/bin/chromium"

var screenshotDir = flag.String("screenshots", "", "write the browser tests' screenshots (status.png, playground.png) to this directory")

// browser is one headless Chromium with one tab, stopped at the end of the
// test (chromedp kills the process it started).
type browser struct {
	t   testing.TB
	ctx context.Context
}

func startBrowser(t testing.TB, width, height int) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the browser tests need Debian's chromium at %s (apt-get install -y chromium; .ci/run does): %v", chromiumPath, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("use-fake-device-for-media-stream", true),
		chromedp.Flag("use-fake-ui-for-media-stream", true),
		// ?autostart=1 starts audio without a click
		chromedp.Flag("autoplay-policy", "no-user-gesture-required"),
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

func (b *browser) navigate(url string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("navigate %s: %v", url, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript predicate until it is truthy; on timeout it
// fails with what the diagnostic expression shows then.
func (b *browser) waitFor(what, predicate, diagnostic string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		b.t.Fatalf("waiting for %s: %v; page shows: %s", what, err, eval[string](b, diagnostic))
	}
}

// viewport emulates a phone-sized viewport (mobile), or resets it.
func (b *browser) viewport(width, height int64, mobile bool) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	act := chromedp.ResetViewport()
	if mobile {
		act = chromedp.EmulateViewport(width, height, chromedp.EmulateMobile, chromedp.EmulateScale(2))
	}
	if err := chromedp.Do(ctx, act); err != nil {
		b.t.Fatalf("viewport: %v", err)
	}
}

// screenshot captures the viewport as PNG, checks that it decodes, and
// writes it to -screenshots when that is set.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil || img.Bounds().Dx() < 300 {
		b.t.Fatalf("screenshot is not a usable PNG: %v", err)
	}
	if *screenshotDir != "" {
		path := filepath.Join(*screenshotDir, name)
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("wrote %s", path)
	}
}

// serveAdmin serves the gateway's admin handler on a free loopback port, as
// cmd/gateway does for ADMIN_ADDR, and returns its host:port.
func (g *gateway) serveAdmin(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.srv.ServeAdmin(ln) }()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

// cellsOf is a JavaScript expression: the text of a table's cells, joined
// by commas.
func cellsOf(id string) string {
	return `[...document.querySelectorAll("#` + id + ` td")].map(c => c.textContent).join(",")`
}

// TestStatusPageShowsLiveSessionsInChromium: the status page, open in
// headless Chromium, follows the live session count while an independent
// client (gorilla) holds 3, then 5, then 2 sessions over two model groups
// and two keys, then none: the total, the per-group and the per-key tables
// match what is held each time; the warm pool lists both upstream keys; the
// deployments table lists both deployments healthy; no key appears on the
// page or in /status.json.
func TestStatusPageShowsLiveSessionsInChromium(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			mock := startMock(t, up.cfg)
			path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", mock)+strings.Replace(openaiEntry("gpt-realtime-mini", mock), "openai/gpt-realtime", "openai/gpt-realtime-mini", 1)+`
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
`+configTail)
			g := startAppGateway(t, mock, withPool(2, func(c *Settings) { c.RoutesFile = path }))
			admin := g.serveAdmin(t)
			waitFor(t, "both pooled keys to warm", func() bool {
				st := g.srv.Pool().Status()
				return len(st) == 2 && st[0].Warm == 2 && st[1].Warm == 2
			})
			b := startBrowser(t, 1280, 1100)
			b.navigate("http://" + admin + "/status")
			body := `document.body.innerText`
			b.waitFor("the page to show no sessions", `document.getElementById("sessions").textContent === "0"`, body, 10*time.Second)

			// held[0]: master key on gpt-realtime; held[1]: team-a on gpt-realtime-mini.
			var held [2][]*websocket.Conn
			who := [2]struct{ model, key string }{{"gpt-realtime", testMasterKey}, {"gpt-realtime-mini", "sk-team-a-test"}}
			hold := func(n [2]int) {
				for i := range held {
					for len(held[i]) < n[i] {
						c := g.dial(t, "model="+who[i].model, bearer(who[i].key))
						if e := read(t, c); e.typ() != "session.created" {
							t.Fatalf("got %v, want session.created", e)
						}
						held[i] = append(held[i], c)
					}
					for len(held[i]) > n[i] {
						last := held[i][len(held[i])-1]
						_ = last.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
						_ = last.Close()
						held[i] = held[i][:len(held[i])-1]
					}
				}
			}
			for step, n := range [][2]int{{2, 1}, {3, 2}, {1, 1}, {0, 0}} {
				hold(n)
				total := n[0] + n[1]
				// Tables sort by count, then name.
				groups, keys := fmt.Sprintf("gpt-realtime,%d,gpt-realtime-mini,%d", n[0], n[1]), fmt.Sprintf("master,%d,team-a,%d", n[0], n[1])
				if n[1] > n[0] {
					groups, keys = fmt.Sprintf("gpt-realtime-mini,%d,gpt-realtime,%d", n[1], n[0]), fmt.Sprintf("team-a,%d,master,%d", n[1], n[0])
				}
				if total == 0 {
					groups, keys = "no live sessions", "no live sessions"
				}
				b.waitFor(fmt.Sprintf("step %d: %d sessions on the page", step, total), fmt.Sprintf(
					`document.getElementById("sessions").textContent === "%d" && %s === %q && %s === %q`,
					total, cellsOf("byGroup"), groups, cellsOf("byKey"), keys),
					`document.getElementById("sessions").textContent + " | " + `+cellsOf("byGroup")+` + " | " + `+cellsOf("byKey"), 10*time.Second)
				if step == 1 {
					// Pool and deployments while sessions are held: two
					// upstream keys, both deployments healthy.
					pool := eval[string](b, cellsOf("pool"))
					for _, want := range []string{"gpt-realtime,", "gpt-realtime-mini,", mock.Addr()} {
						if !strings.Contains(pool, want) {
							t.Fatalf("pool table %q lacks %q", pool, want)
						}
					}
					deps := eval[string](b, cellsOf("deps"))
					if strings.Count(deps, "healthy") != 2 {
						t.Fatalf("deployments table %q: want both deployments healthy", deps)
					}
					b.waitFor("the sessions sparkline", `document.querySelector("#spSessions path.l") !== null`, body, 10*time.Second)
					if up.name == "ws" {
						if *screenshotDir != "" {
							// For the README: half a minute of sessions
							// coming and going, so the sparklines have
							// a history; then back to what is held.
							churn(t, g, who[0].model, 30*time.Second)
							b.waitFor("the held sessions again", fmt.Sprintf(`document.getElementById("sessions").textContent === "%d"`, total), body, 10*time.Second)
						}
						b.screenshot("status.png")
					}
					// On a phone's width nothing overflows the page
					// (wide tables scroll inside their cards).
					b.viewport(390, 844, true)
					if w := eval[int](b, `document.documentElement.scrollWidth`); w > 390 {
						t.Fatalf("at 390 px the status page is %d px wide", w)
					}
					if up.name == "ws" {
						b.screenshot("status-phone.png")
					}
					b.viewport(0, 0, false)
				}
			}
			page := eval[string](b, `document.documentElement.outerHTML`)
			js := httpGet(t, "http://"+admin+"/status.json", nil)
			for _, secret := range []string{testMasterKey, testUpstreamKey, "sk-team-a-test"} {
				if strings.Contains(page, secret) || strings.Contains(js, secret) {
					t.Fatal("the status page shows a key")
				}
			}
		})
	}
}

// churn opens and closes sessions on model for d, between 0 and 6 at a
// time, and closes what it opened.
func churn(t *testing.T, g *gateway, model string, d time.Duration) {
	var open []*websocket.Conn
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		if want := 3 + int(3*math.Sin(float64(i)/6)); len(open) < want {
			c := g.dial(t, "model="+model, bearer(testMasterKey))
			read(t, c)
			open = append(open, c)
		} else if len(open) > 0 {
			_ = open[0].Close()
			open = open[1:]
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, c := range open {
		_ = c.Close()
	}
}

// TestPlaygroundStreamsMicrophoneInChromium: /playground?autostart=1 in
// headless Chromium with its fake microphone, while ALLOWED_ORIGINS names
// another site: the page mints a client secret through the admin server,
// connects to the client port with it (the admin page's origin is
// accepted), streams the microphone as 20 ms PCM16 24 kHz appends (mockai
// records each: exactly 960 bytes, at least a second of them, not all
// silence), sends the secret's session config first, and shows connect,
// session.created, first audio and response.done in its log, plays the
// response audio and shows its transcript. The page never holds the master
// key.
func TestPlaygroundStreamsMicrophoneInChromium(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			mock := startMock(t, up.cfg)
			g := startAppGateway(t, mock, func(c *Settings) { c.AllowedOrigins = []string{"https://app.example"} })
			admin := g.serveAdmin(t)
			b := startBrowser(t, 1280, 1000)
			b.navigate("http://" + admin + "/playground?autostart=1&respond_after=1500")
			logText := `document.getElementById("log").innerText`
			b.waitFor("response.done in the playground's log", logText+`.includes("response.done")`, `document.body.innerText`, 30*time.Second)
			log := eval[string](b, logText)
			for _, want := range []string{"client secret minted", "connect (realtime)", "session.created", "first audio", "turn 1: first audio after", "response.done completed"} {
				if !strings.Contains(log, want) {
					t.Fatalf("the playground's log lacks %q:\n%s", want, log)
				}
			}
			// The response was played (its PCM decoded and scheduled) and
			// its transcript shown.
			// Each turn's time to first audio is shown.
			if turns := eval[int](b, `window.playground.turns.length`); turns != 1 {
				t.Fatalf("the page measured %d turns, want 1", turns)
			}
			if tt := eval[string](b, `document.getElementById("tTurns").innerText`); !strings.HasSuffix(tt, " ms") {
				t.Fatalf("first audio per turn shows %q", tt)
			}
			if played := eval[int](b, `window.playground.played`); played == 0 {
				t.Fatal("the page played no response audio")
			}
			if tr := eval[string](b, `document.getElementById("transcript").innerText`); strings.TrimSpace(tr) == "" {
				t.Fatal("the page shows no transcript")
			}
			if page := eval[string](b, `document.documentElement.outerHTML`); strings.Contains(page, testMasterKey) {
				t.Fatal("the playground page holds the master key")
			}

			// What reached the upstream: the secret's session config
			// first, then 20 ms appends (mockai counts appends and their
			// decoded bytes), then the page's commit and response.create.
			var types []string
			for _, ev := range mock.Events() { // appends are not recorded, only counted
				types = append(types, ev.Type)
			}
			if len(types) < 3 || types[0] != "session.update" || !slices.Contains(types, "input_audio_buffer.commit") ||
				!slices.Contains(types, "response.create") {
				t.Fatalf("the upstream received %v, want the secret's session.update first, then a commit and a response.create", types)
			}
			st := mock.Stats()
			appends := st.AudioAppends
			if appends < 50 || st.AudioBytes != 960*appends {
				t.Fatalf("mockai received %d appends carrying %d bytes, want at least 50 (a second) of exactly 960 (20 ms of PCM16 at 24 kHz)",
					appends, st.AudioBytes)
			}
			if sent := eval[int64](b, `window.playground.appends`); sent < appends {
				t.Fatalf("the page counts %d appends sent, mockai %d received", sent, appends)
			}
			loud := eval[int](b, `window.playground.loud`)
			if loud == 0 {
				t.Fatalf("all %d chunks were silence: the fake microphone's beep never came through", appends)
			}
			t.Logf("%d appends of 20 ms reached mockai, %d with sound", appends, loud)
			if up.name == "ws" {
				b.screenshot("playground.png")
			}
		})
	}
}

// httpGet fetches url and returns the body, failing on anything but 200.
func httpGet(t testing.TB, url string, h http.Header) string {
	t.Helper()
	status, b := httpRequest(t, http.MethodGet, url, "", h, nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, status, b)
	}
	return string(b)
}
