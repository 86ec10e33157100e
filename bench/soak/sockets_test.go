package soak

import (
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// openSockets finds this process's own sockets with their states.
func TestOpenSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s.Close() // the client side is now CLOSE_WAIT: its peer has gone
	want := []string{
		ln.Addr().String() + " 0.0.0.0:0 LISTEN",
		c.LocalAddr().String() + " " + ln.Addr().String() + " CLOSE_WAIT",
	}
	// The FIN takes a moment to arrive.
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got, err = openSockets(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(got, want[0]) && slices.Contains(got, want[1]) || time.Now().After(deadline) {
			break
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("openSockets = %q, want it to list %q", got, w)
		}
	}
}
