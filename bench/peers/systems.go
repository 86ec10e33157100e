package peers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"rtgate/bench/proc"
)

// The systems a comparison can run, in their default order.
const (
	SysDirect  = "direct"          // the load client talks to mockai itself
	SysNginx   = "nginx"           // nginx in front of mockai
	SysHAProxy = "haproxy"         // HAProxy in front of mockai
	SysCaddy   = "caddy"           // Caddy in front of mockai (a reference row)
	SysPoolOff = "rtgate-pool-off" // bin/gateway with REALTIME_POOL_SIZE=0
	SysPoolOn  = "rtgate-pool-on"  // bin/gateway with REALTIME_POOL_SIZE=auto
)

// AllSystems is every system, in the order a round runs them.
var AllSystems = []string{SysDirect, SysNginx, SysHAProxy, SysCaddy, SysPoolOff, SysPoolOn}

// DefaultSystems leave out Caddy, a reference row for those who install it:
// the goal is measured against HAProxy and nginx.
var DefaultSystems = []string{SysDirect, SysNginx, SysHAProxy, SysPoolOff, SysPoolOn}

// Peers are the systems the table's ratios are taken against.
var Peers = []string{SysNginx, SysHAProxy, SysCaddy}

func isPeer(sys string) bool { return slices.Contains(Peers, sys) }

// clientKey is what the load client presents: the gateway's master key (mockai and the
// peers accept any key).
const clientKey = "sk-bench-peers"

// launch starts sys in front of mock, writing its configuration and log into dir,
// and returns it with the URL clients connect to (always plain ws://: only the
// upstream side changes between upstreams) and, for the gateway, its admin
// address. Only the gateway is waited for (its /health); see withSystem.
func launch(ctx context.Context, o *Options, sys, dir string, mock *proc.Mockai, limit int) (*proc.Proc, string, string, error) {
	logPath := filepath.Join(dir, sys+".log")
	switch sys {
	case SysPoolOff, SysPoolOn:
		set := proc.GatewaySettings(mock, "sk-mock", clientKey, "warn")
		set["REALTIME_POOL_SIZE"] = "0"
		if sys == SysPoolOn {
			set["REALTIME_POOL_SIZE"] = o.Pool
		}
		gw, err := proc.StartGateway(ctx, o.Gateway, o.GatewayArgs, set, logPath)
		if err != nil {
			return nil, "", "", err
		}
		return gw.Proc, gw.URL(), gw.Admin, nil
	case SysNginx, SysHAProxy, SysCaddy:
	default:
		return nil, "", "", fmt.Errorf("unknown system %q", sys)
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, "", "", err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	conf, err := RenderConfig(sys, ConfigParams{Listen: listen, Upstream: mock.Addr, CAFile: mock.CAFile, RunDir: dir, FileLimit: limit})
	if err != nil {
		return nil, "", "", err
	}
	confPath := filepath.Join(dir, configFile[sys])
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		return nil, "", "", fmt.Errorf("%s: write config: %w", sys, err)
	}
	spec := proc.Spec{Name: sys, LogPath: logPath}
	switch sys {
	case SysNginx:
		spec.Bin, spec.DeathSignal = o.Nginx, syscall.SIGTERM
		spec.Args = []string{"-p", dir, "-c", confPath, "-e", filepath.Join(dir, "nginx-error.log")}
	case SysHAProxy:
		spec.Bin, spec.Args = o.HAProxy, []string{"-db", "-f", confPath}
	case SysCaddy:
		// Caddy wants somewhere to keep its (unused) data and config state.
		spec.Bin, spec.Args = o.Caddy, []string{"run", "--adapter", "caddyfile", "--config", confPath}
		spec.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "caddy-data"),
			"XDG_CONFIG_HOME="+filepath.Join(dir, "caddy-config"))
	}
	p, err := proc.Start(spec)
	if err != nil {
		return nil, "", "", err
	}
	return p, "ws://" + listen + "/v1/realtime?model=gpt-realtime", "", nil
}

// waitDrained waits until mockai holds no more sessions than floor, or its count has
// not moved for two seconds (a warm pool may keep a changing number of sockets), or
// limit passes.
func waitDrained(ctx context.Context, mock *proc.Mockai, floor int64, limit time.Duration, log *slog.Logger) {
	deadline := time.Now().Add(limit)
	last, since := int64(-1), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := mock.Stats(ctx)
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
