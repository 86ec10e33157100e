package report

import (
	"fmt"
	"strings"

	"rtgate/bench/load"
)

// OpenLoopLine says in one line what an open-loop run did with its
// arrivals: the offered rate, and every arrival dropped or delayed at the
// in-flight cap (never left out, so a table of latencies cannot hide that
// the generator refused or queued calls).
func OpenLoopLine(o *load.OpenLoop) string {
	var b strings.Builder
	fmt.Fprintf(&b, "open loop: %d arrivals at %g/s (%s, seed %d; offered %.1f/s over %.1f s)",
		o.Scheduled, o.Rate, o.Spacing, o.Seed, o.OfferedRate, o.Span.Seconds())
	if o.CallLength != "" {
		fmt.Fprintf(&b, ", call length %s", o.CallLength)
	}
	fmt.Fprintf(&b, "; %d started, %d dropped and %d delayed at the cap of %d in flight (peak %d)",
		o.Started, o.Dropped, o.Delayed, o.MaxInFlight, o.PeakInFlight)
	if o.Unstarted > 0 {
		fmt.Fprintf(&b, ", %d not reached (interrupted)", o.Unstarted)
	}
	if o.StartLag.N > 0 {
		fmt.Fprintf(&b, "; start lag p99 %s, max %s", FormatMS(o.StartLag.P99), FormatMS(o.StartLag.Max))
	}
	return b.String()
}
