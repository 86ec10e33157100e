package poller

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
)

// TestWriteByHandNeverReachesAReusedDescriptor: a handshake's write by hand
// that has looked its descriptor up when another goroutine closes the
// connection (crypto/tls's HandshakeContext at its deadline; netpoll on a
// hang-up) must not land on the socket that takes the number next. The
// write is held between the look-up and the system call (beforeFD) while
// the test closes the connection and dials a new one, which the kernel
// gives the lowest free number: the one just freed. The close must wait
// for the write instead, and the new socket's peer receive nothing.
func TestWriteByHandNeverReachesAReusedDescriptor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	dial := func() (netpoll.Connection, net.Conn) { return DialPair(t, ln) }

	reused := 0
	for range 20 { // bounded: the number is reused almost always at once
		old, oldPeer := dial()
		go func() { _, _ = io.Copy(io.Discard, oldPeer) }()
		nb := NewNBConn(old)
		oldFD := fdOf(old)
		looked, release := make(chan struct{}), make(chan struct{})
		nb.beforeFD = func() {
			close(looked)
			select { // until the new socket is dialed, or the close waits for this write
			case <-release:
			case <-time.After(200 * time.Millisecond):
			}
		}
		wrote := make(chan error, 1)
		go func() {
			_, err := nb.Write([]byte("a handshake's bytes for the old socket"))
			wrote <- err
		}()
		<-looked
		_ = old.Close()
		fresh, freshPeer := dial()
		close(release)
		if err := <-wrote; err != nil {
			t.Fatalf("the write begun before the close failed: %v", err)
		}
		if fdOf(fresh) != oldFD {
			continue // another number: this round shows nothing
		}
		reused++
		_ = freshPeer.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if n, _ := freshPeer.Read(make([]byte, 64)); n > 0 {
			t.Fatalf("%d bytes written for a closed socket reached the socket that took its descriptor number", n)
		}
		if _, err := nb.Write([]byte("after the close")); err == nil {
			t.Fatal("a write by hand after the close succeeded")
		}
		if reused == 3 {
			return
		}
	}
	t.Fatalf("the descriptor number was reused in %d of 20 rounds, want 3 to test", reused)
}
