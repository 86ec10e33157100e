package usage

// Meter is a session's frames.Inspector on the upstream's frames: it picks
// response.done events out with EventType (no allocation for the frames it
// passes over, which are nearly all of them) and sums their usage. It is
// written only from the upstream's read path and read once the session has
// ended, so it needs no lock.
type Meter struct {
	Usage Usage
}

// Wants picks response.done events out of the upstream's text frames.
func (m *Meter) Wants(prefix []byte) bool {
	t, ok := EventType(prefix)
	return ok && string(t) == "response.done"
}

// Inspect adds a response.done's usage. An event that does not parse adds
// nothing (the client got it verbatim all the same).
func (m *Meter) Inspect(p []byte) { _ = m.Usage.AddResponseDone(p) }
