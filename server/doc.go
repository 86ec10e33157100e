// Package server wires the gateway and runs its sessions: a request that
// the front door (server/frontdoor) has read becomes a session here, or
// goes to the HTTP endpoints (server/api). The server is the front door's Handler; SettingsTable is
// what FromEnv reads its settings with; decide gives each connect its kind
// (sessionKind), which every later phase reads. What a session needs
// that is not its own lives in packages with one job each (balance, routes,
// limit and cluster, apps, protocol, eventtype, usage, turns, continuity,
// tracing, spend, spenddb, admin).
//
// docs/architecture.md walks a connect from the front door to the session's
// record, an upstream frame through the relay, and the package map with its
// import rules. The rules this package keeps:
//
//   - The Handler's methods that run on netpoll's handler (NewConn, Route,
//     HandleRequest, ClientLeft) never block: a decision that needs I/O
//     goes to a goroutine through frontdoor.Conn.OffLoopStep.
//   - Every entry point (WebSocket connects, WebRTC calls and GPT-Live
//     creates, sidebands, forks) is admitted through one admission,
//     admission.Gate.Admit (server/admission), whose table says what each
//     entry counts.
//   - A session's observers (the observer type) run under the relay's
//     locks, in the order written on that type; none takes the relay's
//     locks or calls into the relay while holding one of its own.
//   - A socket with a handler is hung up, never closed with netpoll's Close
//     from outside its handler (package poller's doc, the inline
//     invariant; internal/closecheck checks it).
//   - Comments name identifiers, not files.
package server
