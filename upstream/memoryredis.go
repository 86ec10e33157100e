package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisMemory shares remembered demand across the instances of one
// deployment (REDIS_URL). Each instance writes its own recent peak per key
// into the hash <Prefix><key digest>, field = its instance name, and lists
// the key in <Prefix>keys. A starting instance sums the peaks of the
// instances that are live now (their lease in InstancesKey, the sorted set
// the cluster limits keep, has not run out) and takes its share: that sum
// divided by the live instances, itself included. An instance added under
// load thus starts at the share its load balancer will send it, and one
// replaced in a rolling restart at the share the others carried meanwhile.
//
// A lone instance that restarts finds no live peer here: REALTIME_POOL_STATE
// is what remembers its own demand.
type RedisMemory struct {
	Client *redis.Client
	// Instance names this process (as in the cluster limits).
	Instance string
	// InstancesKey is the sorted set of instances scored by the Redis-clock
	// time, in ms, their lease ends.
	InstancesKey string
	// Prefix starts the keys written here ("rtgate:pool:demand:").
	Prefix string
}

func (m *RedisMemory) indexKey() string            { return m.Prefix + "keys" }
func (m *RedisMemory) demandKey(key string) string { return m.Prefix + key }

// Load returns this instance's share of each key's cluster-wide peak.
func (m *RedisMemory) Load(ctx context.Context, now time.Time) (map[string]Remembered, error) {
	keys, err := m.Client.SMembers(ctx, m.indexKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redis pool demand: %w", err)
	}
	t, err := m.Client.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redis pool demand: %w", err)
	}
	liveList, err := m.Client.ZRangeByScore(ctx, m.InstancesKey, &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(t.UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("redis pool demand: %w", err)
	}
	live := map[string]bool{}
	for _, inst := range liveList {
		if inst != m.Instance {
			live[inst] = true
		}
	}
	out := map[string]Remembered{}
	for _, k := range keys {
		fields, err := m.Client.HGetAll(ctx, m.demandKey(k)).Result()
		if err != nil {
			return nil, fmt.Errorf("redis pool demand: %w", err)
		}
		var sum, refill float64
		for inst, v := range fields {
			var r Remembered
			if !live[inst] || json.Unmarshal([]byte(v), &r) != nil {
				continue
			}
			sum += r.RateAt(now)
			refill = max(refill, r.RefillMS)
		}
		if share := sum / float64(len(live)+1); share > 0 {
			out[k] = Remembered{Rate: share, RefillMS: refill, At: now}
		}
	}
	return out, nil
}

// Save writes this instance's peaks; a key's hash lives demandForget after
// its last write.
func (m *RedisMemory) Save(ctx context.Context, demand map[string]Remembered) error {
	if len(demand) == 0 {
		return nil
	}
	_, err := m.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, r := range demand {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			p.HSet(ctx, m.demandKey(k), m.Instance, b)
			p.PExpire(ctx, m.demandKey(k), demandForget)
			p.SAdd(ctx, m.indexKey(), k)
		}
		p.PExpire(ctx, m.indexKey(), demandForget)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis pool demand: %w", err)
	}
	return nil
}
