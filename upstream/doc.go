// Package upstream opens WebSocket connections to the realtime upstream
// (OpenAI or anything speaking its protocol) as netpoll connections, so the
// gateway's reactor drives them like its client sockets (dial.go), and keeps
// a warm pool of them (pool.go): sockets already past session.created, handed
// to client connects so that they skip the upstream's handshake.
//
// # The pool under load
//
// The pool must serve a first burst (hundreds of clients at once against a
// pool at its floor) and sustained demand (callers arriving continuously)
// alike. The files, in the order a connect meets them:
//
//   - anticipate.go: a dial of the likely key starts when a client's TCP
//     connection is accepted, ahead of its request; a miss claims a pool
//     dial in flight instead of dialing its own.
//   - hedge.go: a miss takes whichever lands first, its own dial or a warm
//     socket.
//   - sizing.go: each key's target and in-flight limit, from its measured
//     connect rate and refill time (Little's law).
//   - yield.go: which of a refill's dials may start now. A hit's
//     replacement always may; growth toward a raised target yields to a
//     burst's own dials for a bounded window, then grows at the in-flight
//     limit if misses keep coming, and is paced once the burst has passed.
//   - memory.go, warming.go: demand remembered across restarts, and
//     /health reporting warming until the pool holds it.
//
// Why the yield is bounded (issue 31). Before, growth was held to max(2,
// client dials / 8) while any client dial was in flight, and let go only
// when the last one ended. Under continuous arrivals the last client dial
// never ends, because every connect misses, and the pool never caught up.
// Measured on the 2-core dev box (shared, loaded, so indicative), mockai
// answering the upgrade after 100 ms, REALTIME_POOL_SIZE=auto, after a
// warm-up of 500 calls, hits of the next run (rtgate_pool_hits_total):
//
//	load (wsbench)                          before       now
//	50 concurrent short calls, ws://        21 / 2,000   2,000 / 2,000
//	200 concurrent short calls, ws://       224 / 3,000  3,000 / 3,000
//	50 concurrent short calls, wss://       24 / 1,300   1,300 / 1,300
//
// A first burst keeps the yield: all of a cold burst's dials start within
// its window, so they hold growth back however long they take, and the cold
// first burst through the gateway stays within a few per cent of direct at
// p99 (bench/burstab.sh, the old and new builds side by side against direct,
// medians of six trials on the loaded box, ws:// and wss://: both builds
// within the same few per cent, the trial-to-trial spread larger than
// their difference).
package upstream
