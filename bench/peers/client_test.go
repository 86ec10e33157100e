package peers

import (
	"context"
	"net"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

// The load client against a real (in-process) echoing mockai: sessions open only
// with session.created, round trips are timed, and a flood counts both directions.
func TestClientAgainstEchoingMockai(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{Echo: true})
	ctx := context.Background()
	c, err := newClient(srv.BaseURL()+"/realtime?model=gpt-realtime", clientKey, nil, LoopbackRange(3), 1024)
	if err != nil {
		t.Fatal(err)
	}
	conns, failures := openMany(ctx, c, 6, 3, 10*time.Second)
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
	addr := benchtest.RefusedAddr(t)
	c, err := newClient("ws://"+addr+"/v1/realtime", clientKey, nil, nil, 1024)
	if err != nil {
		t.Fatal(err)
	}
	conns, failures := openMany(context.Background(), c, 5, 2, 10*time.Second)
	if len(conns) != 0 || failures["dial"] != 5 || len(failures) != 1 {
		t.Fatalf("got %d sessions, failures %v; want 0 and 5 x dial", len(conns), failures)
	}

	// A server that is not a realtime endpoint: the handshake fails with its status.
	srv := benchtest.Mockai(t, mockai.Config{StatusCode: 429})
	c, err = newClient(srv.BaseURL()+"/realtime?model=gpt-realtime", clientKey, nil, nil, 1024)
	if err != nil {
		t.Fatal(err)
	}
	_, failures = openMany(context.Background(), c, 2, 2, 10*time.Second)
	if failures["handshake_429"] != 2 {
		t.Errorf("failures %v, want 2 x handshake_429", failures)
	}
	if got := describeFailures(failures); got != "2 handshake_429" {
		t.Errorf("describeFailures = %q", got)
	}
}
