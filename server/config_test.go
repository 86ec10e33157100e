package server

import (
	"strings"
	"testing"
	"time"
)

// TestHedgeAndDialTimeoutSettings: UPSTREAM_HEDGE_MS and
// UPSTREAM_DIAL_TIMEOUT_SECS from the environment, their defaults, and the
// errors for bad values.
func TestHedgeAndDialTimeoutSettings(t *testing.T) {
	for _, tc := range []struct {
		env       map[string]string
		hedge     time.Duration
		dial      time.Duration
		wantError string
	}{
		{env: nil, hedge: 500 * time.Millisecond, dial: 10 * time.Second},
		{env: map[string]string{"UPSTREAM_HEDGE_MS": "250"}, hedge: 250 * time.Millisecond, dial: 10 * time.Second},
		{env: map[string]string{"UPSTREAM_HEDGE_MS": "0"}, hedge: 0, dial: 10 * time.Second},
		{env: map[string]string{"UPSTREAM_DIAL_TIMEOUT_SECS": "2.5"}, hedge: 500 * time.Millisecond, dial: 2500 * time.Millisecond},
		{env: map[string]string{"UPSTREAM_HEDGE_MS": "-1"}, wantError: `UPSTREAM_HEDGE_MS: "-1" is not a whole number of milliseconds`},
		{env: map[string]string{"UPSTREAM_HEDGE_MS": "0.5s"}, wantError: `UPSTREAM_HEDGE_MS: "0.5s" is not a whole number`},
		{env: map[string]string{"UPSTREAM_DIAL_TIMEOUT_SECS": "0"}, wantError: "UPSTREAM_DIAL_TIMEOUT_SECS"},
	} {
		c, ok := settingsFromEnv(t, tc.env, tc.wantError)
		switch {
		case !ok:
		case c.HedgeDelay != tc.hedge || c.DialTimeout != tc.dial:
			t.Errorf("%v: hedge %v dial %v, want %v %v", tc.env, c.HedgeDelay, c.DialTimeout, tc.hedge, tc.dial)
		}
	}
}

// TestPoolStateSettings: REALTIME_POOL_STATE and POOL_WARMUP_SECS from the
// environment, their defaults, and the error for a bad bound.
func TestPoolStateSettings(t *testing.T) {
	for _, tc := range []struct {
		env       map[string]string
		state     string
		bound     time.Duration
		wantError string
	}{
		{env: nil, state: "", bound: 0}, // no state; the pool's own default bound (10 s)
		{env: map[string]string{"REALTIME_POOL_SIZE": "auto", "REALTIME_POOL_STATE": "/var/lib/rtgate/pool.json"},
			state: "/var/lib/rtgate/pool.json"},
		{env: map[string]string{"POOL_WARMUP_SECS": "30"}, bound: 30 * time.Second},
		{env: map[string]string{"POOL_WARMUP_SECS": "0"}, wantError: "POOL_WARMUP_SECS"},
		{env: map[string]string{"POOL_WARMUP_SECS": "soon"}, wantError: "POOL_WARMUP_SECS"},
	} {
		c, ok := settingsFromEnv(t, tc.env, tc.wantError)
		switch {
		case !ok:
		case c.PoolState != tc.state || c.Pool.WarmupBound != tc.bound:
			t.Errorf("%v: state %q bound %v, want %q %v", tc.env, c.PoolState, c.Pool.WarmupBound, tc.state, tc.bound)
		}
	}
}

// settingsFromEnv reads Settings from env. With wantError set it checks the
// error names it and reports false; otherwise a failure to read is an error
// of the test, also false.
func settingsFromEnv(t *testing.T, env map[string]string, wantError string) (Settings, bool) {
	t.Helper()
	c, err := FromEnv(func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	switch {
	case wantError != "":
		if err == nil || !strings.Contains(err.Error(), wantError) {
			t.Errorf("%v: err %v, want %q", env, err, wantError)
		}
		return c, false
	case err != nil:
		t.Errorf("%v: %v", env, err)
		return c, false
	}
	return c, true
}

// TestTurnMetricsSetting: TURN_METRICS is on by default, 0 turns it off, and
// a bad value is refused.
func TestTurnMetricsSetting(t *testing.T) {
	for _, tc := range []struct {
		env       map[string]string
		off       bool
		wantError string
	}{
		{env: nil},
		{env: map[string]string{"TURN_METRICS": "0"}, off: true},
		{env: map[string]string{"TURN_METRICS": "true"}},
		{env: map[string]string{"TURN_METRICS": "some"}, wantError: `TURN_METRICS: "some" is not 1, 0, true or false`},
	} {
		if c, ok := settingsFromEnv(t, tc.env, tc.wantError); ok && c.NoTurnMetrics != tc.off {
			t.Errorf("%v: off %v, want %v", tc.env, c.NoTurnMetrics, tc.off)
		}
	}
}
