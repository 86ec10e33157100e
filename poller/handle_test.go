package poller_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
)

// recOwner is an Owner that records what it reads, and can be made to hold
// the read lock while a test looks.
type recOwner struct {
	h     *poller.Handle
	mu    sync.Mutex
	got   []string
	gone  chan struct{}
	block chan struct{} // if set, the next read waits on it
	inRd  chan struct{}
}

func newRecOwner() *recOwner { return &recOwner{gone: make(chan struct{}, 4)} }

func (o *recOwner) UpstreamReadable() {
	o.mu.Lock()
	b, in := o.block, o.inRd
	o.block = nil
	o.mu.Unlock()
	if b != nil {
		close(in)
		<-b
	}
	_ = o.h.Endpoint().Read(func(src frames.Source) error {
		p, err := src.Next(src.Len())
		if len(p) > 0 {
			o.mu.Lock()
			o.got = append(o.got, string(p))
			o.mu.Unlock()
		}
		return err
	})
}

func (o *recOwner) UpstreamGone() { o.gone <- struct{}{} }

func (o *recOwner) reads() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := ""
	for _, g := range o.got {
		s += g + "|"
	}
	return s
}

// TestStartFeedsThePrefaceBeforeAnyRead: bytes already waiting on the
// socket must not reach the owner before the preface (the bytes that came
// with the 101). Before this change the pool installed its read handler
// first and fed the preface after, so a read could append the tail of
// session.created before its head.
func TestStartFeedsThePrefaceBeforeAnyRead(t *testing.T) {
	side, peer := netpollPair(t)
	defer peer.Close()
	if _, err := peer.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the poller has read "tail" into its buffer
	h := poller.NewHandle(poller.NewPlainEndpoint(side))
	o := newRecOwner()
	o.h = h
	h.Start(o, func() {
		o.mu.Lock()
		o.got = append(o.got, "head")
		o.mu.Unlock()
	})
	deadline := time.Now().Add(5 * time.Second)
	for o.reads() != "head|tail|" {
		if time.Now().After(deadline) {
			t.Fatalf("owner saw %q, want head then tail", o.reads())
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = side.Close()
}

// TestHandOverWaitsForTheReadInProgress: the pool's read and a Take cannot
// interleave. While the old owner reads, TryHandOver refuses (the socket is
// receiving what a ready warm socket must not); afterwards it succeeds, and
// FinishHandOver gives the new owner one read of whatever arrived, before
// any event. Before this change warmConn read the state, unlocked, and then
// consumed input, so a Take in that gap lost the bytes.
func TestHandOverWaitsForTheReadInProgress(t *testing.T) {
	side, peer := netpollPair(t)
	defer peer.Close()
	h := poller.NewHandle(poller.NewPlainEndpoint(side))
	pool := newRecOwner()
	pool.h = h
	h.Start(pool, nil)

	pool.mu.Lock()
	pool.block, pool.inRd = make(chan struct{}), make(chan struct{})
	release, inRd := pool.block, pool.inRd
	pool.mu.Unlock()
	_, _ = peer.Write([]byte("one"))
	<-inRd // the pool's read handler holds the read lock now
	sess := newRecOwner()
	sess.h = h
	if h.TryHandOver(sess) {
		t.Fatal("TryHandOver succeeded while the old owner was reading")
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for !h.TryHandOver(sess) {
		if time.Now().After(deadline) {
			t.Fatal("TryHandOver never succeeded")
		}
		time.Sleep(time.Millisecond)
	}
	_, _ = peer.Write([]byte("two")) // waits behind the lock: the new owner reads it
	time.Sleep(50 * time.Millisecond)
	h.FinishHandOver()
	for sess.reads() != "two|" {
		if time.Now().After(deadline) {
			t.Fatalf("new owner read %q, want two", sess.reads())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := pool.reads(); got != "one|" {
		t.Fatalf("old owner read %q, want only one", got)
	}
	_ = peer.Close()
	select {
	case <-sess.gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the new owner did not hear of the close")
	}
}

// TestAdoptWarmForwardsHeldFramesFirst: a warm socket's held frame
// (session.created) reaches the client before anything the upstream sent
// after it, even when that arrived before the hand-over.
func TestAdoptWarmForwardsHeldFramesFirst(t *testing.T) {
	r := newUnattached(t, nil)
	h := poller.NewHandle(poller.NewPlainEndpoint(r.upSide))
	pool := newRecOwner()
	pool.h = h
	h.Start(pool, nil)
	held := textFrame("held", false)
	ok := r.sess.AdoptWarm(func(o poller.Owner) (*poller.Handle, []byte) {
		if !h.TryHandOver(o) {
			t.Fatal("hand-over refused")
		}
		_, _ = r.upPeer.Write(textFrame("after", false))
		time.Sleep(50 * time.Millisecond) // netpoll has it buffered, its event waits on the lock
		return h, held
	})
	if !ok {
		t.Fatal("AdoptWarm missed")
	}
	for _, want := range []string{"held", "after"} {
		if f := readFrame(t, r.clientPeer); string(f.Payload) != want {
			t.Fatalf("client got %q, want %q", f.Payload, want)
		}
	}
	r.close(t)
}

// TestRedialReplacesADeadWarmUpstream: the taken warm socket drops before
// the client sent anything; the session asks for a fresh upstream, queues
// the client's frames meanwhile, consumes the fresh upstream's first frame
// (the client has one) and relays the rest.
func TestRedialReplacesADeadWarmUpstream(t *testing.T) {
	redialed := make(chan *poller.Session, 1)
	r := newUnattached(t, func(c *poller.SessionConfig) {
		c.Redial = func(s *poller.Session) bool { redialed <- s; return true }
		c.SameFirstFrame = func(p []byte) bool { return string(p) == "created-2" }
	})
	h := poller.NewHandle(poller.NewPlainEndpoint(r.upSide))
	pool := newRecOwner()
	pool.h = h
	h.Start(pool, nil)
	if !r.sess.AdoptWarm(func(o poller.Owner) (*poller.Handle, []byte) {
		h.TryHandOver(o)
		return h, textFrame("created-1", false)
	}) {
		t.Fatal("AdoptWarm missed")
	}
	if f := readFrame(t, r.clientPeer); string(f.Payload) != "created-1" {
		t.Fatalf("client got %q first", f.Payload)
	}
	_ = r.upPeer.Close() // the warm socket dies
	var s *poller.Session
	select {
	case s = <-redialed:
	case <-time.After(5 * time.Second):
		t.Fatal("no redial")
	}
	_, _ = r.clientPeer.Write(textFrame("queued", true))
	time.Sleep(20 * time.Millisecond)
	fresh, freshPeer := netpollPair(t)
	defer freshPeer.Close()
	_, _ = freshPeer.Write(append(textFrame("created-2", false), textFrame("event", false)...))
	s.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(fresh)), nil)
	if f := readFrame(t, r.clientPeer); string(f.Payload) != "event" {
		t.Fatalf("client got %q, want the fresh upstream's second frame only", f.Payload)
	}
	if f := readFrame(t, freshPeer); string(f.Payload) != "queued" {
		t.Fatalf("fresh upstream got %q, want the queued client frame", f.Payload)
	}
	if n := s.Redials(); n != 1 {
		t.Fatalf("%d redials, want 1", n)
	}
	_, _ = r.clientPeer.Write(frames.AppendClose(nil, ws.StatusNormalClosure, "", true))
	closeOf(t, freshPeer)
	_ = freshPeer.Close()
	_, _ = r.clientPeer.Read(make([]byte, 64))
	waitEnded(t, r)
}

// A dialed socket closed before Handle.Start installed its read handler (the
// losing dial of a hedged pair, a warm socket that failed its check) is
// closed for real: the peer sees EOF. Under inline handlers a close is a
// shutdown the handler acts on, and with no handler yet it reached nobody,
// leaving the descriptor open and the peer waiting.
func TestDialedSocketClosedBeforeStartReachesThePeer(t *testing.T) {
	np, peer := netpollPair(t)
	defer peer.Close()
	ep := poller.NewPlainEndpoint(np)
	ep.MarkDialed()
	ep.Close()
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	n, err := peer.Read(b[:])
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("peer read %d bytes, %v: want EOF once the socket is closed", n, err)
	}
}

// holdLossCloses is a continuity Holder: it holds back the upstream's close
// 1011, as the server's does, so that the session resumes instead.
type holdLossCloses struct{}

func (holdLossCloses) HoldText([]byte) bool          { return false }
func (holdLossCloses) HoldClose(c frames.Close) bool { return c.Code == ws.StatusInternalServerError }

// TestHandOverOfASocketThatClosedMeanwhile: a socket whose close ran to its
// end (netpoll's own close callback freeing the input buffer included)
// between TryHandOver and FinishHandOver is not read by hand: the new owner
// learns it is gone. FinishHandOver used to read it regardless and crashed
// in netpoll's Release on the freed buffer (the server suite, once, under
// the pool runner: a resumed upstream whose handed-over frames ended with a
// close 1011, which the session held back and answered by resuming again,
// dropping the socket while it attached it).
//
// The socket has no read handler here (it is a dialed socket never
// Started), so a close of it is netpoll's Close under both runners, run to
// its end in the closing goroutine; with a handler, a close under
// HandlersInline is a shutdown its poller carries out at a moment a test
// cannot choose, and the window is the same. busyPollers, in the window,
// makes the stale read crash as it did in the suite (before the fix: 6 of 6
// runs under each runner).
func TestHandOverOfASocketThatClosedMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name string
		// held is what the session must forward first; the close, if any,
		// makes the session drop the socket while attaching it.
		held []byte
		// dropWhileTaken drops the socket after TryHandOver, before the
		// session attaches it (the watchdog's Abort, say).
		dropWhileTaken bool
		wantCode       ws.StatusCode // the loss the session resumes after (0: a socket lost without a close)
	}{
		{"a close held in the frames handed over",
			append(textFrame("created", false), frames.AppendClose(nil, ws.StatusInternalServerError, "lost", false)...),
			false, ws.StatusInternalServerError},
		{"the socket dropped while it is taken", textFrame("created", false), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			losses := make(chan poller.Loss, 2)
			r := newUnattached(t, func(c *poller.SessionConfig) {
				c.Resume = func(_ *poller.Session, l poller.Loss) bool {
					if l.Close != nil {
						busyPollers(t) // the socket was dropped just now, inside AdoptResumed
					}
					losses <- l
					return true
				}
			})
			r.sess.HoldUpstream(holdLossCloses{})
			ep := poller.NewPlainEndpoint(r.upSide)
			ep.MarkDialed()
			h := poller.NewHandle(ep)
			if !r.sess.AdoptResumed(func(o poller.Owner) (*poller.Handle, []byte) {
				if !h.TryHandOver(o) {
					t.Error("hand-over refused")
					return nil, nil
				}
				if tc.dropWhileTaken {
					ep.Drop()
					busyPollers(t)
				}
				return h, tc.held
			}) {
				t.Fatal("AdoptResumed missed")
			}
			if f := readFrame(t, r.clientPeer); string(f.Payload) != "created" {
				t.Fatalf("client got %q, want the held frame", f.Payload)
			}
			select {
			case l := <-losses:
				code := ws.StatusCode(0)
				if l.Close != nil {
					code = l.Close.Code
				}
				if code != tc.wantCode {
					t.Fatalf("resumed after a loss with close %d, want %d", code, tc.wantCode)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the session did not learn that its fresh upstream is gone")
			}
			if tc.wantCode != 0 { // the session answered the close it held
				if code, _ := closeOf(t, r.upPeer); code != tc.wantCode {
					t.Fatalf("upstream got close %d, want its own %d echoed", code, tc.wantCode)
				}
			}
			expectEOF(t, r.upPeer, "the dropped upstream")
			r.sess.ResumeFailed(nil)
			if code, _ := closeOf(t, r.clientPeer); code != ws.StatusInternalServerError {
				t.Fatalf("client closed with %d, want 1011", code)
			}
			_ = r.clientPeer.Close()
			waitEnded(t, r)
		})
	}
}

// busyPollers opens a few sockets on netpoll's pollers and passes a byte
// through each, as a busy gateway does at any moment: a socket closed just
// before gives its poller's operator back to the poller's cache, and one of
// these takes it. A stale use of the closed socket's operator then acts on
// a live socket's: in netpoll's Release, a freed input buffer is read only
// when the operator is in use again, which is how the server suite crashed.
func busyPollers(t *testing.T) {
	t.Helper()
	for range 4 {
		np, peer := netpollPair(t)
		// With a handler, netpoll closes the socket itself once the peer
		// hangs up (a Close here could spin on an operator a stale use
		// left in use).
		if err := np.SetOnRequest(func(_ context.Context, c netpoll.Connection) error {
			_ = c.Reader().Skip(c.Reader().Len())
			return c.Reader().Release()
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = peer.Close() })
	}
	time.Sleep(20 * time.Millisecond) // the pollers woke, and freed what was freeable
}
