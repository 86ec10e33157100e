package compare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"rtgate/bench/proc"
)

// LegPoolOnRedis is the pool-on leg with the per-key limits shared through
// Redis (REDIS_URL, a redis-server started for the leg) and the master key
// limited, so that every connect waits on the admission script's round trip
// (with its budget REDIS_TIMEOUT_MS, the gateway's default unless
// RedisTimeoutMS is set): beside the pool-on leg it shows what the shared
// limits cost the connect path (dial and session phases). The limits are
// far above the load: nothing is refused.
const LegPoolOnRedis = "pool-on-redis"

// withRedis starts redis-server for the leg in its own folder under dir and
// points the gateway's settings at it with a limited key; stop stops it.
func withRedis(ctx context.Context, cfg Config, set map[string]string, dir string) (stop func(), err error) {
	rdir := filepath.Join(dir, "redis-"+LegPoolOnRedis)
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, fmt.Errorf("redis folder: %w", err)
	}
	rd, err := proc.StartRedis(ctx, rdir, 10*time.Second)
	if err != nil {
		return nil, err
	}
	set["REDIS_URL"] = rd.URL()
	set["MAX_SESSIONS_PER_KEY"] = strconv.Itoa(10 * cfg.Concurrency * max(cfg.Instances, 1))
	set["CONNECT_RATE_PER_KEY"] = "1000000"
	if cfg.RedisTimeoutMS > 0 {
		set["REDIS_TIMEOUT_MS"] = strconv.Itoa(cfg.RedisTimeoutMS)
	}
	return func() { _ = rd.Stop(time.Second) }, nil
}
