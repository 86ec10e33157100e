package server

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/server/apps"
)

// Headless Chromium from Debian's package (apt-get install -y chromium;
// .ci/run installs it) loads a page from a loopback server of the test's
// and reports what it saw by POSTing JSON back to that server.

// pageServer serves one page and collects the results it posts.
type pageServer struct {
	url     string
	origin  string
	results chan json.RawMessage
}

func startPageServer(t *testing.T, html string) *pageServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &pageServer{origin: "http://" + ln.Addr().String(), results: make(chan json.RawMessage, 16)}
	ps.url = ps.origin + "/page.html"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /page.html", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, html)
	})
	mux.HandleFunc("POST /result", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		ps.results <- b
	})
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(404) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ps
}

// runChromium opens url in headless Chromium and stops it (by PID) when the
// test ends.
func runChromium(t *testing.T, url string) {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (apt-get install -y chromium)")
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(), url)
	stderr := &cappedBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	stopAtCleanup(t, cmd, func(error) { t.Logf("chromium stderr:\n%s", stderr.String()) })
}

func (ps *pageServer) result(t *testing.T, v any) {
	t.Helper()
	select {
	case b := <-ps.results:
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("the page posted %q: %v", b, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no result from the page within 60 s")
	}
}

// secretPage mints a client secret with fetch (a CORS preflight, since it
// sends Authorization), connects to the gateway with it as a browser does,
// and makes a WebRTC call with a real RTCPeerConnection offer, then applies
// the answer.
const secretPage = `<!doctype html><meta charset="utf-8"><title>rtgate secret test</title><script>
const q = new URLSearchParams(location.search);
const gw = q.get("gw"), out = {};
const report = () => fetch("/result", {method: "POST", body: JSON.stringify(out)});
(async () => {
  try {
    const r = await fetch("http://" + gw + "/v1/realtime/client_secrets", {method: "POST",
      headers: {"Authorization": "Bearer " + q.get("key"), "Content-Type": "application/json"},
      body: JSON.stringify({session: {type: "realtime", instructions: "From the browser."}})});
    out.mint_status = r.status;
    const ek = (await r.json()).value;
    out.ek_prefix = ek.slice(0, 3);
    await new Promise((resolve) => {
      const ws = new WebSocket("ws://" + gw + "/v1/realtime?model=gpt-realtime", ["realtime", "openai-insecure-api-key." + ek]);
      ws.onmessage = (m) => { const e = JSON.parse(m.data); out.protocol = ws.protocol; out.first = e.type;
        out.instructions = e.session && e.session.instructions; ws.close(1000); resolve(); };
      ws.onerror = () => { out.ws_error = true; resolve(); };
    });
    const pc = new RTCPeerConnection();
    pc.addTransceiver("audio", {direction: "sendrecv"});
    pc.createDataChannel("oai-events");
    const offer = await pc.createOffer();
    await pc.setLocalDescription(offer);
    const c = await fetch("http://" + gw + "/v1/realtime/calls", {method: "POST",
      headers: {"Authorization": "Bearer " + ek, "Content-Type": "application/sdp"}, body: offer.sdp});
    out.call_status = c.status;
    out.call_location = c.headers.get("Location");
    const answer = await c.text();
    try { await pc.setRemoteDescription({type: "answer", sdp: answer}); out.answer_applied = true; }
    catch (e) { out.answer_error = String(e); }
    pc.close();
  } catch (e) { out.error = String(e); }
  await report();
})();
</script>`

// TestChromiumClientSecret: headless Chromium mints a secret (CORS preflight
// per ALLOWED_ORIGINS), connects with new WebSocket(url, ["realtime",
// "openai-insecure-api-key." + ek]) and sees the configured session.created
// with realtime echoed, and makes a WebRTC call whose answer Chromium
// accepts. mockai runs as a process with -tls.
func TestChromiumClientSecret(t *testing.T) {
	mock, roots := tlsMockaiProcess(t)
	ps := startPageServer(t, secretPage)
	g := startGateway(t, nil, func(c *Settings) {
		c.APIBase, _ = ParseAPIBase(mock.baseURL)
		c.UpstreamRoots = roots
		c.AllowedOrigins = []string{ps.origin}
	})
	runChromium(t, ps.url+"?gw="+g.addr+"&key="+testMasterKey)
	var got struct {
		MintStatus    int    `json:"mint_status"`
		EKPrefix      string `json:"ek_prefix"`
		Protocol      string `json:"protocol"`
		First         string `json:"first"`
		Instructions  string `json:"instructions"`
		WSError       bool   `json:"ws_error"`
		CallStatus    int    `json:"call_status"`
		CallLocation  string `json:"call_location"`
		AnswerApplied bool   `json:"answer_applied"`
		AnswerError   string `json:"answer_error"`
		Error         string `json:"error"`
	}
	ps.result(t, &got)
	switch {
	case got.Error != "":
		t.Fatalf("the page failed: %s (%+v)", got.Error, got)
	case got.MintStatus != 200 || got.EKPrefix != "ek_":
		t.Fatalf("minting from the page: %+v", got)
	case got.WSError || got.Protocol != "realtime" || got.First != "session.created" || got.Instructions != "From the browser.":
		t.Fatalf("the browser's WebSocket: %+v", got)
	case got.CallStatus != 201 || !strings.HasPrefix(got.CallLocation, "/v1/realtime/calls/rtc_"):
		t.Fatalf("the browser's call: %+v", got)
	case !got.AnswerApplied:
		t.Fatalf("Chromium refused the SDP answer: %s", got.AnswerError)
	}
	evs := mockEvents(t, mock, roots)
	if len(evs) == 0 || !strings.Contains(string(evs[0].Event), "From the browser.") {
		t.Fatalf("the upstream did not get the secret's config first")
	}
}

// sizesPage offers ever longer subprotocols and reports which opened.
const sizesPage = `<!doctype html><meta charset="utf-8"><script>
const q = new URLSearchParams(location.search), out = {opened: [], failed: []};
(async () => {
  for (const n of [1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576, 2097152]) {
    const ok = await new Promise((resolve) => {
      let ws;
      try { ws = new WebSocket("ws://" + q.get("srv") + "/", ["realtime", "openai-insecure-api-key.ek_" + "a".repeat(n)]); }
      catch (e) { resolve(false); return; }
      ws.onopen = () => { ws.close(); resolve(true); };
      ws.onerror = () => resolve(false);
    });
    (ok ? out.opened : out.failed).push(n);
  }
  await fetch("/result", {method: "POST", body: JSON.stringify(out)});
})();
</script>`

// TestChromiumSubprotocolSizes measures how long a Sec-WebSocket-Protocol
// value Chromium sends (to a server with no header limit), and asserts that
// a token of apps.MaxInlineSecret bytes, the most a client secret carrying its
// config may be, is among them.
func TestChromiumSubprotocolSizes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, Subprotocols: []string{"realtime"}}
	srv := &http.Server{MaxHeaderBytes: 8 << 20, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := up.Upgrade(w, r, nil); err == nil {
			_ = c.Close()
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	ps := startPageServer(t, sizesPage)
	runChromium(t, ps.url+"?srv="+ln.Addr().String())
	var got struct{ Opened, Failed []int }
	ps.result(t, &got)
	largest := 0
	for _, n := range got.Opened {
		largest = max(largest, n)
	}
	t.Logf("Chromium sent subprotocols of up to %d key bytes (opened %v, failed %v)", largest, got.Opened, got.Failed)
	if largest < apps.MaxInlineSecret {
		t.Fatalf("Chromium did not send a %d-byte subprotocol; client secrets that carry their config must be smaller", apps.MaxInlineSecret)
	}
}
