package balance

import (
	"testing"
	"time"

	"rtgate/server/routes"
)

// firstShares ranks ds n times and returns how often each came first.
func firstShares(b *Balancer, ds []*routes.Deployment, n int) []float64 {
	counts := make([]float64, len(ds))
	for range n {
		first := b.Rank(ds)[0]
		for i, d := range ds {
			if d == first {
				counts[i]++
			}
		}
	}
	for i := range counts {
		counts[i] /= float64(n)
	}
	return counts
}

func TestStrategies(t *testing.T) {
	const n = 4000
	latency := func(mut func(*routes.Router)) routes.Router {
		r := routes.DefaultRouter()
		r.Strategy = routes.LatencyBased
		if mut != nil {
			mut(&r)
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		router  routes.Router
		setup   func(b *Balancer, ds []*routes.Deployment, now *time.Time)
		weights func(ds []*routes.Deployment)
		// want[i] is deployment i's share of first places, within 0.05.
		want []float64
	}{
		{name: "least-busy: the idle one", router: routes.DefaultRouter(),
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) { b.Attach(ds[0]) },
			want:  []float64{0, 1}},
		{name: "usage-based falls back to least-busy", router: routes.Router{Strategy: routes.UsageBasedV2},
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) { b.Attach(ds[1]) },
			want:  []float64{1, 0}},
		{name: "simple-shuffle by weight", router: routes.Router{Strategy: routes.SimpleShuffle},
			weights: func(ds []*routes.Deployment) { ds[0].Weight, ds[1].Weight = 3, 1 },
			setup:   func(b *Balancer, ds []*routes.Deployment, _ *time.Time) { b.Attach(ds[0]) }, // load does not count
			want:    []float64{0.75, 0.25}},
		{name: "simple-shuffle by rpm", router: routes.Router{Strategy: routes.SimpleShuffle},
			weights: func(ds []*routes.Deployment) { ds[0].RPM, ds[1].RPM = 1000, 4000 },
			want:    []float64{0.2, 0.8}},
		{name: "simple-shuffle evenly", router: routes.Router{Strategy: routes.SimpleShuffle}, want: []float64{0.5, 0.5}},
		{name: "latency: the faster, but for exploration", router: latency(nil),
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) {
				b.ObserveFirstAudio(ds[0], 400*time.Millisecond)
				b.ObserveFirstAudio(ds[1], 80*time.Millisecond)
			},
			want: []float64{0.05, 0.95}},
		{name: "latency: unmeasured first", router: latency(nil),
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) {
				b.ObserveFirstAudio(ds[1], 80*time.Millisecond)
			},
			want: []float64{0.95, 0.05}},
		{name: "latency: the mean of the newest max_latency_list_size", router: latency(func(r *routes.Router) { r.MaxLatencyListSize = 2 }),
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) {
				b.ObserveFirstAudio(ds[0], 100*time.Millisecond)
				for _, ms := range []int{50, 50, 300, 300} { // ds[1] got slow
					b.ObserveFirstAudio(ds[1], time.Duration(ms)*time.Millisecond)
				}
			},
			want: []float64{0.95, 0.05}},
		{name: "latency: within lowest_latency_buffer is a tie", router: latency(func(r *routes.Router) { r.LowestLatencyBuffer = 0.5 }),
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) {
				b.ObserveFirstAudio(ds[0], 100*time.Millisecond)
				b.ObserveFirstAudio(ds[1], 140*time.Millisecond)
			},
			want: []float64{0.5, 0.5}},
		{name: "latency: samples older than ttl are forgotten", router: latency(func(r *routes.Router) { r.TTL = time.Minute }),
			setup: func(b *Balancer, ds []*routes.Deployment, now *time.Time) {
				b.ObserveFirstAudio(ds[1], 80*time.Millisecond)
				*now = now.Add(30 * time.Second)
				b.ObserveFirstAudio(ds[0], 400*time.Millisecond)
				*now = now.Add(40 * time.Second) // ds[1]'s sample is 70 s old: unmeasured again
			},
			want: []float64{0.05, 0.95}},
		{name: "latency: a failed turn is a penalty sample", router: latency(nil),
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) {
				b.ObserveFirstAudio(ds[0], 80*time.Millisecond)
				b.ObservePenalty(ds[0], false) // mean over 5 s
				b.ObserveFirstAudio(ds[1], 900*time.Millisecond)
			},
			want: []float64{0.05, 0.95}},
		{name: "latency: penalties age out like samples", router: latency(func(r *routes.Router) { r.TTL = time.Minute }),
			setup: func(b *Balancer, ds []*routes.Deployment, now *time.Time) {
				b.ObservePenalty(ds[0], false)
				*now = now.Add(30 * time.Second)
				b.ObserveFirstAudio(ds[1], 80*time.Millisecond)
				*now = now.Add(40 * time.Second) // the penalty is 70 s old: ds[0] unmeasured again
			},
			want: []float64{0.95, 0.05}},
		{name: "latency: text-only sessions' first output where no voice sample is", router: latency(nil),
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) {
				b.ObserveFirstOutput(ds[0], 400*time.Millisecond, true)
				b.ObserveFirstOutput(ds[1], 80*time.Millisecond, true)
			},
			want: []float64{0.05, 0.95}},
		{name: "latency: voice samples before text ones", router: latency(nil),
			setup: func(b *Balancer, ds []*routes.Deployment, _ *time.Time) {
				b.ObserveFirstOutput(ds[0], 40*time.Millisecond, true)
				b.ObserveFirstAudio(ds[0], 400*time.Millisecond)
				b.ObserveFirstOutput(ds[1], 900*time.Millisecond, true)
				b.ObserveFirstAudio(ds[1], 80*time.Millisecond)
			},
			want: []float64{0.05, 0.95}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			b, _ := testBalancer(time.Second, &now)
			r := tc.router
			b.cfg.Router = func() routes.Router { return r }
			ds := testDeployments(2, 0, 0)
			if tc.weights != nil {
				tc.weights(ds)
			}
			if tc.setup != nil {
				tc.setup(b, ds, &now)
			}
			got := firstShares(b, ds, n)
			for i := range got {
				if d := got[i] - tc.want[i]; d > 0.05 || d < -0.05 {
					t.Errorf("first-place shares %.3v, want %v", got, tc.want)
					break
				}
			}
		})
	}
}

// TestHealthBeforeStrategy: an ejected deployment stays behind a healthy one
// whatever the strategy says of it.
func TestHealthBeforeStrategy(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	b, _ := testBalancer(time.Second, &now)
	r := routes.Router{Strategy: routes.LatencyBased, TTL: time.Hour, MaxLatencyListSize: 10}
	b.cfg.Router = func() routes.Router { return r }
	ds := testDeployments(2, 0, 0)
	b.ObserveFirstAudio(ds[0], 50*time.Millisecond)
	b.ObserveFirstAudio(ds[1], 900*time.Millisecond)
	b.Failed(ds[0], "test")
	if got := firstShares(b, ds, 200); got[1] != 1 {
		t.Fatalf("the ejected fast deployment came first %.3v of the time", got[0])
	}
}

func TestFirstAudioWindow(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	b, _ := testBalancer(time.Second, &now)
	d := testDeployments(1, 0, 0)[0]
	if st := b.Snapshot(d); st.FirstAudioP50MS != nil {
		t.Fatal("percentiles before any turn")
	}
	for range 10 {
		b.ObserveFirstAudio(d, 800*time.Millisecond) // falls out of the window
	}
	now = now.Add(6 * time.Minute)
	for i := range 20 {
		b.ObserveFirstAudio(d, time.Duration(100+i)*time.Millisecond)
		now = now.Add(10 * time.Second)
	}
	st := b.Snapshot(d)
	if st.Turns != 20 || *st.FirstAudioP50MS < 95 || *st.FirstAudioP50MS > 125 || *st.FirstAudioP95MS > 119 {
		t.Fatalf("turns %d p50 %v p95 %v, want 20 turns near 110 and at most 119 ms", st.Turns, *st.FirstAudioP50MS, *st.FirstAudioP95MS)
	}
}
