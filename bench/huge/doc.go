// Package huge holds a very large number of idle sessions on one host
// (`wsbench huge`, `make bench-huge`; 100,000 by default) and reports what
// they cost: sessions held, gateway memory per session (RSS and live heap),
// how fast they were established, and the CPU of each role.
//
// One process cannot hold them: the open-file limit here is a hard 20,000
// per process, and a session costs the gateway two descriptors. So the run
// starts, all on loopback:
//
//	Gateways gateway processes sharing one port (REUSEPORT=1, the kernel
//	spreads accepted connections over them), each dialing its upstream
//	sockets from its own source address (UPSTREAM_SOURCE_IPS=127.0.0.x),
//	with the warm pool off so that every upstream socket is a session's;
//
//	enough mockai processes for the upstream sockets (the gateways are
//	spread over them round-robin, each gateway's sessions on one mockai);
//
//	enough `wsbench -hold` client processes for the client sockets, each
//	connecting from its own source addresses (127.1.k.1-127.1.k.8) so that
//	no source address runs out of ephemeral ports.
//
// Every process stays under PerProcess descriptors (default 80% of the
// hard limit). The run waits (bounded by OpenTimeout) until the gateways
// report every session open or the count stops growing, holds them for
// HoldFor, takes its readings, and stops every process it started by PID,
// clients first, also when interrupted. Memory per session is measured
// from the gateways' own /proc RSS and, after a forced collection, their
// live heap (go_memstats_heap_alloc_bytes on /metrics), both as the total
// divided by the sessions held and as the growth over the idle gateways.
//
// The report (stdout, and report.md and results.json in the run's folder)
// also prints the host settings such a run depends on (file limits, the
// ephemeral port range, somaxconn, tcp_mem).
package huge
