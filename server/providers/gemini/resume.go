package gemini

import (
	"strconv"
	"strings"
	"time"

	"rtgate/frames"
)

// Resumption: Gemini closes a connection after about ten minutes (goAway
// first, with the time left), and a connection can be lost; the session
// goes on over a new connection whose setup names the newest session
// resumption handle Gemini gave (sessionResumptionUpdate). The gateway
// moves the client's session there itself (server/session's resume), so the
// client's socket stays open and its conversation with it.
//
// A handle holds the conversation as it stood when it was given: resuming
// from an older one drops whatever followed it. So a move waits for a
// resumable point (Quiet): no response and no user turn in progress (an
// activity open with turn detection off counts), no function call
// unanswered, no response.create held for Gemini's own answer, and the
// newest handle given at such a moment with nothing said or asked since. Gemini marks a handle resumable
// mid-answer too on Vertex AI (memberjunction's RealtimeSessionResumption
// notes), so its own flag is not enough. Past the goAway's deadline the
// move takes the newest handle whatever is in progress.
//
//	event                                      handleQuiet
//	resumable handle, nothing in progress      true
//	model output, user transcript, a commit,   false
//	a text item, a function output,
//	response.create asked of Gemini
//	the gateway moves (ResumeSetup)            unchanged: the new connection
//	                                           stands where the handle does

// Quiet reports whether the session can move to a new connection now
// without losing anything (see above; before anything is said, a setup
// without a handle loses nothing either).
func (s *Session) Quiet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return (s.handleQuiet || !s.said) && s.resp == "" && s.doneOwed == nil && s.atRest()
}

// atRest reports whether nothing of the user's is under way: no turn
// transcribed or opened (turn detection off), no call to answer, no
// response.create held. Callers hold s.mu.
func (s *Session) atRest() bool {
	return len(s.userText) == 0 && !s.activityOpen && len(s.unanswered) == 0 && !s.createHeld
}

// Resumable reports whether the session can go on over a new connection:
// its setup went, and Gemini gave a handle or nothing has been said yet (a
// setup without a handle then loses nothing).
func (s *Session) Resumable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setupSent && (s.handle != "" || !s.said)
}

// ResumeSetup is the setup a new connection opens with: the session's
// configuration and its newest handle. Its setupComplete is the gateway's
// (server/session's primer consumes it).
func (s *Session) ResumeSetup() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.setup(s.model, s.handle)
}

// Lost ends, for the client, what the lost connection left in progress,
// and returns those events framed for the client (nil when nothing was)
// and the id of the response it ended ("" if none): a response ends failed
// (OpenAI's response.done with status "failed"), a response.done still
// waiting for its usage goes without it, and a session.update waiting for
// its setupComplete is answered (the new connection's setup carries it).
// A user activity opened with turn detection off is opened again on the
// new connection by the next append.
func (s *Session) Lost() (events []byte, response string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out frames.Output
	if s.resp != "" {
		response = s.resp
		s.endResponse("failed", "", nil, &out)
	}
	s.activityOpen = false
	if s.doneOwed != nil {
		s.flushDone(nil, &out)
	}
	if s.updatedOwed {
		s.updatedOwed = false
		out.Text(s.sessionEvent("session.updated"))
	}
	return out.Take(), response
}

// HoldAgain takes back a response.create that Recheck let go but the
// gateway could not send (the session was between connections): it is
// held again, and asked for by the next Recheck.
func (s *Session) HoldAgain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.createHeld = true
}

// noteHandle takes a sessionResumptionUpdate. Callers hold s.mu.
func (s *Session) noteHandle(handle string, resumable bool) {
	if !resumable || handle == "" {
		return
	}
	s.handle = handle
	s.handleQuiet = s.resp == "" && s.atRest()
}

// moved notes that the conversation moved on past the newest handle: a
// new connection resuming from it would lose what just happened. Callers
// hold s.mu.
func (s *Session) moved() {
	s.said, s.handleQuiet = true, false
}

// goAway tells OnGoAway that Gemini will close the connection in the time
// left (a protobuf Duration: "50s", "0.500s"). Callers hold s.mu.
func (s *Session) goAway(timeLeft string) {
	if s.OnGoAway == nil {
		return
	}
	left, err := strconv.ParseFloat(strings.TrimSuffix(timeLeft, "s"), 64)
	if err != nil || left < 0 {
		left = 0 // unreadable: as good as now
	}
	s.OnGoAway(time.Duration(left * float64(time.Second)))
}
