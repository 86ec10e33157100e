package upstream

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"rtgate/internal/testwait"
	"rtgate/mockai"
	"rtgate/server/redistest"
)

// TestRedisSharedDemand: two instances that each saw a burst write their
// peaks to one real Redis; a third instance added beside them starts at its
// share of the cluster's peak (the sum over live instances divided by the
// live instances, itself included), and an instance whose lease ran out no
// longer counts.
func TestRedisSharedDemand(t *testing.T) { eachScheme(t, testRedisSharedDemand) }

func testRedisSharedDemand(t *testing.T, tls bool) {
	rs := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { rc.Close() })
	ctx := context.Background()
	const instances = "rtgate:instances"
	// Leases as the cluster limits write them: Redis-clock ms of their end.
	lease := func(inst string, d time.Duration) {
		t.Helper()
		now, err := rc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.ZAdd(ctx, instances, redis.Z{Score: float64(now.Add(d).UnixMilli()), Member: inst}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	memory := func(inst string) *RedisMemory {
		return &RedisMemory{Client: rc, Instance: inst, InstancesKey: instances, Prefix: "rtgate:pool:demand:"}
	}

	m := startMock(t, mockai.Config{}, tls)
	ta := target(t, m, "k")
	clk := newManualClock() // one clock for the whole cluster: no fading between the steps
	cfg := PoolConfig{Auto: true, Min: 1, Max: 512, MaxIdle: time.Hour, PingInterval: -1, Clock: clk}
	// Instances a and b each take a burst of 40 connects in one window.
	for _, inst := range []string{"a", "b"} {
		lease(inst, time.Minute)
		c := cfg
		c.Memory = memory(inst)
		p := newTestPool(t, m, c)
		p.Prime(ta, "m")
		testwait.For(t, "a socket to warm", func() bool { return p.Warm(ta) >= 1 }) // b starts from a's share
		for range 40 {
			s := &sink{}
			if h, _ := p.Take(ta, "m", s); h != nil {
				s.h = h
				h.Endpoint().Close()
			}
		}
		p.Close() // writes its peak; its lease stays, as for a live instance
	}

	// share is what an instance starting beside the live ones should
	// target: their peaks summed, divided by them and itself, sized with
	// the largest of their refill times (all on one clock: nothing fades).
	share := func(live ...string) int {
		t.Helper()
		f, err := rc.HGetAll(ctx, "rtgate:pool:demand:"+Key(ta)).Result()
		if err != nil {
			t.Fatal(err)
		}
		var sum, refill float64
		for _, inst := range live {
			var r Remembered
			if err := json.Unmarshal([]byte(f[inst]), &r); err != nil {
				t.Fatalf("instance %s wrote no demand: %v", inst, err)
			}
			sum, refill = sum+r.Rate, max(refill, r.RefillMS)
		}
		d := demand{burst: int(math.Ceil(sum / float64(len(live)+1) * rateWindow.Seconds())),
			refill: time.Duration(refill * float64(time.Millisecond)), primed: true}
		return targetSize(cfg, d)
	}
	start := func(inst string) *testPool {
		c := cfg
		c.Memory = memory(inst)
		lease(inst, time.Minute)
		p := newTestPool(t, m, c)
		p.Prime(ta, "m")
		return p
	}

	// Instance c joins: (160 + 160 connects/s) / 3 live instances each.
	want := share("a", "b")
	pc := start("c")
	shareOfThree := pc.Target(ta)
	if shareOfThree != want || shareOfThree <= 1 {
		t.Fatalf("joining instance's target %d, want its third of the cluster's peak: %d", shareOfThree, want)
	}
	if !pc.Warming() {
		t.Fatal("the joining instance is not warming")
	}
	pc.Close() // writes its share as its peak

	// b's lease runs out (killed): only a's peak and c's count, over the
	// live a, c and the newcomer d.
	if err := rc.ZRem(ctx, instances, "b").Err(); err != nil {
		t.Fatal(err)
	}
	want = share("a", "c")
	pd := start("d")
	if got := pd.Target(ta); got != want {
		t.Fatalf("with b gone the newcomer's target is %d, want %d (b's peak no longer counts)", got, want)
	}
}
