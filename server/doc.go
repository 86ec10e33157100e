// Package server is the gateway's front door and session lifecycle: a
// client connection becomes a session here. What a session needs that is
// not its own lives in packages with one job each: balance (which
// deployment, its health and slots, the routing strategies, the hedged dial
// race), turns (per-turn latency), tracing (OpenTelemetry spans), limit and
// cluster (per-key limits on one instance or across a Redis), apps (client
// secrets, call owners), protocol (what is specific to the voice protocol),
// admin (the admin port), and routes, usage, spend, spenddb below them.
//
// The path of a connect, in order, file by file:
//
//	server.go     onPrepare: a clientConn (one allocation; its own netpoll
//	              context), the HANDSHAKE_TIMEOUT timer; onRequest
//	              dispatches on the connection's phase (connPhase)
//	accept.go     frontDoor.accept: MAX_CONNECTIONS and the front door's
//	              counts, or the canned 503 (refuseAtAccept)
//	tlsaccept.go  collectTLS: the ClientHello is collected on the handler;
//	              tlsHandshake runs in a goroutine (MAX_HANDSHAKES), then
//	              reads the first request head
//	server.go     readHead: the head is collected from netpoll's buffer,
//	              bounded by MAX_HEADER_BYTES
//	connect.go    handle: health, API requests (httpapi.go: client secrets
//	              in clientsecrets.go, calls in apps.go, GPT-Live's WebRTC
//	              create, call controls, forks and recordings in
//	              liveapps.go), the path and the method; then decide (no I/O):
//	connect.go      origins.allow (ALLOWED_ORIGINS)
//	upgrade.go      credentials, then checkUpgrade
//	clientsecrets.go authenticateConnect (a key, or a client secret:
//	                apps.Secrets.Verify)
//	session.go      pickGroup (a secret's group, transcription routing,
//	                the protocol's model, the default)
//	apps.go         translationAsk (a translation connect names its model)
//	connect.go      decideSideband; apps.go checkSideband (a call owner
//	                known here: the key, the client secret; the call's
//	                deployment, or a GPT-Live sideband's or WebSocket
//	                fork's: liveapps.go resolveLiveAttach)
//	connect.go      admit: draining, MAX_CONNECTIONS, then admission.go's
//	                admitEntry, the one admission of every entry point
//	                (WebSocket connects, WebRTC calls and Live creates,
//	                sidebands, forks): the key's models, spend.go
//	                budgets.check, the key's limits (limit.Local, or
//	                cluster.Limiter), the deployment's slot
//	                (balance.Reserve); what each entry counts is its table
//	live.go         a GPT-Live route: no group yet (its session.start
//	                names it); rtgate's client secrets refused
//	connect.go    decideOffLoop, only when the decision needs I/O (a call
//	              owner in Redis, the Redis admission): a goroutine, client
//	              bytes buffered meanwhile (pendingStep)
//	connect.go    open: the admission's plan (the deployments to try, the
//	              probe or the slot holder first, in the routing strategy's
//	              order: balance/strategy.go), the connect span
//	              (server/tracing), the 101, the session registered
//	              (session.go: sessionInfo, setupWatch: the upstream's
//	              events read for usage, and in watch.go for turns and
//	              spans), spend.go budgets.meter, then the upstream:
//	live.go         a GPT-Live session: the first message held
//	                (poller.HoldFirst) and read (protocol.ReadStart),
//	                then pickGroup, balance.Reserve, dialFor, the
//	                rewritten session.start first (on a pooled unstarted
//	                socket with LIVE_POOL_SIZE: fromPool); session.close
//	                as its end (poller.SetFarewell); usage.LiveMeter;
//	                with continuity keepLive, and session.start's config
//	                and input kept (continuity's StartLive)
//	live.go         a GPT-Live WebSocket fork: newLiveFork (metered and
//	                ended as a Live session, its session.start relayed)
//	apps.go         startApp: a translation session's, a GPT-Live
//	                sideband's or fork's (liveapps.go startLiveAttach; a
//	                sideband's frames meter its session when the gateway's
//	                own sideband cannot: watch.go appSideband), a sideband's,
//	                a transcription session's
//	                (session.go connectUpstream) or a client secret's
//	                (sessionprime.go primeSession: the protocol's Prime)
//	connect.go      keepContinuity (resume.go), for a Realtime model session
//	                (its Holder keeps the upstream's errors for the
//	                gateway's own events from the client: gatewayevents.go;
//	                without continuity poller.FilterUpstream does)
//	connect.go      tryWarm (a warm pool socket), else session.go
//	                connectUpstream: on a miss hedged by the pool (a warm
//	                socket that lands before the own dial serves the
//	                session; the dial then goes into the pool:
//	                upstream/hedge.go)
//	session.go      dialFor: balance.Race (hedged dials, failover), the
//	                dial tail shared by every attempt; attached
//
// During a session, when its upstream is lost or nears its cap:
//
//	resume.go     session continuity (server/continuity keeps the
//	              conversation): keepContinuity at open; resumer.resume
//	              (SessionConfig.Resume) and resumer.upstream: a slot, a
//	              primed upstream (sessionprime.go resumer.primed: the
//	              replay), AdoptResumed; armRollover before the cap;
//	live.go       a GPT-Live session's part: its cap held (liveHoldText,
//	              holdClose), the meter's next upstream session and a
//	              delegated response failed (resuming), the replay as one
//	              session.start (liveReplay), GPT-Live's pool (livePrimed)
//
// And at the end of a session:
//
//	session.go    sessionEnded: out of the registry, the admitter's and the
//	              balancer's slots given back, uncount, the metrics, the
//	              turns' summary (watch.go endTurns); a GPT-Live sideband
//	              that metered hands the metering back (watch.go ended)
//	spend.go      records.record (USAGE_LOG, the spend log); metrics.countTokens
//	apps.go       explainBeta
//
// Beside the path: drain.go (SIGTERM, Shutdown's hang-ups), watchdog.go (idle and stalled
// sessions, the memory budget), accept.go (the client listener netpoll polls,
// accepted from and closed by the gateway itself; REUSEPORT), metrics.go (the gateway's metrics, the admin port's view of
// the gateway), config.go (Settings from the environment), apps.go (the
// gateway's own metering sidebands to WebRTC calls) and watch.go (which
// sideband meters a GPT-Live WebRTC session: liveMetering), live.go (GPT-Live's warm pool, primed for
// every Live deployment).
package server
