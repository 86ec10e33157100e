package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cloudwego/netpoll"
	"golang.org/x/sys/unix"
)

// Ending client connections without netpoll's Close.
//
// Under inline handlers a netpoll Close that lands while the connection's
// handler task runs on its poller spins that poller forever (poller's doc.go,
// the inline invariant). A connection that may be relaying is therefore
// ended by a hang-up: shutdown(2) on its descriptor, which the poller
// reports at its next wait and answers by closing the connection itself,
// outside any task. Every accepted connection has its read handler from
// accept, so the hang-up always reaches someone who closes it.
//
// A descriptor number is reused once netpoll closes it, which it does after
// the connection's close callbacks; onClose takes c.mu (through stopTimer)
// and the server's connsMu, so a hang-up made under either while the
// connection is known open reaches this connection and no other.

// hangUp shuts conn down both ways: the poller closes it. Both ways, not
// only the reading side as the relay's closes do (poller's closeConn):
// netpoll closes a hung-up socket only on an event that reads nothing, and
// a client that keeps sending would keep it open; the FIN makes the client
// stop. Nothing more is written to a connection ended this way.
func hangUp(conn netpoll.Connection) {
	if fc, ok := conn.(netpoll.Conn); ok {
		_ = unix.Shutdown(fc.Fd(), unix.SHUT_RDWR)
	}
}

// hangUpClients hangs up every accepted client connection, for Shutdown.
func (s *Server) hangUpClients() {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	for c := range s.conns {
		hangUp(c.conn)
	}
}

// waitConnsCtx waits until every accepted client socket is closed, or ctx
// ends.
func (s *Server) waitConnsCtx(ctx context.Context) {
	for s.clientConns.Load() > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// handshakeExpired is the handshake timer: the connection did not finish
// its handshake in HandshakeTimeout. A timer that fired just as the request
// was answered (Stop cannot stop a running timer function) finds the timer
// gone and leaves the new session alone; otherwise the connection is hung
// up, under c.mu so that it is still open (onClose waits for c.mu).
func (c *clientConn) handshakeExpired() {
	if h := c.srv.hooks.Load(); h != nil && h.handshakeTimer != nil {
		h.handshakeTimer()
		if h.handshakeTimerDone != nil {
			defer h.handshakeTimerDone()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil {
		return // answered or closed meanwhile
	}
	hangUp(c.conn)
}

// recoverRequest ends a read handler of an accepted connection that
// panicked; onRequest defers it. The panic is logged with its stack, the
// connection's buffered input discarded (netpoll calls the handler again at
// once while input remains) and the connection hung up: a panic that left
// the handler would make netpoll Close the socket from the poller (a spin
// under inline handlers) or, on the poller goroutine, end the process.
func (s *Server) recoverRequest(conn netpoll.Connection) {
	r := recover()
	if r == nil {
		return
	}
	s.log.Error("request handler panicked; dropping the connection", "remote", conn.RemoteAddr().String(),
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	rd := conn.Reader()
	_ = rd.Skip(rd.Len())
	_ = rd.Release()
	hangUp(conn) // inside the handler: netpoll closes only after it returns
}
