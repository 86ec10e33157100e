package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// The systems a comparison can run, in their default order.
const (
	SysDirect  = "direct"          // the load client talks to mockai itself
	SysNginx   = "nginx"           // nginx in front of mockai
	SysHAProxy = "haproxy"         // HAProxy in front of mockai
	SysCaddy   = "caddy"           // Caddy in front of mockai
	SysPoolOff = "rtgate-pool-off" // bin/gateway with REALTIME_POOL_SIZE=0
	SysPoolOn  = "rtgate-pool-on"  // bin/gateway with REALTIME_POOL_SIZE=auto
)

// AllSystems is every system, in the order a round runs them.
var AllSystems = []string{SysDirect, SysNginx, SysHAProxy, SysCaddy, SysPoolOff, SysPoolOn}

// Peers are the systems the table's ratios are taken against.
var Peers = []string{SysNginx, SysHAProxy, SysCaddy}

func isPeer(sys string) bool { return slices.Contains(Peers, sys) }

// clientKey is what the load client presents: the gateway's master key (mockai and the
// peers accept any key).
const clientKey = "sk-bench-peers"

// launch starts sys in front of the mockai at upstream, writing its configuration
// and log into dir, and returns it with the address clients connect to.
func launch(o *Options, sys, dir, upstream string, limit int) (*child, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	listen := loopback(port)
	logPath := filepath.Join(dir, sys+".log")
	var c *child
	switch sys {
	case SysNginx, SysHAProxy, SysCaddy:
		conf, err := RenderConfig(sys, ConfigParams{Listen: listen, Upstream: upstream, RunDir: dir, FileLimit: limit})
		if err != nil {
			return nil, "", err
		}
		confPath := filepath.Join(dir, configFile[sys])
		if err := os.WriteFile(confPath, conf, 0o644); err != nil {
			return nil, "", fmt.Errorf("%s: write config: %w", sys, err)
		}
		switch sys {
		case SysNginx:
			c, err = startChild(childSpec{name: sys, logPath: logPath, deathSig: syscall.SIGTERM, bin: o.Nginx,
				args: []string{"-p", dir, "-c", confPath, "-e", filepath.Join(dir, "nginx-error.log")}}, o.Log)
		case SysHAProxy:
			c, err = startChild(childSpec{name: sys, logPath: logPath, bin: o.HAProxy, args: []string{"-db", "-f", confPath}}, o.Log)
		case SysCaddy:
			// Caddy wants somewhere to keep its (unused) data and config state.
			env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + filepath.Join(dir, "caddy-data"),
				"XDG_CONFIG_HOME=" + filepath.Join(dir, "caddy-config")}
			c, err = startChild(childSpec{name: sys, logPath: logPath, env: env, bin: o.Caddy,
				args: []string{"run", "--adapter", "caddyfile", "--config", confPath}}, o.Log)
		}
		if err != nil {
			return nil, "", err
		}
	case SysPoolOff, SysPoolOn:
		pool := "0"
		if sys == SysPoolOn {
			pool = o.Pool
		}
		env := []string{
			"LITELLM_MASTER_KEY=" + clientKey,
			"OPENAI_API_KEY=sk-mock",
			"OPENAI_API_BASE=ws://" + upstream + "/v1",
			"HOST=127.0.0.1",
			fmt.Sprintf("PORT=%d", port),
			"ADMIN_ADDR=",
			"REALTIME_POOL_SIZE=" + pool,
			"LOG_LEVEL=warn",
		}
		c, err = startChild(childSpec{name: sys, logPath: logPath, env: env, bin: o.Gateway, args: o.GatewayArgs}, o.Log)
		if err != nil {
			return nil, "", err
		}
	default:
		return nil, "", fmt.Errorf("unknown system %q", sys)
	}
	return c, listen, nil
}

// startMockai runs a fresh echoing mockai for one system's measurements.
func startMockai(o *Options, dir string) (*child, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := loopback(port)
	c, err := startChild(childSpec{name: "mockai", logPath: filepath.Join(dir, "mockai.log"), bin: o.Mockai,
		args: []string{"-addr", addr, "-echo"}}, o.Log)
	if err != nil {
		return nil, "", err
	}
	return c, addr, nil
}

// waitReady retries fn until it succeeds, c exits, or limit passes.
func waitReady(ctx context.Context, c *child, limit time.Duration, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		if done, err := c.exited(); done {
			return fmt.Errorf("%s: %w (%v) before it was ready; see its log", c.name, errExited, err)
		}
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		last = fn(actx)
		acancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w", c.name, limit, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mockStats are the counters cmd/mockai serves at GET /mock/stats.
type mockStats struct {
	Upgrades  int64 `json:"upgrades"`
	Active    int64 `json:"active"`
	Sessions  int64 `json:"sessions"`
	FramesIn  int64 `json:"frames_in"`
	FramesOut int64 `json:"frames_out"`
}

func getMockStats(ctx context.Context, addr string) (mockStats, error) {
	var st mockStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/mock/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("mockai stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("mockai stats: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("mockai stats: %w", err)
	}
	return st, nil
}

// waitDrained waits until mockai holds no more sessions than floor, or its count has
// not moved for two seconds (a warm pool may keep a changing number of sockets), or
// limit passes.
func waitDrained(ctx context.Context, addr string, floor int64, limit time.Duration, log *slog.Logger) {
	deadline := time.Now().Add(limit)
	last, since := int64(-1), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := getMockStats(ctx, addr)
		if err == nil {
			if st.Active <= floor {
				return
			}
			if st.Active != last {
				last, since = st.Active, time.Now()
			} else if time.Since(since) > 2*time.Second {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	log.Warn("mockai still holds sessions after the hold ended", "active", last, "expected_at_most", floor)
}
