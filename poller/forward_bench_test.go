package poller_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
)

// BenchmarkForward measures the relay's forwarding path over loopback TCP,
// with no server package and no WebSocket handshake: a poller.Session splices
// two netpoll connections, and two raw TCP peers stand in for the client and
// the upstream. One peer writes pre-built frames, the other reads and
// discards them; both use buffers allocated before the timer starts, so
// allocs/op is the relay's (and netpoll's) alone.
//
// Frames are written back to back, as many as fit in 64 KiB per write, so
// small frames arrive several to a read, as they do under load.
func BenchmarkForward(b *testing.B) {
	for _, dir := range []string{"client-to-upstream", "upstream-to-client"} {
		for _, size := range []int{1 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%dKiB", dir, size>>10), func(b *testing.B) {
				benchForward(b, dir == "client-to-upstream", size)
			})
		}
	}
}

func benchForward(b *testing.B, fromClient bool, size int) {
	r := newRelay(b)
	// Client frames are masked, upstream frames are not; the relay checks.
	frame := frames.AppendFrame(nil, ws.OpBinary, bytes.Repeat([]byte{0x5a}, size), fromClient)
	src, dst := r.clientPeer, r.upPeer
	if !fromClient {
		src, dst = r.upPeer, r.clientPeer
	}
	r.checkVerbatim(b, src, dst, frame)

	perWrite := max(1, (64<<10)/len(frame))
	batch := bytes.Repeat(frame, perWrite)
	readBuf := make([]byte, 256<<10)
	total := int64(b.N) * int64(len(frame))

	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()

	writeErr := make(chan error, 1)
	go func() {
		for left := b.N; left > 0; {
			n := min(left, perWrite)
			if _, err := src.Write(batch[:n*len(frame)]); err != nil {
				writeErr <- err
				return
			}
			left -= n
		}
		writeErr <- nil
	}()
	var got int64
	_ = dst.SetReadDeadline(time.Now().Add(time.Minute))
	for got < total {
		n, err := dst.Read(readBuf[:min(int64(len(readBuf)), total-got)])
		got += int64(n)
		if err != nil {
			b.Fatalf("reading the relayed frames after %d of %d bytes: %v", got, total, err)
		}
	}
	b.StopTimer()
	if err := <-writeErr; err != nil {
		b.Fatalf("writing frames: %v", err)
	}
	r.close(b)
}

// TestMain applies POLLER_HANDLERS (inline, the gateway's default, or pool),
// so that the tests run and the benchmarks compare with either of netpoll's
// runners:
//
//	go test -run XXX -bench Forward ./poller   (inline)
//	POLLER_HANDLERS=pool go test -run XXX -bench Forward ./poller
//	POLLER_HANDLERS=pool go test -race -count=1 ./poller
//
// With inline, every socket here runs its handler on the poller goroutine
// (their contexts carry no poller.Inliner), as relayed sockets do in the
// gateway.
func TestMain(m *testing.M) {
	h, err := poller.DefaultHandlers, error(nil)
	if v := os.Getenv("POLLER_HANDLERS"); v != "" {
		h, err = poller.ParseHandlers(v)
	}
	if err == nil {
		err = poller.Tune(poller.Tuning{Handlers: h})
	}
	if err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// relay is a poller.Session between two loopback TCP peers.
type relay struct {
	clientPeer, upPeer net.Conn // the raw ends the test drives
	upSide             netpoll.Connection
	sess               *poller.Session
	cfg                *poller.SessionConfig
	ended              chan struct{}
}

// newRelay connects the relay's two netpoll sockets to two raw TCP peers and
// starts a Session between them, wired the way the server wires one: the
// client socket's OnRequest and close callback drive the session, and the
// upstream socket is attached through a Handle.
func newRelay(tb testing.TB) *relay {
	tb.Helper()
	r := newUnattached(tb, nil)
	r.sess.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(r.upSide)), nil)
	return r
}

// newUnattached is newRelay without attaching the upstream: the session
// queues client frames as if the upstream were still connecting. mutate, if
// set, adjusts the session's configuration first.
func newUnattached(tb testing.TB, mutate func(*poller.SessionConfig)) *relay {
	tb.Helper()
	clientSide, clientPeer := netpollPair(tb)
	upSide, upPeer := netpollPair(tb)
	r := &relay{clientPeer: clientPeer, upPeer: upPeer, upSide: upSide, ended: make(chan struct{})}

	r.cfg = &poller.SessionConfig{
		MaxPending:   1 << 20,
		CloseTimeout: time.Second,
		OnEnd:        func(*poller.Session) { close(r.ended) },
	}
	if mutate != nil {
		mutate(r.cfg)
	}
	r.sess = poller.NewSession(r.cfg, poller.NewPlainEndpoint(clientSide))
	if err := clientSide.AddCloseCallback(func(netpoll.Connection) error { r.sess.ClientGone(); return nil }); err != nil {
		tb.Fatal(err)
	}
	if err := clientSide.SetOnRequest(func(context.Context, netpoll.Connection) error { r.sess.ClientReadable(); return nil }); err != nil {
		tb.Fatal(err)
	}
	return r
}

// netpollPair returns the two ends of one loopback TCP connection: a netpoll
// connection (the relay's socket) and a plain net.Conn (the peer).
func netpollPair(b testing.TB) (netpoll.Connection, net.Conn) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// Under -race, netpoll can deliver an epoll event still pending for a
	// descriptor that just closed to the next socket that reuses the
	// number, which then fails at once; such a dial is retried.
	var np netpoll.Connection
	var err2 error
	for range 3 {
		np, err2 = netpoll.DialConnection("tcp", ln.Addr().String(), 5*time.Second)
		if err2 == nil {
			break
		}
		select { // drop the failed dial's accepted end, if it got one
		case c := <-accepted:
			_ = c.Close()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err2 != nil {
		b.Fatal(err2)
	}
	peer := <-accepted
	if peer == nil {
		b.Fatal("accept failed")
	}
	// A write the peer does not drain must not block the relay forever.
	if err := np.SetWriteTimeout(10 * time.Second); err != nil {
		b.Fatal(err)
	}
	return np, peer
}

// checkVerbatim sends a few frames through before timing starts and checks
// that they arrive byte for byte, so the benchmark cannot measure a relay
// that drops or rewrites frames.
func (r *relay) checkVerbatim(b testing.TB, src, dst net.Conn, frame []byte) {
	b.Helper()
	want := bytes.Repeat(frame, 3)
	if _, err := src.Write(want); err != nil {
		b.Fatal(err)
	}
	got := make([]byte, len(want))
	_ = dst.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(dst, got); err != nil {
		b.Fatalf("relaying three frames: %v", err)
	}
	if !bytes.Equal(got, want) {
		b.Fatal("the relay changed the frames it forwarded")
	}
}

// close drops both peers and waits for the session to end.
func (r *relay) close(b testing.TB) {
	b.Helper()
	_ = r.clientPeer.Close()
	_ = r.upPeer.Close()
	select {
	case <-r.ended:
	case <-time.After(10 * time.Second):
		b.Error("the session did not end after both peers closed")
	}
}
