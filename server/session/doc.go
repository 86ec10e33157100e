// Package session turns a decided WebSocket request into a relayed session
// and sees it to its end: the connect's decision (the kind, sessionKind,
// which every later phase reads; the model group and admission through
// server/admission), the upstream it gets (a warm socket, a dial raced
// across deployments, an app's own start), what watches its frames
// (metering, turns, continuity, the gateway's own events), its resumes
// onto fresh upstreams, and its end (the registry, the slots given back,
// the record written). The Manager is the sessions of one instance; package
// server makes it and hands it the front door's WebSocket requests.
//
// What a session needs that is not its own lives in packages with one job
// each (balance, routes, limit and cluster, apps, protocol, eventtype,
// usage, turns, continuity, tracing, spend, spenddb). The rules it keeps:
//
//   - Every entry point (WebSocket connects here; WebRTC calls and
//     GPT-Live creates in server/api, through AdmitCall) is admitted
//     through one admission, admission.Gate.Admit, whose table says what
//     each entry counts.
//   - A session's observers (the observer type) run under the relay's
//     locks, in the order written on that type; none takes the relay's
//     locks or calls into the relay while holding one of its own.
//   - A socket with a handler is hung up, never closed with netpoll's Close
//     from outside its handler (package poller's doc, the inline
//     invariant; internal/closecheck checks it).
//   - It imports neither package server nor upward: the wiring gives it
//     what it needs (Config, Deps).
package session
