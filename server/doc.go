// Package server wires the gateway and runs its sessions: a request that
// the front door (server/frontdoor: accept, TLS, the request head, an API
// request's body) has read becomes a session or an API answer here. What a
// session needs that is not its own lives in packages with one job each:
// balance (which deployment, its health and slots, the routing strategies,
// the hedged dial race), turns (per-turn latency), tracing (OpenTelemetry spans), limit and
// cluster (per-key limits on one instance or across a Redis), apps (client
// secrets, call owners), protocol (what is specific to the voice protocol),
// admin (the admin port), and routes, usage, spend, spenddb below them.
//
// The path of a connect, in order, step by step, once the front door has
// read its request (the server is its frontdoor.Handler; NewConn allocates
// a clientConn: the front door's Conn and a session's state, in one
// allocation):
//
//	Route         an API request (apiPaths, liveEndpoint): its body is
//	              collected, then HandleAPI answers it (client secrets in
//	              mintClientSecret, calls in createCall, GPT-Live's WebRTC
//	              create, call controls, forks and recordings in liveAPI)
//	HandleRequest health, the path and the method; then decide (no I/O):
//	  origins.allow   ALLOWED_ORIGINS
//	  frontdoor.ReadCredentials, then frontdoor.CheckUpgrade
//	  authenticateConnect  a key, or a client secret (apps.Secrets.Verify)
//	  pickGroup       a secret's group, transcription routing, the
//	                  protocol's model, the default
//	  translationAsk  a translation connect names its model
//	  decideSideband; checkSideband  a call owner known here: the key, the
//	                  client secret; the call's deployment, or a GPT-Live
//	                  sideband's or WebSocket fork's (resolveLiveAttach)
//	  admit           draining, MAX_CONNECTIONS, then admitEntry, the one
//	                  admission of every entry point (WebSocket connects,
//	                  WebRTC calls and Live creates, sidebands, forks): the
//	                  key's models, budgets.check, the key's limits
//	                  (limit.Local, or cluster.Limiter), the deployment's
//	                  slot (balance.Reserve); what each entry counts is its
//	                  table
//	  a GPT-Live route: no group yet (its session.start names it); rtgate's
//	                  client secrets refused (refuseLiveSecret)
//	decideOffLoop only when the decision needs I/O (a call owner in Redis,
//	              the Redis admission): a goroutine, client bytes buffered
//	              meanwhile (frontdoor.Conn.OffLoopStep)
//	open          the admission's plan (the deployments to try, the probe or
//	              the slot holder first, in the routing strategy's order:
//	              balance's Balancer.order), the connect span
//	              (server/tracing), the session registered
//	              (sessionInfo, setupWatch: the upstream's events read for
//	              usage, turns and spans), budgets.meter, the 101
//	              (frontdoor.Conn.Switch), then the upstream:
//	  keepLive        a GPT-Live session: the first message held
//	                  (poller.HoldFirst) and read (protocol.ReadStart), then
//	                  pickGroup, balance.Reserve, dialFor, the rewritten
//	                  session.start first (on a pooled unstarted socket with
//	                  LIVE_POOL_SIZE: liveState.fromPool); session.close as
//	                  its end (poller.SetFarewell); usage.LiveMeter; with
//	                  continuity, session.start's config and input kept
//	                  (continuity's StartLive)
//	  newLiveFork     a GPT-Live WebSocket fork (metered and ended as a Live
//	                  session, its session.start relayed)
//	  startApp        a translation session's, a GPT-Live sideband's or
//	                  fork's (startLiveAttach; a sideband's frames meter its
//	                  session when the gateway's own sideband cannot:
//	                  appSideband), a sideband's, a transcription session's
//	                  (connectUpstream) or a client secret's (primeSession:
//	                  the protocol's Prime)
//	  keepContinuity  for a Realtime model session (its Holder keeps the
//	                  upstream's errors for the gateway's own events from
//	                  the client: holdGatewayAnswer; without continuity
//	                  poller.FilterUpstream does)
//	  tryWarm         a warm pool socket, else connectUpstream: on a miss
//	                  hedged by the pool (a warm socket that lands before the
//	                  own dial serves the session; the dial then goes into
//	                  the pool: upstream.Miss)
//	  dialFor         balance.Race (hedged dials, failover), the dial tail
//	                  shared by every attempt; attached
//
// During a session, when its upstream is lost or nears its cap:
//
//	resumer       session continuity (server/continuity keeps the
//	              conversation): keepContinuity at open; resumer.resume
//	              (SessionConfig.Resume) and resumer.upstream: a slot, a
//	              primed upstream (resumer.primed: the replay),
//	              AdoptResumed; armRollover before the cap
//	liveState     a GPT-Live session's part: its cap held (liveHoldText,
//	              holdClose), the meter's next upstream session and a
//	              delegated response failed (resuming), the replay as one
//	              session.start (liveReplay), GPT-Live's pool (livePrimed)
//
// And at the end of a session:
//
//	sessionEnded  out of the registry, the admitter's and the balancer's
//	              slots given back, uncount, the metrics, the turns' summary
//	              (endTurns); a GPT-Live sideband that metered hands the
//	              metering back (appSideband.ended)
//	records.record  USAGE_LOG, the spend log; metrics.countTokens
//	explainBeta   a close for the retired beta interface, explained
//
// Beside the path: Drain (SIGTERM; Shutdown's hang-ups are the front
// door's: frontdoor.Door.Shutdown), the watchdog (idle and stalled
// sessions, the memory budget), doorSettings (the front door's share of the
// settings), metrics and ServeAdmin (the gateway's metrics, the admin
// port's view of the gateway), FromEnv
// (Settings from the environment), callMeters (the gateway's own metering
// sidebands to WebRTC calls) and liveMetering (which sideband meters a
// GPT-Live WebRTC session), newLivePool (GPT-Live's warm pool, primed for
// every Live deployment).
package server
