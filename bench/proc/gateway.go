package proc

import (
	"context"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Gateway is a running bin/gateway.
type Gateway struct {
	*Proc
	Addr  string // host:port clients connect to
	Admin string // host:port of ADMIN_ADDR (metrics, pprof)
}

// URL is the Realtime endpoint clients dial.
func (g *Gateway) URL() string { return "ws://" + g.Addr + "/v1/realtime?model=gpt-realtime" }

// LiveURL is the GPT-Live endpoint clients dial (the model, gpt-live-1 on
// the environment path, comes in session.start).
func (g *Gateway) LiveURL() string { return "ws://" + g.Addr + "/v1/live/sessions" }

// MetricsURL is the admin listener's Prometheus endpoint.
func (g *Gateway) MetricsURL() string { return "http://" + g.Admin + "/metrics" }

// GatewaySettings are the settings every benchmark's gateway runs with: the
// client (master) key, mockai as its only upstream (with mockai's CA when it
// serves TLS), the model, and the log level.
func GatewaySettings(mock *Mockai, upstreamKey, masterKey, logLevel string) map[string]string {
	set := map[string]string{
		"LITELLM_MASTER_KEY":    masterKey,
		"OPENAI_API_KEY":        upstreamKey,
		"OPENAI_API_BASE":       mock.Base,
		"OPENAI_REALTIME_MODEL": "gpt-realtime",
		"LOG_LEVEL":             logLevel,
	}
	if mock.CAFile != "" {
		set["UPSTREAM_CA_FILE"] = mock.CAFile
	}
	return set
}

// StartGateway runs the gateway binary with args and settings in its
// environment, on free loopback ports (it sets HOST, PORT and ADMIN_ADDR),
// and waits for /health. A port taken between choosing and binding it shows
// up as an early exit; it retries once with new ports.
func StartGateway(ctx context.Context, bin string, args []string, settings map[string]string, logPath string) (*Gateway, error) {
	var lastErr error
	for range 2 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		gw, err := StartGatewayOn(ctx, bin, args, settings, port, logPath)
		if err == nil || ctx.Err() != nil {
			return gw, err
		}
		lastErr = err
	}
	return nil, lastErr
}

// StartGatewayOn is StartGateway on a port the caller chose (several
// gateways with REUSEPORT=1 share one), with a free admin port; it does not
// retry.
func StartGatewayOn(ctx context.Context, bin string, args []string, settings map[string]string, port int, logPath string) (*Gateway, error) {
	adminPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	hostPort := "127.0.0.1:" + strconv.Itoa(port)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	set := maps.Clone(settings)
	set["HOST"], set["PORT"], set["ADMIN_ADDR"] = "127.0.0.1", strconv.Itoa(port), admin
	gw, err := Start(Spec{Name: "gateway", Bin: bin, Args: args, Env: GatewayEnv(os.Environ(), set), LogPath: logPath})
	if err != nil {
		return nil, err
	}
	// With a shared port another gateway may answer /health, so this
	// one's own admin listener is asked too.
	err = WaitHealthy(ctx, gw, "http://"+hostPort+"/health", 20*time.Second)
	if err == nil {
		err = WaitHealthy(ctx, gw, "http://"+admin+"/metrics", 20*time.Second)
	}
	if err != nil {
		_ = gw.Stop(5 * time.Second)
		return nil, err
	}
	return &Gateway{Proc: gw, Addr: hostPort, Admin: admin}, nil
}

// GatewayEnv is the parent's environment with the gateway's settings
// replaced, so a stray variable in the shell cannot change a run.
func GatewayEnv(parent []string, set map[string]string) []string {
	env := make([]string, 0, len(parent)+len(set))
	for _, kv := range parent {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := set[name]; ok {
			continue
		}
		env = append(env, kv)
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		env = append(env, name+"="+set[name])
	}
	return env
}
