package compare

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"rtgate/bench/proc"
)

// The seed's shape (`wsbench compare -instances N`): N gateway processes,
// each with its own pool, behind a real HAProxy (TCP mode, leastconn,
// health checks on /health), started and stopped by the harness like the
// gateway. The pool-on leg runs with Config.Pool (auto by default) on every
// instance, and the pool-fixed leg with a fixed pool of concurrency / N each.

// LegPoolFixed is the extra leg of a multi-instance run.
const LegPoolFixed = "pool-fixed"

// instances is one leg's gateways and their balancer.
type instances struct {
	gateways []*proc.Gateway
	haproxy  *proc.Proc
	addr     string // HAProxy's frontend
}

// URL is the Realtime endpoint behind HAProxy.
func (in *instances) URL() string { return "ws://" + in.addr + "/v1/realtime?model=gpt-realtime" }

// MetricsURLs are the instances' /metrics, in order.
func (in *instances) MetricsURLs() []string {
	out := make([]string, len(in.gateways))
	for i, g := range in.gateways {
		out[i] = g.MetricsURL()
	}
	return out
}

func (in *instances) stop() {
	if in.haproxy != nil {
		_ = in.haproxy.Stop(5 * time.Second)
	}
	for _, g := range in.gateways {
		_ = g.Stop(10 * time.Second)
	}
}

// startInstances starts n gateways with settings and HAProxy in front.
func startInstances(ctx context.Context, bin string, n int, settings map[string]string, dir, id string) (*instances, error) {
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("-instances needs haproxy (apt-get install -y haproxy; make bench does it): %w", err)
	}
	in := &instances{}
	for i := range n {
		g, err := proc.StartGateway(ctx, bin, nil, settings, filepath.Join(dir, fmt.Sprintf("gateway-%s-%d.log", id, i+1)))
		if err != nil {
			in.stop()
			return nil, fmt.Errorf("instance %d: %w", i+1, err)
		}
		in.gateways = append(in.gateways, g)
	}
	port, err := proc.FreePort()
	if err != nil {
		in.stop()
		return nil, err
	}
	in.addr = "127.0.0.1:" + strconv.Itoa(port)
	cfgPath := filepath.Join(dir, "haproxy-"+id+".cfg")
	if err := os.WriteFile(cfgPath, []byte(haproxyConfig(in.addr, in.gateways)), 0o600); err != nil {
		in.stop()
		return nil, err
	}
	in.haproxy, err = proc.Start(proc.Spec{Name: "haproxy", Bin: haproxy, Args: []string{"-db", "-f", cfgPath},
		LogPath: filepath.Join(dir, "haproxy-"+id+".log")})
	if err != nil {
		in.stop()
		return nil, err
	}
	err = proc.WaitReady(ctx, in.haproxy, 10*time.Second, func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", in.addr)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
	if err == nil {
		// Every server is up once its first checks pass (rise 1 at 100 ms).
		time.Sleep(300 * time.Millisecond)
	} else {
		in.stop()
	}
	return in, err
}

// haproxyConfig balances TCP connections over the gateways by fewest
// connections, as the seed's load balancer did.
func haproxyConfig(addr string, gws []*proc.Gateway) string {
	h := proc.HAProxyTCP{Bind: addr, ConnectTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second,
		CheckEvery: 100 * time.Millisecond, Fall: 2, Rise: 1}
	for _, g := range gws {
		h.Servers = append(h.Servers, g.Addr)
	}
	return h.Config()
}

// readAllPoolCounters reads every instance's counters of the pool whose
// metrics are named prefix_*.
func readAllPoolCounters(ctx context.Context, urls []string, prefix string) []poolCounters {
	out := make([]poolCounters, len(urls))
	for i, u := range urls {
		out[i] = readPoolCounters(ctx, u, prefix)
	}
	return out
}

// sumCounters adds instances' readings; OK only if every one was.
func sumCounters(cs []poolCounters) poolCounters {
	sum := poolCounters{OK: len(cs) > 0}
	for _, c := range cs {
		sum.Hits += c.Hits
		sum.Misses += c.Misses
		sum.OK = sum.OK && c.OK
	}
	return sum
}

// InstancesMarkdown lists each multi-instance leg's per-instance pool hit
// rates; empty for a single-instance run.
func (o *Outcome) InstancesMarkdown() string {
	var b strings.Builder
	for _, leg := range o.Legs {
		if len(leg.InstanceHitRates) < 2 || !slices.ContainsFunc(leg.InstanceHitRates, func(r *float64) bool { return r != nil }) {
			continue // no pool on this leg
		}
		if b.Len() == 0 {
			b.WriteString("| leg | pool hit rate per instance |\n|---|---|\n")
		}
		rates := make([]string, len(leg.InstanceHitRates))
		for i, r := range leg.InstanceHitRates {
			rates[i] = "n/a"
			if r != nil {
				rates[i] = fmt.Sprintf("%.1f%%", *r*100)
			}
		}
		fmt.Fprintf(&b, "| %s | %s |\n", leg.Name, strings.Join(rates, " · "))
	}
	return b.String()
}
