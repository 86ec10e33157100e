package poller_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"

	"rtgate/poller"
)

// A peer on a slow link that keeps reading is kept, however long its
// backlog takes to drain: the write timeout ends only a socket the kernel
// took nothing from for that long, not one that took less than a backlog
// chunk (64 KiB) in that time. Here the upstream socket's send buffer is
// small (as on a real link, where the kernel's buffer takes a few KB at
// each wake-up), its peer reads 2 KB every 100 ms (20 KB/s, so a 64 KiB
// chunk takes over 3 s) and the write timeout is 2 s: every byte must
// arrive, in order.
func TestSlowPeerThatKeepsReadingIsKept(t *testing.T) {
	// newRelay, with an upstream socket pair of its own: a small send
	// buffer on the relay's side (as on a real link, where the kernel takes
	// a few KB at each wake-up), a small receive buffer and segments of a
	// real link's size on the peer's (on loopback a 64 KiB segment reopens
	// a small window only after tens of KB were read). Set up before it is
	// attached, so that the writer goroutine surely sees the write timeout.
	//
	// The slow pair is dialled before newUnattached's own pair is closed.
	// Dialled right after that Close, the dial failed once under the pool
	// runner ("connection has been closed by peer", with netpoll's
	// "operator has critical problem" for EPOLLIN|EPOLLRDHUP): suspected,
	// not proven, the new socket getting the closed one's descriptor
	// number while an event for the old one was still on its way.
	r := newUnattached(t, nil)
	side, peer := slowLinkPair(t)
	_ = r.upPeer.Close()
	_ = r.upSide.Close()
	r.upSide, r.upPeer = side, peer
	r.sess.AttachUpstream(poller.NewHandle(poller.NewPlainEndpoint(r.upSide)), nil)

	// 160 KB of client frames, far more than the kernel holds between the
	// two sockets, sent at once: most of it waits in the upstream socket's
	// backlog.
	var want []byte
	for i := range 40 {
		want = append(want, textFrame(string(bytes.Repeat([]byte{'a' + byte(i%26)}, 4000)), true)...)
	}
	go func() { _, _ = r.clientPeer.Write(want) }()

	// The slow reader: each read takes a whole 2,000 bytes or fails (within
	// 10 s), so the loop is bounded.
	got := make([]byte, 0, len(want))
	buf := make([]byte, 2000)
	for len(got) < len(want) {
		_ = r.upPeer.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.ReadFull(r.upPeer, buf[:min(len(buf), len(want)-len(got))])
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v (dropped although it kept reading)", len(got), len(want), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the slow peer's bytes differ from what was sent")
	}
	expectOpen(t, r.upPeer, 200*time.Millisecond, "the slow peer's socket")
}

// slowLinkPair is poller.DialPair over a link that takes little at a time: the
// peer (accepted) end has a 4 KiB receive buffer and a 1,024-byte MSS, set
// on the listener before the handshake; the netpoll end a 4 KiB send buffer
// and a 2 s write timeout.
func slowLinkPair(t *testing.T) (netpoll.Connection, net.Conn) {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1024)
		})
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	np, peer := poller.DialPair(t, ln)
	if err := np.SetWriteTimeout(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetsockoptInt(np.(netpoll.Conn).Fd(), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	return np, peer
}
