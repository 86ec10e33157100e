package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/benchtest"
	"rtgate/bench/proc"
)

// Two mockai processes as two deployments, one over wss:// and one over
// ws://: POST /mock/config swaps which is faster, for connections opened
// before and after the swap. "Slow" is a minute, so a response.cancel sent
// at once always lands inside the delay and no clock is read.
func TestSwapFasterDeployment(t *testing.T) {
	dir := t.TempDir()
	bin := benchtest.Build(t, dir, "mockai")[0]
	ctx := context.Background()
	startMock := func(up proc.Upstream, delay string) *proc.Mockai {
		m, err := proc.StartMockai(ctx, bin, up, []string{"-first-audio-delay", delay}, t.TempDir(), 10*time.Second)
		if err != nil {
			t.Fatalf("start mockai (%s): %v", up, err)
		}
		t.Cleanup(func() { _ = m.Stop(5 * time.Second) })
		return m
	}
	a := startMock(proc.UpstreamTLS, "0s")
	b := startMock(proc.UpstreamPlain, "1m")

	open := func(m *proc.Mockai) *websocket.Conn {
		d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, TLSClientConfig: m.TLSConfig()}
		c, _, err := d.Dial(m.RealtimeURL(), nil)
		if err != nil {
			t.Fatalf("dial %s: %v", m.Base, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// next reads the next event's type.
	next := func(c *websocket.Conn) string {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, data, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var ev struct{ Type string }
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatalf("event %.80s: %v", data, err)
		}
		return ev.Type
	}
	send := func(c *websocket.Conn, msg string) {
		t.Helper()
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	// audioFirst asks for a response and says whether audio came before
	// response.done. On the side expected slow it sends response.cancel at
	// once, which lands inside a minute's delay; the side expected fast is
	// not cancelled, and if it were slow after all the 5 s read bound fails
	// the test.
	audioFirst := func(c *websocket.Conn, cancel bool) bool {
		t.Helper()
		send(c, `{"type":"response.create"}`)
		for _, want := range []string{"response.created", "rate_limits.updated"} {
			if got := next(c); got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
		}
		if cancel {
			send(c, `{"type":"response.cancel"}`)
		}
		first := next(c)
		for typ := first; typ != "response.done"; typ = next(c) {
		}
		return first == "response.output_audio.delta"
	}
	// check: fastC's deployment answers with audio, slowC's does not.
	check := func(when string, fastC, slowC *websocket.Conn) {
		t.Helper()
		if !audioFirst(fastC, false) {
			t.Errorf("%s: the fast deployment sent no audio", when)
		}
		if audioFirst(slowC, true) {
			t.Errorf("%s: the slow deployment sent audio before a cancel", when)
		}
	}
	setDelay := func(m *proc.Mockai, d string) {
		t.Helper()
		base := strings.Replace(strings.TrimSuffix(m.Base, "/v1"), "ws", "http", 1)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: m.TLSConfig()}, Timeout: 5 * time.Second}
		resp, err := hc.Post(base+"/mock/config?first_audio_delay="+d, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"first_audio_delay": "`) {
			t.Fatalf("POST /mock/config: %d %s", resp.StatusCode, body)
		}
	}
	ca, cb := open(a), open(b)
	next(ca)
	next(cb)
	check("before the swap (wss:// fast)", ca, cb)
	setDelay(a, "1m")
	setDelay(b, "0s")
	check("after the swap, same connections (ws:// fast)", cb, ca)
	na, nb := open(a), open(b)
	next(na)
	next(nb)
	check("after the swap, new connections (ws:// fast)", nb, na)
}
