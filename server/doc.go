// Package server wires the gateway and runs its sessions: a request that
// the front door (server/frontdoor) has read becomes a session or an API
// answer here. New, Serve, Reload, Drain and Shutdown are the gateway's
// life; SettingsTable and FromEnv its configuration; decide, admit and open
// turn a connect into a relayed session of one kind (sessionKind), and
// sessionEnded into a record.
//
// What a session needs that is not its own lives in packages with one job
// each (balance, limit and cluster, apps, protocol, continuity, turns,
// tracing, usage, spend, spenddb, admin, routes). The path of a connect
// step by step, an upstream frame's path through the relay, and the import
// rules are in docs/architecture.md; the reactor's rules are package
// poller's.
package server
