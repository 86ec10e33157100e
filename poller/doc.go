// Package poller is the gateway's reactor: client and upstream sockets are
// netpoll connections on the same epoll pollers, and a Session splices two of
// them together. No goroutine is parked per connection or per session: a
// session costs CPU only when bytes arrive, and memory only for its state and
// whatever netpoll is buffering.
//
// The package relays WebSocket frames and reports events; it knows nothing of
// the protocol spoken inside the frames. What the gateway tells a client in
// its own words (an error event before a close) is built by the server and
// handed in as bytes, through SessionConfig or the ending methods.
//
// Files, bottom up:
//   - conn.go: NBConn adapts a netpoll connection to the blocking net.Conn
//     that crypto/tls and the WebSocket handshake expect, and then to a
//     non-blocking one, so that TLS reads and writes stay event-driven after
//     the handshake.
//   - endpoint.go, output.go: Endpoint is one socket, plain or TLS: how to
//     read it, write to it without ever blocking the caller, and close it.
//   - handle.go: Handle is a dialed upstream socket whose single owner (the
//     warm pool, then a session) changes under one read lock.
//   - session.go: the Session and its accessors; relay.go forwards frames;
//     attach.go connects the upstream (fresh, warm, or redialed); close.go
//     holds the close state table; ends.go ends a session on the gateway's
//     initiative; watchdog.go answers the server's watchdog.
//
// # Writes never block
//
// netpoll v0.7.2 has no non-blocking Flush and no writability callback: its
// Flush writes at once, but when the kernel's send buffer is full it parks the
// caller until everything is sent or the write timeout passes. A read handler
// parked like that stalls the other side of the session, and on netpoll's
// inline runner the poller itself. So the relay writes with a raw
// non-blocking writev on the socket's descriptor while nothing is queued for
// it; what the kernel does not take is copied into the endpoint's backlog and
// one writer goroutine per stalled endpoint sends it through netpoll's
// blocking Write, then exits. Raw writes never run while that goroutine owns
// the socket, so bytes leave in order. Over TLS every raw write is a whole
// record, so crypto/tls never sees a write fail part-way.
//
// # Reads on the poller
//
// netpoll reads a socket in pieces no larger than its buffer node (512
// bytes with the gateway's settings) and, under HandlersInline, runs the
// handler on the poller after each piece. So a handler that runs on its
// socket's own poller, and only there (where netpoll cannot be reading the
// same socket), reads the rest of an unfinished frame or TLS record straight
// from the descriptor (Endpoint.readAhead, NBConn.Read): one read event
// stays one batch and one write to the other socket.
//
// # What netpoll v0.7.2 makes impossible
//
// Measured or read from its source; none of it is worked around by reaching
// into netpoll's unexported fields:
//   - No writability callback and no non-blocking Flush: a socket whose
//     peer stopped reading costs one parked goroutine while its backlog
//     waits (BenchmarkStalledClients: 1.02 goroutines per stalled session).
//   - No read pause (netpoll issues #98, #314, #348, #422): the poller keeps
//     reading the other side, so what a stalled peer does not take moves
//     from netpoll's input buffer into the backlog; the server's watchdog
//     bounds it (Session.Stalled, Session.Buffered).
//   - Zero-copy hand-over of the backlog to netpoll's output is not
//     possible: appending a LinkBuffer made by Slice dereferences a nil
//     write node in v0.7.2, so the writer goroutine copies into netpoll's
//     output when it must wait.
//   - A hang-up (EPOLLRDHUP, a peer that shut down its sending side) closes
//     the socket right after the close callbacks: a half-closed peer's close
//     frame is answered from the close callback by a raw write (close.go),
//     and nothing the other side sends later can reach it.
//   - netpoll closes a connection's descriptor in a close callback of its
//     own, added first and so run last; raw writes rely on that order (and
//     on the endpoint's closed flag) never to hit a reused descriptor.
package poller
