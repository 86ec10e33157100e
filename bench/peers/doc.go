// Package peers compares the rtgate gateway with general-purpose reverse proxies:
// nginx and HAProxy (and Caddy as a reference row, with -systems), each a WebSocket
// reverse proxy in front of mockai on its own loopback port, against the client
// talking to mockai directly and the gateway with its upstream pool off and on. Every
// system gets the same load in the same run, over each upstream in turn: mockai over
// TLS (wss://, as OpenAI serves; the peers and the gateway verify its certificate)
// and over plain ws://. Each is measured Options.Rounds times per upstream (the
// second round in reverse order). It is `wsbench peers`:
//
//	make bench-peers                         # full size, TLS and plain upstream
//	make bench-peers PEERS_ARGS=-quick       # 500 (plain) / 300 (TLS) held, 100/50 voice, short phases
//	make bench-peers PEERS_ARGS="-upstream plain"
//	bin/wsbench peers -h                     # every knob
//
// The peers come from the distribution's packages (apt-get install -y nginx haproxy);
// their configurations are the templates nginx.conf, haproxy.cfg and Caddyfile in
// this directory, with the ports (and with TLS, mockai's certificate) filled in:
// nginx with 2 workers, HAProxy with nbthread 2, Caddy with its defaults, and the
// open-file settings each needs to hold every session in one process. Processes are
// started, measured (/proc, through procfs) and stopped by bench/proc; the load
// client is wsbench's own (bench/load); percentiles are bench/stats'.
//
// # What one system's measurement does
//
// A fresh mockai (-echo: after session.created it sends every message back verbatim)
// and the system in front of it, on free loopback ports; then:
//
//   - Memory: the RSS of all the proxy's processes (VmRSS from /proc/PID/status,
//     summed over its process tree) idle, then with Options.Sessions (TLS upstream:
//     Options.TLSSessions) sessions held idle
//     (each open until session.created arrived through the proxy; mockai must report
//     at least as many open). (held - idle) / sessions is the figure. Each proxied
//     session holds two sockets in one proxy process, so the 20,000 open-file limit
//     caps it near 9,750; the client spreads over 127.0.0.1-127.0.0.8.
//   - Latency: LatencyConns sessions (default one) each send a small message every
//     LatencyInterval and wait for its echo; the table shows the round trip's p50
//     and, through a proxy, its p50 and p99 minus direct's in the same round.
//   - Throughput and CPU: ThroughputConns sessions keep Window echoes in flight, first
//     with 1 KiB messages, then with audio-delta-sized ones (a 100 ms
//     response.output_audio.delta, about 6.6 KB). Relayed messages count both
//     directions; the proxy's CPU (utime+stime from /proc/PID/stat over its process
//     tree) over the window is scaled to 100,000 round trips (one frame each way).
//   - Voice: a fresh mockai -stream 20ms and proxy; Options.VoiceSessions (TLS:
//     TLSVoiceSessions, both 500 by default) sessions each send a 20 ms PCM16 append
//     every 20 ms and get a 20 ms delta every 20 ms back (load.Voice), for
//     VoiceWarmup (not counted) and then the measured VoiceDuration; the proxy's CPU
//     over that window, as cores per 1,000 sessions, is the figure, next to the share
//     of scheduled deltas delivered (and, in results.json, the late sends and the
//     client's and mockai's own CPU). Below 95% delivered the figure is left out.
//     500, not 1,000: the load client and mockai alone need about 1.5 of this
//     machine's 2 cores for 1,000 (measured direct), so every relay fell behind.
//     With -profile, rtgate's CPU profile over the window is saved beside its logs.
//
// On a shared machine other jobs skew all of this: before each system the harness waits
// (bounded) for the machine to be quiet, records the CPU that other jobs used during
// each timed phase, and repeats a phase they disturbed (bounded), keeping the least
// disturbed attempt. Rounds interleave the systems (round 2 in reverse order), and
// the table shows each figure's median over the rounds, with every round and its
// spread beneath: with -rounds 3 one disturbed round moves nothing.
//
// # Output
//
// results.json (every run's figures, machine and versions) and table.md (a table per
// upstream, each headed with the upstream it used) under bench/results/peers-<time>/,
// with each process's log and rendered configuration in a folder per run
// (<upstream>-<round>-<system>). Processes are stopped by PID when a system is done, on Ctrl-C and on
// failure; if the harness itself is killed, the kernel signals them (Pdeathsig).
//
// Only the parts that need no peer installed are unit-tested (configuration rendering,
// the client's loads against an in-process mockai, the table); the harness itself is
// a benchmark.
package peers
