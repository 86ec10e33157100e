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
// Its parts, bottom up: NBConn (a netpoll connection as the net.Conn that
// crypto/tls expects, blocking for the handshake, then non-blocking),
// Endpoint (one socket, plain or TLS: read, write without ever blocking the
// caller, close), Handle (a dialed upstream socket with one owner at a
// time: the warm pool, then a session), and Session (the splice, its close
// state table closeState, and resume: the relay's part of session
// continuity). docs/architecture.md follows a frame through them; the
// sections below are the rules they keep.
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
// A handler that runs on its socket's own poller, and only there (where
// netpoll cannot be reading the same socket), reads the rest of an
// unfinished frame or TLS record straight from the descriptor
// (Endpoint.readAhead, NBConn.Read): netpoll reads in pieces of its buffer
// node (512 bytes here) and would otherwise run the handler per piece.
//
// # The inline invariant
//
// netpoll v0.7.2 marks a socket's operator "in use" for the whole handling
// of an event (FDOperator do ... done). Under HandlersInline the read
// handler runs inside that window, on the poller goroutine. A netpoll Close
// from any goroutine during that handler only marks the connection closed;
// the task then runs the close callbacks itself, still on the poller, and
// the last one (netpoll's own, which frees the operator) waits in
// FDOperator.unused for the state to leave "in use", which only that same
// goroutine's done could do: the poller loops forever and every socket on
// it stops. Hence, under inline handlers:
//
//	From the moment a socket's read handler can run on its poller until the
//	socket is closed, no goroutine (the handler included) calls netpoll's
//	Close or Detach on it, and no panic leaves the handler.
//
// How the code keeps it:
//   - The gateway's closes of a socket with a handler are hang-ups:
//     shutdown(2) on its descriptor (Endpoint.closeConn; the server's
//     hangUp), which the poller sees at its next wait and answers by
//     closing the socket itself, outside any task. The descriptor is known
//     to be the socket's because netpoll closes it only after the close
//     callbacks, which take the lock the shutdown is made under.
//   - A dialed socket is closed with netpoll's Close only while its handler
//     is not installed, and Handle.Start installs none once the gateway
//     chose that Close (one lock, Endpoint.mu, orders the two); a dial
//     whose deadline's Close already started fails.
//   - Handlers recover panics (recoverHandler, the server's
//     recoverRequest): logged with the stack, the buffered input discarded
//     (netpoll calls a handler again at once while input remains), the
//     socket hung up.
//   - Only sockets whose handler never blocks run inline: an accepted
//     socket turns inline once it relays, and one whose request another
//     goroutine handled (TLS, a Redis admission) only after that goroutine
//     let go of its locks; until then its handlers run on the pool, where a
//     Close is carried out by the task's own goroutine.
//   - netpoll's EventLoop.Shutdown (which Closes connections it finds idle,
//     not atomically with the poller) runs only after every accepted
//     socket was hung up and has closed.
//
// internal/closecheck lists every call of netpoll's Close or Detach in the
// module against an allowlist with the reason each is safe; a new one fails
// it.
//
// # Lock order
//
// A session's locks are taken in this order, never the other way round:
//
//	the upstream Handle's read lock (readMu: an upstream read, a Rollover)
//	  → the client side's lock (client.mu: fromUpstream holds it while an
//	    upstream frame is forwarded and inspected)
//	    → the upstream side's lock (up.mu: fromClient holds it while a
//	      client frame is forwarded and inspected; BytesFromClient,
//	      SendUpstream and the farewell take it)
//	      → leaf locks, which take none of the above: an Endpoint's mu, the
//	        server's per-session trackers (responses in flight, turns, the
//	        kept conversation), infoMu
//
// So an upstream Inspector may take up.mu (the server's responses in
// flight read BytesFromClient once per response.created and response.done),
// and nothing that holds up.mu may take client.mu: the client's
// Inspectors, the farewell's frame func and a rollover's quiet run under
// up.mu and take only leaf locks; clientClosed, tellGone, resume, attach,
// redial and failUpstream release up.mu before they write to the client;
// maybeEnd takes the two one after the other. SendClient and Terminate take
// client.mu: an Inspector that needs them calls them from a goroutine of
// its own.
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
//     frame is answered from the close callback by a raw write (answerHalfClose),
//     and nothing the other side sends later can reach it.
//   - netpoll closes a connection's descriptor in a close callback of its
//     own, added first and so run last; raw writes rely on that order (and
//     on the endpoint's closed flag) never to hit a reused descriptor.
//   - The same callback frees the input buffer (closeBuffer) without any
//     lock against a reader outside OnRequest, and hands the socket's
//     operator back to be reused by the next socket. So every read by hand
//     (Handle.Start, FinishHandOver, a drain, Endpoint.ByHand) runs between
//     byHandBegin and byHandEnd: the endpoint's close guard, which runs just
//     before that callback, waits for a read under way, and a read that
//     would start after the guard does not start. A read of a freed buffer
//     crashes only once the operator serves another socket, so it went
//     unseen in quiet tests.
package poller
