package peers

import (
	"context"
	"net"
	"testing"
	"time"

	"rtgate/mockai"
)

// The load client against a real (in-process) echoing mockai: sessions open only
// with session.created, round trips are timed, and a flood counts both directions.
func TestClientAgainstEchoingMockai(t *testing.T) {
	srv, err := mockai.Start(mockai.Config{Echo: true}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	c := newClient(srv.Addr(), clientKey, LoopbackRange(3), 1024)

	conns, failures := c.openMany(ctx, 6, 3, 10*time.Second)
	if len(conns) != 6 || len(failures) != 0 {
		t.Fatalf("opened %d sessions, failures %v; want 6 and none", len(conns), failures)
	}
	sources := map[string]bool{}
	for _, conn := range conns {
		sources[conn.LocalAddr().(*net.TCPAddr).IP.String()] = true
	}
	if len(sources) != 3 {
		t.Errorf("source addresses used: %v, want 127.0.0.1-3 in turn", sources)
	}

	samples, errs := pingPong(ctx, conns, pingEvent(), 3, 5*time.Millisecond)
	if len(samples) != 18 || errs != 0 {
		t.Errorf("ping-pong: %d samples, %d errors; want 18 and 0", len(samples), errs)
	}

	f := startFlood(conns, appendEvent(2048), 4)
	time.Sleep(100 * time.Millisecond)
	lost := f.finish(conns, 5*time.Second)
	if f.sent.Load() == 0 || f.recv.Load() != f.sent.Load() || lost != 0 || f.bad.Load() != 0 {
		t.Errorf("flood: sent %d, received %d, lost %d, bad %d; want every message echoed intact",
			f.sent.Load(), f.recv.Load(), lost, f.bad.Load())
	}
	st := srv.Stats()
	if st.FramesIn != f.sent.Load()+18 {
		t.Errorf("mockai read %d frames, want %d (the flood's and the ping-pong's)", st.FramesIn, f.sent.Load()+18)
	}
}

func TestClientFailures(t *testing.T) {
	// A port nobody listens on: every session fails to dial, and is counted once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(addr, clientKey, nil, 1024)
	conns, failures := c.openMany(context.Background(), 5, 2, 10*time.Second)
	if len(conns) != 0 || sum(failures) != 5 {
		t.Fatalf("got %d sessions, failures %v; want 0 and 5", len(conns), failures)
	}
	for class := range failures {
		if class != "dial: connect: connection refused" {
			t.Errorf("failure class %q, want the refused connect", class)
		}
	}

	// A server that is not a realtime endpoint: the handshake fails with its status.
	srv, err := mockai.Start(mockai.Config{StatusCode: 429}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, failures = newClient(srv.Addr(), clientKey, nil, 1024).openMany(context.Background(), 2, 2, 10*time.Second)
	if failures["handshake: HTTP 429"] != 2 {
		t.Errorf("failures %v, want 2 x handshake: HTTP 429", failures)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i))
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 100}, {99, 198}, {100, 200}, {0.1, 1}} {
		if got := percentile(d, tt.p); got != tt.want {
			t.Errorf("p%v = %d, want %d", tt.p, got, tt.want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}
