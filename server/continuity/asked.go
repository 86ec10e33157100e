package continuity

import (
	"encoding/json"
	"strings"

	"rtgate/server/protocol"
)

// A response asked for and not started yet: the client's response.create
// forwarded to the upstream, or server VAD's speech_stopped (the upstream
// commits the speech and, unless create_response is off, starts a
// response), with no response.created or error since. It makes the session
// busy (Quiet): a rollover then would leave the request on the upstream
// let go of, and the client would wait for an answer that never comes. The
// client's last such response.create (up to MaxAsked bytes) is kept until
// it is answered, so that a resume (a loss, or a rollover forced at its
// deadline) asks the fresh upstream again (Snapshot.Asked). One the relay
// queued during a resume goes to the fresh upstream with the queue: it
// makes the session busy but is not asked again.

// MaxAsked bounds a kept response.create (its payload): a larger one is
// not asked again after a resume, though it still makes the session busy.
const MaxAsked = 16 << 10

// ask notes the client's response.create p; queued: the relay queued it
// for an upstream still to come.
func (st *State) ask(p []byte, queued bool) {
	st.waiting = true
	if queued {
		return // an earlier request still unanswered is asked first
	}
	st.asked, st.askedEvent = nil, ""
	if len(p) <= MaxAsked {
		st.asked = append([]byte(nil), p...)
		var ev struct {
			EventID string `json:"event_id"`
		}
		if json.Unmarshal(p, &ev) == nil {
			st.askedEvent = ev.EventID
		}
	}
}

// speechStopped: server VAD's turn, whose response the upstream starts.
func (st *State) speechStopped() { st.speaking, st.waiting = false, true }

// answered ends the wait for a response: it started.
func (st *State) answered() { st.waiting, st.asked, st.askedEvent = false, nil, "" }

// refused reads an upstream error event p: it answers a client event, most
// likely the request a response waits for (an active response already, a
// bad parameter), unless it names the event it answers (error.event_id)
// and that is an event the gateway made (protocol.GatewayEventPrefix: a
// forced rollover's response.cancel that arrived after its response ended,
// say) or not the kept response.create's (an empty commit). OpenAI's cap is
// no answer to anything.
func (st *State) refused(p []byte) {
	if IsSessionExpired(p) {
		return
	}
	var ev struct {
		Error struct {
			EventID string `json:"event_id"`
		} `json:"error"`
	}
	if json.Unmarshal(p, &ev) == nil && ev.Error.EventID != "" {
		if strings.HasPrefix(ev.Error.EventID, protocol.GatewayEventPrefix) {
			return // the gateway's own event's error: the client's request still waits
		}
		if st.askedEvent != "" && ev.Error.EventID != st.askedEvent {
			return // another request's error
		}
	}
	st.answered()
}

// askAgain is what a resume asks the fresh upstream after the replay: the
// unanswered response.create, which stays asked (of the fresh upstream)
// until answered there. A wait with nothing to ask again (server VAD's,
// whose audio is lost, or a request too long to keep) ends.
func (st *State) askAgain() []byte {
	if !st.waiting || st.asked == nil {
		st.waiting = false
		return nil
	}
	return st.asked
}
