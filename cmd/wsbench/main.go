// Command wsbench is a load generator for OpenAI Realtime WebSocket
// endpoints (the gateway, a fake upstream, or the real API) that measures
// every call in phases: dial, session, first audio, total. See package
// rtgate/bench/load for the phase and failure definitions.
//
// Usage:
//
//	wsbench -host 127.0.0.1:4000 -insecure -key $KEY -n 5000 -c 500
//	wsbench -host ws://127.0.0.1:4000/v1/realtime -rate 200 -n 6000
//	wsbench -host 127.0.0.1:4000 -insecure -rate 50 -duration 2m -call-length exp:2s -seed 7
//	wsbench -host 127.0.0.1:4000 -insecure -hold 9000 -hold-for 60s -c 200
//	wsbench compare [-n 5000 -c 500] [-mockai bin/mockai -gateway bin/gateway]
//	wsbench soak [-duration 3m -c 100 -fault-rate 0.3] [-mockai bin/mockai -gateway bin/gateway]
//	wsbench redis-latency [-n 20000 -c 4 -burners 0,2]
//	wsbench peers [-quick] [-upstream tls,plain] [-systems direct,nginx,haproxy,rtgate-pool-off,rtgate-pool-on]
//	wsbench huge [-n 100000 -gateways 12] [-mockai bin/mockai -gateway bin/gateway]
//
// The summary (Markdown) goes to stdout; the live progress line goes to
// stderr only when stderr is a terminal. The key comes from -key or the
// WSBENCH_KEY environment variable and is never printed.
//
// Exit status: 0 when the run finished and at least one call (or held
// session) succeeded, 1 when none did or the run could not start, 2 for bad
// flags. `wsbench soak` exits 1 when any of its checks failed (see
// bench/soak); `wsbench peers` when any system's run failed (see
// bench/peers).
//
// compare, soak, peers and huge start mockai (over TLS, wss://, unless -upstream
// plain; soak defaults to plain) and the gateway as processes; the gateway
// then trusts mockai's certificate through UPSTREAM_CA_FILE.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"rtgate/internal/fdlimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first Ctrl-C the run winds down and stops its child
	// processes; a second one kills wsbench at once (the children then
	// die with it, see bench/compare).
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process around it, for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if err := fdlimit.Raise(); err != nil {
		fmt.Fprintln(stderr, "wsbench: warning:", err)
	}
	if len(args) > 0 {
		switch args[0] {
		case "compare":
			return runCompare(ctx, args[1:], stdout, stderr)
		case "soak":
			return runSoak(ctx, args[1:], stdout, stderr)
		case "peers":
			return runPeers(ctx, args[1:], stdout, stderr)
		case "huge":
			return runHuge(ctx, args[1:], stdout, stderr)
		case "redis-latency":
			return runRedisLatency(ctx, args[1:], stdout, stderr)
		case "replay":
			return runReplay(ctx, args[1:], stdout, stderr)
		}
	}
	return runBench(ctx, args, stdout, stderr)
}
