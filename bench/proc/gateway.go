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

// StartGateway runs the gateway binary with settings in its environment, on
// free loopback ports (it sets HOST, PORT and ADMIN_ADDR), and waits for
// /health. A port taken between choosing and binding it shows up as an
// early exit; it retries once with new ports. It returns the gateway's
// host:port and its admin address.
func StartGateway(ctx context.Context, bin string, settings map[string]string, logPath string) (*Proc, string, string, error) {
	var lastErr error
	for range 2 {
		port, err := FreePort()
		if err != nil {
			return nil, "", "", err
		}
		adminPort, err := FreePort()
		if err != nil {
			return nil, "", "", err
		}
		hostPort := "127.0.0.1:" + strconv.Itoa(port)
		admin := "127.0.0.1:" + strconv.Itoa(adminPort)
		set := maps.Clone(settings)
		set["HOST"], set["PORT"], set["ADMIN_ADDR"] = "127.0.0.1", strconv.Itoa(port), admin
		gw, err := Start("gateway", bin, nil, GatewayEnv(os.Environ(), set), logPath, nil)
		if err != nil {
			return nil, "", "", err
		}
		err = WaitHealthy(ctx, gw, "http://"+hostPort+"/health", 20*time.Second)
		if err == nil {
			return gw, hostPort, admin, nil
		}
		_ = gw.Stop(5 * time.Second)
		if ctx.Err() != nil {
			return nil, "", "", ctx.Err()
		}
		lastErr = err
	}
	return nil, "", "", lastErr
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
