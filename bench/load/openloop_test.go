package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

// overBoth runs f against an in-process mockai with cfg over ws:// and
// over wss://, with a client trusting the latter's certificate.
func overBoth(t *testing.T, cfg mockai.Config, f func(t *testing.T, clientCfg Config)) {
	for _, useTLS := range []bool{false, true} {
		name := "ws"
		if useTLS {
			name = "wss"
		}
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.TLS = useTLS
			srv := benchtest.Mockai(t, c)
			cc := Config{URL: realtimeURL(srv.BaseURL())}
			if useTLS {
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(srv.CertPEM()) {
					t.Fatal("bad mock certificate")
				}
				cc.TLS = &tls.Config{RootCAs: pool}
			}
			f(t, cc)
		})
	}
}

// TestOpenLoopChargesTheWait shows the accounting free of coordinated
// omission: against a slow target (150 ms to session.created) with room for
// one call in flight, five arrivals ~1 ms apart must queue; each call's
// latency counts from its scheduled arrival, so call k's dial includes the
// k calls before it (a closed-loop client would report ~150 ms for each).
// The bounds are lower bounds, which load on the box cannot break.
func TestOpenLoopChargesTheWait(t *testing.T) {
	const slow = 150 * time.Millisecond
	overBoth(t, mockai.Config{SessionDelay: slow, AudioDeltas: 1}, func(t *testing.T, cfg Config) {
		c := newTestClient(t, cfg)
		opts := Options{N: 5, Concurrency: 1, Rate: 1000, Seed: 11, MaxInFlight: 1, WhenFull: FullDelay}
		plan := opts.schedule().Arrivals()
		res, err := Run(context.Background(), c, opts)
		if err != nil {
			t.Fatal(err)
		}
		o := res.Open
		if o == nil || o.Scheduled != 5 || o.Started != 5 || o.Dropped != 0 || o.Delayed != 4 || o.PeakInFlight != 1 {
			t.Fatalf("open loop %+v, want 5 started, 4 of them delayed, none dropped, peak 1", o)
		}
		if len(res.Samples) != 5 {
			t.Fatalf("%d samples, want 5", len(res.Samples))
		}
		first := res.Samples[0].Offset
		for k, s := range res.Samples {
			if !s.OK() {
				t.Fatalf("call %d failed: %s %s", k, s.Failure, s.Detail)
			}
			at := plan[k].At // its scheduled arrival, from the first
			if got := s.Offset - first; got != at {
				t.Errorf("call %d starts at +%v, want its scheduled arrival +%v", k, got, at)
			}
			// Call k could not dial before the k calls ahead of it ended.
			if min := time.Duration(k)*slow - at; s.Dial < min {
				t.Errorf("call %d (arrived at +%v): dial %v, want at least %v (its wait for the slot)", k, at, s.Dial, min)
			}
			if min := time.Duration(k+1)*slow - at; s.Total < min {
				t.Errorf("call %d (arrived at +%v): total %v, want at least %v", k, at, s.Total, min)
			}
		}
		if min := 4*slow - plan[4].At; o.StartLag.Max < min {
			t.Errorf("start lag max %v, want at least %v", o.StartLag.Max, min)
		}
		if sum := res.Summary(); sum.OpenLoop != o {
			t.Error("the summary does not carry the open-loop counts")
		}
	})
}

func TestOpenLoopDropsAtTheCap(t *testing.T) {
	// Each call takes at least 1 s; with one call in flight allowed, the
	// four later arrivals (about 1 ms apart) are dropped and counted.
	srv := benchtest.Mockai(t, mockai.Config{SessionDelay: time.Second})
	c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL())})
	res, err := Run(context.Background(), c, Options{N: 5, Concurrency: 1, Rate: 1000, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	o := res.Open
	if o.Scheduled != 5 || o.Started != 1 || o.Dropped != 4 || o.Delayed != 0 || o.WhenFull != FullDrop {
		t.Fatalf("open loop %+v, want 1 started and 4 dropped", o)
	}
	if got := res.Summary().Failures["overload"]; got != 4 {
		t.Errorf("%d overload failures, want the 4 dropped arrivals", got)
	}
}

// TestOpenLoopDurationAndLengths runs an open loop bounded by time with
// drawn call lengths: every scheduled arrival is a call, each holds its
// session for at least its length, and the run stops by itself.
func TestOpenLoopDurationAndLengths(t *testing.T) {
	overBoth(t, mockai.Config{AudioDeltas: 1}, func(t *testing.T, cfg Config) {
		c := newTestClient(t, cfg)
		length := Length{Kind: LengthUniform, Min: 50 * time.Millisecond, Max: 150 * time.Millisecond}
		opts := Options{N: 1 << 30, Concurrency: 4, Rate: 100, Duration: 300 * time.Millisecond, CallLength: length, Seed: 3}
		res, err := Run(context.Background(), c, opts)
		if err != nil {
			t.Fatal(err)
		}
		want := opts.schedule().Arrivals()
		o := res.Open
		if o.Scheduled != len(want) || o.Started != len(want) || len(res.Samples) != len(want) || o.Dropped+o.Delayed+o.Unstarted != 0 {
			t.Fatalf("open loop %+v and %d samples, want all %d scheduled arrivals made", o, len(res.Samples), len(want))
		}
		if o.CallLength != "uniform:50ms-150ms" || o.Seed != 3 || o.Spacing != SpacingPoisson {
			t.Errorf("open loop reports length %q, seed %d, spacing %q", o.CallLength, o.Seed, o.Spacing)
		}
		for i, s := range res.Samples {
			if !s.OK() {
				t.Fatalf("call %d failed: %s %s", i, s.Failure, s.Detail)
			}
			if s.Length != want[i].Length || s.Total < s.Length {
				t.Errorf("call %d: length %v (want %v), total %v: the session closed before its length", i, s.Length, want[i].Length, s.Total)
			}
			// The exchange (total - held) still holds every phase; a call
			// whose exchange outlasted its length (a loaded box's TLS
			// handshakes can) held nothing. TestCallLengthHolds checks
			// the hold itself.
			if s.Held < 0 || s.Total-s.Held < s.Dial+s.Session+s.FirstAudio {
				t.Errorf("call %d: held %v of total %v (length %v, dial %v, session %v, first audio %v)", i, s.Held, s.Total, s.Length, s.Dial, s.Session, s.FirstAudio)
			}
		}
		if ex := res.Summary().Exchange; ex == nil || ex.N != len(want) || ex.Max > res.Summary().Total.Max {
			t.Errorf("exchange summary %+v, want one per call, none above the totals", ex)
		}
	})
}

func TestOpenLoopInterrupted(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{AudioDeltas: 1})
	c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL())})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, c, Options{N: 1000, Concurrency: 1, Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	o := res.Open
	if o.Unstarted == 0 || o.Scheduled != o.Started+o.Dropped+o.Unstarted || len(res.Samples) != o.Started+o.Dropped {
		t.Fatalf("open loop %+v with %d samples: every arrival must be started, dropped or not reached", o, len(res.Samples))
	}
}

// TestCallLengthHolds: a call of one second keeps its session open that
// long after an exchange of a few milliseconds, counts that time as held,
// and closes cleanly.
func TestCallLengthHolds(t *testing.T) {
	overBoth(t, mockai.Config{AudioDeltas: 1}, func(t *testing.T, cfg Config) {
		c := newTestClient(t, cfg)
		s := c.CallFor(context.Background(), time.Now(), time.Second)
		if !s.OK() || s.Length != time.Second || s.Total < time.Second || s.Held <= 0 || s.Total-s.Held < s.Dial+s.Session+s.FirstAudio {
			t.Fatalf("call of 1s: %+v; want ok, total at least 1s, a held part and the exchange apart from it", s)
		}
		sum := Summarize([]Sample{s}, 0, 0)
		if sum.Exchange == nil || sum.Exchange.Max != s.Total-s.Held {
			t.Errorf("summary exchange %+v, want total - held = %v", sum.Exchange, s.Total-s.Held)
		}
	})
}

// TestCallLengthServerCloses: a server that ends the session while the
// call holds it fails the call; the hold never hides a lost session.
func TestCallLengthServerCloses(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{AudioDeltas: 1, SessionCap: 500 * time.Millisecond})
	c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL()), Timeout: 5 * time.Second})
	s := c.CallFor(context.Background(), time.Now(), time.Second)
	if s.OK() || !strings.HasPrefix(s.Failure, "unexpected_close") || s.Reached != PhaseFirstAudio || s.Length != time.Second {
		t.Fatalf("call held past the server's close: %+v", s)
	}
}
