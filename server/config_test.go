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
		c, err := FromEnv(func(name string) (string, bool) { v, ok := tc.env[name]; return v, ok })
		switch {
		case tc.wantError != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("%v: err %v, want %q", tc.env, err, tc.wantError)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case c.HedgeDelay != tc.hedge || c.DialTimeout != tc.dial:
			t.Errorf("%v: hedge %v dial %v, want %v %v", tc.env, c.HedgeDelay, c.DialTimeout, tc.hedge, tc.dial)
		}
	}
}
