package soak

import (
	"context"
	"strconv"
	"time"

	"rtgate/bench/proc"
)

// The soak shares its gateway's per-key limits through a redis-server it
// starts (Config.Redis, on by default), with the master key limited far
// above the load, so that every connect of the soak waits on the admission
// script's round trip under REDIS_TIMEOUT_MS's default budget, as a
// deployment with REDIS_URL does. Nothing may be refused for it: a refusal
// is a failure no fault explains. The report counts the Redis outages the
// gateway saw (a call past its budget on a busy box is one) and the
// connects it decided alone meanwhile.

// startRedis starts the soak's redis-server in dir, or returns nil when
// cfg.Redis is off.
func startRedis(ctx context.Context, cfg Config, dir string) (*proc.Redis, error) {
	if !cfg.Redis {
		return nil, nil
	}
	return proc.StartRedis(ctx, dir, 10*time.Second)
}

// redisSettings points the gateway's settings at rd with a limited key.
func redisSettings(set map[string]string, rd *proc.Redis, cfg Config) {
	if rd == nil {
		return
	}
	set["REDIS_URL"] = rd.URL()
	set["MAX_SESSIONS_PER_KEY"] = strconv.Itoa(10 * cfg.Concurrency)
}
