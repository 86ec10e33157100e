package poller_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
)

// Unit tests of the poller on its own: a Session between two raw loopback TCP
// peers (the newRelay harness), with gobwas's frame reader on the peers'
// side, driving the close states and the hand-offs.

// readFrame reads one frame from a peer, unmasking a client frame's payload.
func readFrame(t testing.TB, c net.Conn) ws.Frame {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := ws.ReadFrame(c)
	if err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	if f.Header.Masked {
		f = ws.UnmaskFrameInPlace(f)
	}
	return f
}

// closeOf reads frames until a close frame and returns its code and reason.
func closeOf(t testing.TB, c net.Conn) (ws.StatusCode, string) {
	t.Helper()
	for {
		f := readFrame(t, c)
		if f.Header.OpCode == ws.OpClose {
			code, reason := ws.ParseCloseFrameData(f.Payload)
			return code, reason
		}
	}
}

// expectEOF waits for the relay to close the peer's connection.
func expectEOF(t testing.TB, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: got %v, want the gateway to close the connection", what, err)
	}
}

// expectOpen checks that the relay does not close the peer's connection
// within d (it must wait for the peer to close first).
func expectOpen(t testing.TB, c net.Conn, d time.Duration, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: got %v, want the connection left open", what, err)
	}
}

func waitEnded(t testing.TB, r *relay) {
	t.Helper()
	select {
	case <-r.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end")
	}
}

func textFrame(payload string, fromClient bool) []byte {
	return frames.AppendFrame(nil, ws.OpText, []byte(payload), fromClient)
}

// TestCloseHandshakes drives a session's two close handshakes from each
// side and checks who closes TCP first: the gateway closes the client's
// socket (it is the client's server), and waits for the upstream to close
// its socket (RFC 6455 7.1.1; otherwise TIME_WAIT lands on the gateway's
// ephemeral ports).
func TestCloseHandshakes(t *testing.T) {
	tests := []struct {
		name        string
		clientFirst bool
	}{
		{"client closes first", true},
		{"upstream closes first", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRelay(t)
			if tt.clientFirst {
				_, _ = r.clientPeer.Write(frames.AppendClose(nil, 4001, "bye", true))
				if code, reason := closeOf(t, r.upPeer); code != 4001 || reason != "bye" {
					t.Fatalf("upstream got close %d %q, want 4001 bye", code, reason)
				}
				_, _ = r.upPeer.Write(frames.AppendClose(nil, 4001, "bye", false))
				if code, _ := closeOf(t, r.clientPeer); code != 4001 {
					t.Fatalf("client got close %d, want the upstream's 4001", code)
				}
			} else {
				_, _ = r.upPeer.Write(frames.AppendClose(nil, ws.StatusGoingAway, "expired", false))
				if code, reason := closeOf(t, r.clientPeer); code != ws.StatusGoingAway || reason != "expired" {
					t.Fatalf("client got close %d %q, want 1001 expired", code, reason)
				}
				_, _ = r.clientPeer.Write(frames.AppendClose(nil, ws.StatusGoingAway, "expired", true))
				if code, _ := closeOf(t, r.upPeer); code != ws.StatusGoingAway {
					t.Fatalf("upstream got close %d, want the client's 1001", code)
				}
			}
			expectEOF(t, r.clientPeer, "client socket after its close handshake")
			expectOpen(t, r.upPeer, 300*time.Millisecond, "upstream socket after its close handshake")
			_ = r.upPeer.Close() // the upstream closes first, as a server does
			waitEnded(t, r)
		})
	}
}

// TestUpstreamThatNeverClosesIsClosedAfterCloseTimeout: the wait for the
// upstream's FIN is bounded.
func TestUpstreamThatNeverClosesIsClosedAfterCloseTimeout(t *testing.T) {
	r := newRelay(t)
	_, _ = r.clientPeer.Write(frames.AppendClose(nil, ws.StatusNormalClosure, "", true))
	closeOf(t, r.upPeer)
	_, _ = r.upPeer.Write(frames.AppendClose(nil, ws.StatusNormalClosure, "", false))
	closeOf(t, r.clientPeer)
	expectEOF(t, r.upPeer, "an upstream that never closes, after CloseTimeout")
	waitEnded(t, r)
}

// TestDropsBecomeCloses: one side drops without a close frame; the other
// gets the gateway's close (1001 upstream, 1011 client).
func TestDropsBecomeCloses(t *testing.T) {
	t.Run("client drops", func(t *testing.T) {
		r := newRelay(t)
		_ = r.clientPeer.Close()
		if code, _ := closeOf(t, r.upPeer); code != ws.StatusGoingAway {
			t.Fatalf("upstream got %d, want 1001", code)
		}
		_, _ = r.upPeer.Write(frames.AppendClose(nil, ws.StatusGoingAway, "", false))
		_ = r.upPeer.Close()
		waitEnded(t, r)
		if c, from, ok := r.sess.FirstClose(); !ok || from != frames.ClientSide || c.Code != ws.StatusAbnormalClosure {
			t.Fatalf("first close %v from %v (%v), want 1006 from the client", c, from, ok)
		}
	})
	t.Run("upstream drops", func(t *testing.T) {
		r := newRelay(t)
		_ = r.upPeer.Close()
		if code, reason := closeOf(t, r.clientPeer); code != ws.StatusInternalServerError || reason != "upstream connection lost" {
			t.Fatalf("client got %d %q, want 1011 upstream connection lost", code, reason)
		}
		_, _ = r.clientPeer.Write(frames.AppendClose(nil, ws.StatusInternalServerError, "", true))
		expectEOF(t, r.clientPeer, "client after answering")
		waitEnded(t, r)
	})
}

// TestHalfClosedClientGetsItsCloseAnswered: a client sends its close frame
// and shuts down its sending side. netpoll reports that as a hang-up and
// closes the socket, so the answer cannot wait for the upstream's; the
// gateway answers on the way out. At 0bc68d2's parent the client got no
// close frame at all.
func TestHalfClosedClientGetsItsCloseAnswered(t *testing.T) {
	r := newRelay(t)
	_, _ = r.clientPeer.Write(frames.AppendClose(nil, 4100, "half", true))
	_ = r.clientPeer.(*net.TCPConn).CloseWrite()
	if code, reason := closeOf(t, r.clientPeer); code != 4100 || reason != "half" {
		t.Fatalf("client got close %d %q, want its own 4100 half answered", code, reason)
	}
	if code, _ := closeOf(t, r.upPeer); code != 4100 {
		t.Fatalf("upstream got close %d, want the client's 4100", code)
	}
	_ = r.upPeer.Close()
	waitEnded(t, r)
}

// TestQueuedFramesKeepTheirOrder: the client writes numbered frames without
// pause while the upstream attaches; the upstream must get every one, in
// order and intact, whatever the timing of the attach (the queue is flushed
// and the upstream published under one lock).
func TestQueuedFramesKeepTheirOrder(t *testing.T) {
	for round := range 20 {
		r := newUnattached(t, nil)
		const n = 400
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				p := make([]byte, 8+i%300)
				binary.BigEndian.PutUint64(p, uint64(i))
				if _, err := r.clientPeer.Write(frames.AppendFrame(nil, ws.OpBinary, p, true)); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		r.sess.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(r.upSide)), nil)
		for i := range n {
			f := readFrame(t, r.upPeer)
			if got := binary.BigEndian.Uint64(f.Payload); got != uint64(i) || len(f.Payload) != 8+i%300 {
				t.Fatalf("round %d: frame %d arrived as number %d, %d bytes", round, i, got, len(f.Payload))
			}
		}
		wg.Wait()
		r.close(t)
	}
}

// TestCloseQueuedWhileConnectingNeverLandsMidFrame: the client has sent half
// a frame when the gateway ends the session while the upstream is still
// connecting. The upstream must get the frames before it and a clean close
// frame, not the close bytes as the rest of the half frame. Before this
// change the close frame was queued behind the partial frame.
func TestCloseQueuedWhileConnectingNeverLandsMidFrame(t *testing.T) {
	r := newUnattached(t, nil)
	_, _ = r.clientPeer.Write(textFrame("whole", true))
	half := textFrame(string(bytes.Repeat([]byte("x"), 100)), true)
	_, _ = r.clientPeer.Write(half[:50])
	time.Sleep(50 * time.Millisecond) // let the client's read run
	r.sess.Terminate(ws.StatusGoingAway, "shutting down", textFrame(`{"type":"error"}`, false))
	r.sess.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(r.upSide)), nil)
	if f := readFrame(t, r.upPeer); f.Header.OpCode != ws.OpText || string(f.Payload) != "whole" {
		t.Fatalf("first upstream frame %v %q, want the whole text frame", f.Header.OpCode, f.Payload)
	}
	if f := readFrame(t, r.upPeer); f.Header.OpCode != ws.OpClose {
		t.Fatalf("second upstream frame is %v (%d bytes), want the close frame", f.Header.OpCode, f.Header.Length)
	}
	if f := readFrame(t, r.clientPeer); f.Header.OpCode != ws.OpText {
		t.Fatalf("client got %v first, want the notice", f.Header.OpCode)
	}
	if code, _ := closeOf(t, r.clientPeer); code != ws.StatusGoingAway {
		t.Fatalf("client got close %d, want 1001", code)
	}
}

// TestStalledClientDoesNotBlockTheUpstreamSide: a client that stops reading
// must not park the upstream's handler (nor anything that needs the
// client's write lock) in a blocking write. At 0bc68d2's parent the
// upstream handler blocked in Flush, holding the client's lock for up to
// the write timeout, and Terminate waited behind it.
func TestStalledClientDoesNotBlockTheUpstreamSide(t *testing.T) {
	r := newRelay(t)
	chunk := frames.AppendFrame(nil, ws.OpBinary, bytes.Repeat([]byte{1}, 64<<10), false)
	go func() {
		for range 256 { // 16 MiB, far beyond the loopback buffers
			if _, err := r.upPeer.Write(chunk); err != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		side, waiting, stalled := r.sess.Stalled(time.Now(), 0)
		if stalled && side == frames.ClientSide && waiting > 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stall reported (stalled %v, side %v, waiting %d)", stalled, side, waiting)
		}
		time.Sleep(5 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() {
		r.sess.Terminate(ws.StatusGoingAway, "bye", nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second): // the write timeout is 10 s
		t.Fatal("Terminate waited behind a write to the stalled client")
	}
	if r.sess.Buffered() == 0 {
		t.Fatal("the stalled client's backlog is not accounted")
	}
	r.sess.Abort(frames.ClientSide, "too slow")
	if code, _ := closeOf(t, r.upPeer); code != ws.StatusGoingAway {
		t.Fatalf("upstream got close %d, want 1001", code)
	}
	_ = r.upPeer.Close()
	waitEnded(t, r)
}
