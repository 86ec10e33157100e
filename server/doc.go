// Package server wires the gateway: New maps the settings (SettingsTable is
// what FromEnv reads them with) into each part's own Config and makes the
// parts; Serve, Reload, Drain and Shutdown run them. A connection comes in
// through the front door (server/frontdoor), whose Handler the Server is:
// an API request goes to the HTTP endpoints (server/api), health and the
// WebSocket connects to the sessions (server/session). The watchdog and the
// memory budget walk the sessions' registry; the metrics registry is the
// server's, each part registering its own.
//
// docs/architecture.md walks a connect from the front door to the session's
// record, an upstream frame through the relay, and the package map with its
// import rules. The rules the wiring keeps:
//
//   - The Handler's methods that run on netpoll's handler (NewConn, Route,
//     HandleRequest, ClientLeft) never block: a decision that needs I/O
//     goes to a goroutine through frontdoor.Conn.OffLoopStep.
//   - A socket with a handler is hung up, never closed with netpoll's Close
//     from outside its handler (package poller's doc, the inline
//     invariant; internal/closecheck checks it).
//   - Comments name identifiers, not files.
package server
