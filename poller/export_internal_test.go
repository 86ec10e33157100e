package poller

import (
	"net"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
)

// InlineHandlers reports whether Tune chose HandlersInline.
func InlineHandlers() bool { return inlineHandlers.Load() }

// DialPair is one loopback TCP connection to ln: its netpoll end, dialed
// (the relay's socket), and its plain end, accepted (the peer). Both are
// closed when the test ends.
func DialPair(tb testing.TB, ln net.Listener) (netpoll.Connection, net.Conn) {
	tb.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	np, err := netpoll.DialConnection("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { _ = np.Close(); _ = peer.Close() })
	return np, peer
}
