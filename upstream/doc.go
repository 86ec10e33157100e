// Package upstream opens WebSocket connections to the realtime upstream
// (OpenAI or anything speaking its protocol) as netpoll connections, so the
// gateway's reactor drives them like its client sockets (Dialer), and keeps
// a warm pool of them (Pool): sockets already past session.created, handed
// to client connects so that they skip the upstream's handshake.
//
// # The pool under load
//
// The pool must serve a first burst (hundreds of clients at once against a
// pool at its floor) and sustained demand (callers arriving continuously)
// alike. Its parts, in the order a connect meets them:
//
//   - Pool.Expect (dialAhead): a dial of the likely key starts when a client's TCP
//     connection is accepted, ahead of its request; a miss claims a pool
//     dial in flight instead of dialing its own.
//   - Miss: a miss takes whichever lands first, its own dial or a warm
//     socket.
//   - targetSize, inflightLimit: each key's target and in-flight limit, from its measured
//     connect rate and refill time (Little's law).
//   - growRoomLocked, the yield rule: which of a refill's dials may start now. A hit's
//     replacement always may; growth toward a raised target yields to a
//     burst's own dials for a bounded window, then grows at the in-flight
//     limit if misses keep coming, and is paced once the burst has passed.
//   - DemandMemory, Pool.Warming: demand remembered across restarts, and
//     /health reporting warming until the pool holds it.
//
// Why the yield is bounded (issue 31). Before, growth was held to max(2,
// client dials / 8) while any client dial was in flight, and let go only
// when the last one ended. Under continuous arrivals the last client dial
// never ends, because every connect misses, and the pool never caught up;
// and one miss among hits held the hits' replacements back, which drained
// the pool into that state. Measured 2026-12-04 on the 2-core / 24 GiB dev
// box, shared and loaded (load average 11-15: indicative), mockai answering
// the upgrade after 100 ms, REALTIME_POOL_SIZE=auto, after a warm-up of 500
// calls, connects served warm in the next run (rtgate_pool_hits_total),
// the old build and this one in the same hour:
//
//	load (wsbench, closed loop)                 before       now
//	50 concurrent short calls, ws://            47 / 2,000   2,000 / 2,000
//	200 concurrent short calls, ws://           137 / 3,000  3,000 / 3,000
//	150 concurrent ~1 s calls (50 deltas
//	  20 ms apart), ws://                       2,400 / 2,400  2,400 / 2,400
//	50 concurrent short calls, wss://           29 / 1,300   1,227 / 1,300
//	                                                         (1,300 in five reruns)
//
// A first burst keeps the yield: all of a cold burst's dials start within
// its window, so they hold growth back however long they take. The cold
// first burst of 200 (bench/burstab.sh: both builds and direct at the same
// time, medians of six trials, total p99 against direct): ws:// +3.0 %
// before, +2.0 % now; wss:// +6.3 % before, +7.3 % now, with trials
// spreading over 5 points on the loaded box, more than the difference.
package upstream
