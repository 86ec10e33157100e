// Package scenario tests, as a user of the gateway's main job sees it, the
// headline rows of issue 31: the gateway (bin/gateway) and the fake
// upstream (bin/mockai) run as their own processes, built without -race by
// TestMain whatever flags the test binary has, and every assertion is a
// count, never a wall-clock limit.
//
// What a user relies on, and the test that asserts it:
//
//   - TestWarmPoolServesSustainedLoad: with an upstream that answers the
//     upgrade after 100 ms (mockai -upgrade-delay 100ms, OpenAI's takes
//     150-400 ms) and REALTIME_POOL_SIZE=auto, callers that arrive
//     continuously are served from the warm pool, not only the first burst.
//     After a warm-up, at least 97 % of the connects of the measured part
//     are pool hits (the deltas of rtgate_pool_hits_total and
//     rtgate_pool_misses_total across that part) for short calls at 50 and
//     at 200 concurrent and for ~1 s calls (50 audio deltas 20 ms apart) at
//     150 concurrent, over a ws:// and a wss:// upstream, and every call
//     completes. The load is a closed loop of C callers whose calls vary in
//     length (each holds its session a random while before hanging up), so
//     connects do not come in waves: a client dial is in flight at every
//     moment, as with a real service's callers.
//   - TestPerClientValuesOpenNoExtraSessions: what one client adds to its
//     connect cannot multiply the upstream sessions. 40 connects each with
//     its own query parameter (&nonce=N), and 10 each with its own
//     OpenAI-Safety-Identifier header, open at most one upstream session
//     per connect served plus the configured pool target (counted at
//     mockai: GET /mock/stats upgrades), over ws:// and wss://.
//   - TestSharedLimitHoldsOnABusyHost: a key's max_sessions (30) holds
//     across three gateway instances sharing one redis-server while two CPU
//     burners (this test binary re-run as a busy loop, bounded in time,
//     killed by PID) keep the host busy and 60 clients try at once to hold
//     a session (a refused one retries a few times, as clients do): every
//     round ends with exactly 30 held, never more whether Redis answered
//     within its budget or not, and never fewer (every session under the
//     limit is usable), and every other client got 429
//     concurrent_sessions_exceeded.
//
// redis-server missing is a failure, not a skip (server/redistest). Each
// load is bounded in count and in time; the package takes one to one and a
// half minutes on a 2-core machine. SCENARIO_BIN_DIR=dir runs the scenarios
// against a gateway and mockai built elsewhere (another commit's), to
// compare builds.
package scenario
