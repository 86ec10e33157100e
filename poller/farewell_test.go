package poller_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
)

// HoldFirst and SetFarewell on a Session between raw peers (the newRelay
// harness): what GPT-Live asks of the reactor.

var farewellEvent = frames.AppendFrame(nil, ws.OpText, []byte(`{"type":"session.close"}`), true)

// TestHoldFirstTakesTheFirstMessage: the client's first data message (here
// in two fragments, behind a ping) is handed over whole instead of queued;
// the ping and what follows stay queued for the upstream, in order.
func TestHoldFirstTakesTheFirstMessage(t *testing.T) {
	r := newUnattached(t, nil)
	taken := make(chan []byte, 1)
	r.sess.HoldFirst(func(msg []byte) { taken <- msg })
	first := frames.AppendFrame(nil, ws.OpText, []byte(`{"type":"session`), true)
	first[0] &^= 0x80 // not FIN: a fragment
	cont := frames.AppendFrame(nil, ws.OpContinuation, []byte(`.start"}`), true)
	ping := frames.AppendFrame(nil, ws.OpPing, []byte("p"), true)
	next := textFrame("after", true)
	var stream []byte
	for _, f := range [][]byte{ping, first, cont, next} {
		stream = append(stream, f...)
	}
	for i := range stream { // byte by byte: the hold must wait for the whole message
		if _, err := r.clientPeer.Write(stream[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	var msg []byte
	select {
	case msg = <-taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the first message was not handed over")
	}
	if !bytes.Equal(msg, append(append([]byte(nil), first...), cont...)) {
		t.Fatalf("held %q, want the two fragments as they came", msg)
	}
	r.sess.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(r.upSide)), nil)
	if f := readFrame(t, r.upPeer); f.Header.OpCode != ws.OpPing {
		t.Fatalf("upstream got %v first, want the queued ping", f.Header.OpCode)
	}
	if f := readFrame(t, r.upPeer); string(f.Payload) != "after" {
		t.Fatalf("upstream got %q, want the frame after the held message", f.Payload)
	}
	r.close(t)
}

// TestHoldFirstHearsAClose: a client that closes before any message gives
// the hold nil.
func TestHoldFirstHearsAClose(t *testing.T) {
	r := newUnattached(t, nil)
	r.sess.SetFarewell(farewellEvent, time.Second)
	taken := make(chan []byte, 1)
	r.sess.HoldFirst(func(msg []byte) { taken <- msg })
	_, _ = r.clientPeer.Write(frames.AppendClose(nil, ws.StatusNormalClosure, "", true))
	select {
	case msg := <-taken:
		if msg != nil {
			t.Fatalf("held %q, want nil for a close", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not hear of the close")
	}
	r.sess.Cancel()
	r.close(t)
}

// expectFarewell reads the farewell event on the upstream peer and then
// nothing else for a moment (the close waits for the answer).
func expectFarewell(t *testing.T, up net.Conn) {
	t.Helper()
	if f := readFrame(t, up); f.Header.OpCode != ws.OpText || string(f.Payload) != `{"type":"session.close"}` {
		t.Fatalf("upstream got %v %q, want the farewell event", f.Header.OpCode, f.Payload)
	}
}

// TestFarewellOnClientClose: the client's close frame is answered at once
// and does not reach the upstream; the upstream gets the farewell, and its
// close once it answers (here: its final event, then its own close).
func TestFarewellOnClientClose(t *testing.T) {
	r := newUnattached(t, nil)
	r.sess.SetFarewell(farewellEvent, 10*time.Second)
	r.sess.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(r.upSide)), nil)
	_, _ = r.clientPeer.Write(frames.AppendClose(nil, ws.StatusNormalClosure, "bye", true))
	if code, reason := closeOf(t, r.clientPeer); code != ws.StatusNormalClosure || reason != "bye" {
		t.Fatalf("client's close answered with %d %q", code, reason)
	}
	expectFarewell(t, r.upPeer)
	_, _ = r.upPeer.Write(textFrame(`{"type":"session.closed"}`, false))
	_, _ = r.upPeer.Write(frames.AppendClose(nil, ws.StatusNormalClosure, "session closed", false))
	if code, _ := closeOf(t, r.upPeer); code != ws.StatusNormalClosure {
		t.Fatalf("upstream got close %d after its own, want 1000 (the client's)", code)
	}
	_ = r.upPeer.Close()
	waitEnded(t, r)
}

// TestFarewellWhenClientDrops: the client's socket drops; the upstream gets
// the farewell instead of 1001, and 1001 once Farewelled says the final
// event came.
func TestFarewellWhenClientDrops(t *testing.T) {
	r := newUnattached(t, nil)
	r.sess.SetFarewell(farewellEvent, 10*time.Second)
	r.sess.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(r.upSide)), nil)
	_ = r.clientPeer.Close()
	expectFarewell(t, r.upPeer)
	r.sess.Farewelled()
	_, _ = r.upPeer.Write(textFrame(`{"type":"session.closed"}`, false)) // the read that finishes the farewell
	if code, reason := closeOf(t, r.upPeer); code != ws.StatusGoingAway || reason != "client went away" {
		t.Fatalf("upstream got close %d %q, want 1001", code, reason)
	}
	_ = r.upPeer.Close()
	waitEnded(t, r)
}

// TestTerminateWithFarewell: the gateway's own end sends the notice at
// once, the farewell upstream, and after the answer (or the wait) the
// end's close to the client, whatever close the upstream sent.
func TestTerminateWithFarewell(t *testing.T) {
	for _, answer := range []string{"upstream close", "wait over"} {
		t.Run(answer, func(t *testing.T) {
			r := newUnattached(t, nil)
			wait := 10 * time.Second
			if answer == "wait over" {
				wait = 100 * time.Millisecond
			}
			r.sess.SetFarewell(farewellEvent, wait)
			r.sess.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(r.upSide)), nil)
			r.sess.Terminate(ws.StatusPolicyViolation, "budget exceeded", textFrame(`{"type":"error"}`, false))
			if f := readFrame(t, r.clientPeer); string(f.Payload) != `{"type":"error"}` {
				t.Fatalf("client got %q first, want the notice", f.Payload)
			}
			expectFarewell(t, r.upPeer)
			if answer == "upstream close" {
				_, _ = r.upPeer.Write(textFrame(`{"type":"session.closed"}`, false))
				_, _ = r.upPeer.Write(frames.AppendClose(nil, ws.StatusNormalClosure, "session closed", false))
				if f := readFrame(t, r.clientPeer); string(f.Payload) != `{"type":"session.closed"}` {
					t.Fatalf("client got %q, want the final event", f.Payload)
				}
			}
			if code, reason := closeOf(t, r.clientPeer); code != ws.StatusPolicyViolation || reason != "budget exceeded" {
				t.Fatalf("client got close %d %q, want 1008 budget exceeded", code, reason)
			}
			if code, _ := closeOf(t, r.upPeer); code != ws.StatusPolicyViolation {
				t.Fatalf("upstream got close %d, want 1008", code)
			}
			_ = r.upPeer.Close()
			r.close(t)
		})
	}
}
