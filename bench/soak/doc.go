// Package soak runs the gateway under stress with faults injected at random
// and checks that every failure is one the soak caused on purpose.
//
// It starts mockai (with -faults-from-query) and the gateway as separate
// processes on free loopback ports, with the gateway's warm pool on
// (REALTIME_POOL_SIZE=auto), and runs Config.Concurrency workers for
// Config.Duration. Each session is planned before it starts (Plan): a
// normal call, or a call with one fault the soak injects itself, so the soak
// always knows which sessions it made faulty:
//
//	upstream faults, asked of mockai in the query (?fault=...), which the
//	gateway passes upstream: TCP drop or close 1011 after k frames, a
//	malformed frame after k frames, a stall (mockai stops reading and
//	sending; the client keeps sending audio until the gateway cuts the
//	upstream, whose kernel took nothing for WRITE_TIMEOUT_SECS), HTTP 401 on
//	the upstream upgrade;
//
//	client faults: a slow client that stops reading while responses pile
//	up (the gateway must drop it once the kernel has taken nothing for
//	WRITE_TIMEOUT_SECS), random bytes
//	instead of an HTTP request, half a request head then silence, an
//	unmasked frame, frames with reserved bits, a message over the size
//	limit, an abrupt hang-up mid-response.
//
// Every session ends with a cause: "completed", or a failure class in
// wsbench's vocabulary (bench/load: unexpected_close_1011,
// error_event_upstream_unavailable, ...) with a detail. The attribution
// table (Expectations) lists, for each kind, the causes its fault explains.
// A normal session that did not complete, or a faulty session that ended in
// a cause its fault does not explain (including one that completed although
// its fault must have fired), is unexplained: it is listed in the report and
// fails the run.
//
// While the load runs, the gateway's admin /metrics is scraped every second
// for resident memory, open file descriptors, goroutines, live heap and
// open sessions. The start values are taken before the first session; the
// end values after every session has ended and the warm pool has emptied
// (REALTIME_POOL_MIN=0 and a short REALTIME_POOL_MAX_IDLE_SECS, so an idle
// gateway holds nothing), and after asking the gateway for a garbage
// collection (GET /debug/pprof/heap?gc=1): garbage is not a leak. End values
// beyond start plus Config.Margins fail the run, as do sessions left open,
// a gateway that exited, or a panic or data race in its log.
//
// Results go to <OutDir>/soak-<timestamp>/: summary.md, results.json, the
// mockai and gateway logs, and the idle gateway's heap profile
// (heap-end.pprof) and goroutine dump (goroutines-end.txt) for whoever
// chases a leak.
package soak
