package session

// Usage a client cannot walk away from (usage.Flights has the rule): a
// Realtime conversation session follows its responses in flight, and its
// end, whoever ends it (the client's close or drop, a drain, MAX_SESSION_SECS,
// a budget), goes through the relay's farewell (poller.SetFarewellFunc): a
// response.cancel for each response in flight, then the close once their
// cancelled response.done came (with their usage) or half of
// CLOSE_TIMEOUT_SECS passed. Responses still in flight then, or when a
// resume lets go of their upstream (a loss, the cap, a rollover), are billed
// an estimate, flagged unconfirmed. A rollover the gateway chooses cancels
// first (forcedRollover waits for the cancelled responses).
//
// Only response.created and response.done are read for it, once per
// response; the relay's per-frame path is unchanged.
//
// Why not the turn clock's responses (turns.Tracker keeps the open
// responses by id too)? Reviewed when both were merged; they stay apart,
// sharing the event type read once per frame (setupWatch.Wants) and nothing
// per frame either way:
//   - TURN_METRICS=0 turns the Tracker off (its Inspect returns at once),
//     while billing must follow every response; keeping the Tracker's open
//     list on when its figures are off would put the billing rule inside a
//     package whose job is latency.
//   - They end responses differently: the Tracker ends a resumed session's
//     open responses as failed turns (Resumed) and drops its figures at the
//     end, whereas billing must first cancel them and wait (the farewell,
//     under the upstream side's lock), then estimate what is left, with
//     byte counts the Tracker does not keep.
//   - The farewell's frame func and a rollover's quiet run under the
//     upstream side's lock (package poller's doc, Lock order); Flights' own
//     lock is a leaf taken there and at the end. The Tracker's lock is also
//     taken from the client's read path for each forwarded create and
//     (server VAD) audio append: one lock for both would make the session's end wait on
//     the client's forwarding and the turn clock on the farewell.
//   - What merging would save is one small json.Unmarshal of
//     response.created and of response.done per response, not per frame.

import (
	"time"

	"rtgate/poller"
	"rtgate/server/protocol"
	"rtgate/server/usage"
)

// keepFlights turns the follow of responses in flight on for a Realtime
// conversation session (not a sideband, a transcription or a translation
// session: they have no responses of their own to cancel), before its relay
// starts.
func (i *sessionInfo) keepFlights(sess *poller.Session, closeTimeout time.Duration) {
	f := &usage.Flights{
		Relayed:    sess.BytesToClient,
		FromClient: sess.BytesFromClient,
		OnSettled:  sess.Farewelled,
		Cancel:     protocol.Realtime{}.Cancel,
	}
	i.flights, i.cancelWait = f, farewellWait(closeTimeout)
	i.meter.SplitTranscription = true // its input transcription is its own model's (transcriptionCost)
	sess.SetFarewellFunc(f.Farewell, i.cancelWait)
}

// farewellWait is how long a Realtime session's end waits for its cancelled
// responses: half of CLOSE_TIMEOUT_SECS, so that the close handshake that
// follows still fits the drain's budget.
func farewellWait(closeTimeout time.Duration) time.Duration {
	return max(closeTimeout/2, 100*time.Millisecond)
}

// estimateFlights bills the responses in flight that will never report
// their usage (the session ended, or a resume let go of their upstream):
// the estimate is added to the session's usage and its Estimated part, and
// booked against the key's budget. Call it where no upstream read runs (the
// session's end, a resume).
func (m *Manager) estimateFlights(info *sessionInfo) {
	if info.flights == nil {
		return
	}
	est := info.flights.Estimate()
	if est.Responses == 0 {
		return
	}
	info.estMu.Lock()
	info.estimated.Add(est)
	info.estMu.Unlock()
	m.budgets.bookAfter(info, prices(info.currentDeployment()).Cost(est))
}

// estimatedUsage is what estimateFlights billed so far (nil for nothing).
func (i *sessionInfo) estimatedUsage() *usage.Usage {
	i.estMu.Lock()
	defer i.estMu.Unlock()
	if i.estimated.Responses == 0 {
		return nil
	}
	est := i.estimated
	return &est
}

// forcedRollover is the quiet a rollover past its deadline waits for (nil:
// any moment, forced). The first time, the responses in flight are asked to
// cancel; then the moment they have all ended will do, for up to the
// farewell's wait, after which the rollover is forced (and what is still in
// flight is estimated). cancelledAt is the rollover's own, read and written
// by its timer only.
func (i *sessionInfo) forcedRollover(sess *poller.Session, now time.Time, cancelledAt *time.Time) func() bool {
	f := i.flights
	if f == nil {
		return nil
	}
	if cancelledAt.IsZero() {
		*cancelledAt = now
		if frames := f.Cancels(); frames == nil || !sess.SendUpstream(frames) {
			return nil // nothing in flight, or the upstream cannot take it
		}
	}
	if now.Sub(*cancelledAt) >= i.cancelWait {
		return nil
	}
	return func() bool { return len(f.Open()) == 0 }
}
