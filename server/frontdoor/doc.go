// Package frontdoor is the gateway's front door: bytes in, a routed request
// out. It accepts client connections, runs their TLS handshake, reads and
// bounds the request head, checks a WebSocket upgrade's headers, collects an
// API request's body, and hands the request to a Handler, which decides what
// it becomes: a session, an API answer, a refusal.
//
// Why a package of its own: everything before a request is read is the same
// for every kind of session and every protocol, and it is where a hostile or
// slow client is met, so it is bounded on its own terms (MAX_CONNECTIONS
// counted from accept, MAX_HANDSHAKES, HANDSHAKE_TIMEOUT_SECS, MAX_HEADER_BYTES,
// the body's bound) and never blocks netpoll's handlers. It imports the
// reactor (poller) and nothing of sessions or protocols; what it needs from
// the rest comes in Config and Deps, and what it hands on goes through
// Handler.
//
// A connection's path, in order:
//
//	Door.onPrepare   Door.accept counts it against MAX_CONNECTIONS or refuses
//	                 it (Door.refuseAtAccept: the canned 503 on a plain
//	                 listener, a close on a TLS one); Handler.NewConn
//	                 allocates its Conn (one allocation with the handler's
//	                 own state; the Conn is its own netpoll context), the
//	                 HANDSHAKE_TIMEOUT_SECS timer (Conn.handshakeExpired)
//	Door.onRequest   dispatches on the connection's phase (connPhase)
//	Conn.collectTLS  the ClientHello is collected on the handler;
//	                 Conn.tlsHandshake runs in a goroutine (MAX_HANDSHAKES),
//	                 then reads the first request head itself
//	Conn.readHead    the head, bounded by MAX_HEADER_BYTES
//	Conn.route       the mux: parseRequest, then Handler.Route names an API
//	                 endpoint (Conn.startBody collects its body, then
//	                 Handler.HandleAPI answers it in a goroutine) or not
//	                 (Handler.HandleRequest: health, an upgrade, a refusal)
//
// The Handler answers through the Conn: Refuse or AnswerNow; an upgrade
// with CheckUpgrade and ReadCredentials, then StartRelay and Switch (the
// 101, and the bytes the client sent behind its head, to the session); a
// decision that needs I/O with OffLoopStep. Beside the path: Door.Serve and
// Door.serveListener (the client listener, served again when netpoll lets go
// of it), stoppableListener (the listening socket as netpoll polls it),
// Door.StopAccepting and Door.Shutdown (hang-ups, never netpoll's Close from
// outside a handler: package poller's inline invariant), TLSConfig (the
// listener's certificate, reloaded when its files change).
package frontdoor
