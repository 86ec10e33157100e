package usage

// Meter is a session's frames.Inspector on the upstream's frames: it picks
// the usage-bearing events (response.done, transcription completed) out with
// EventType, allocating nothing for the frames it passes over, which are
// nearly all of them, and sums their usage. It is written only from the
// upstream's read path and read once the session has ended, so it needs no
// lock.
type Meter struct {
	Usage Usage
	// OnEvent, if set, is called from the read path with each event's
	// usage once it is added (where spend is booked as it happens). The
	// event has already been forwarded to the client. It must not block.
	OnEvent func(add Usage)
}

// Wants picks the usage-bearing events out of the upstream's text frames.
func (m *Meter) Wants(prefix []byte) bool {
	t, ok := EventType(prefix)
	return ok && m.WantsType(t)
}

// WantsType is Wants for an event whose type was already read.
func (m *Meter) WantsType(t []byte) bool {
	return string(t) == TypeResponseDone || string(t) == TypeTranscriptionComplete
}

// Inspect implements frames.Inspector: it books the event's usage. An event
// that does not parse adds nothing (the client got it verbatim all the same).
func (m *Meter) Inspect(p []byte) { m.Book(p) }

// Book adds an event's usage and returns what it added; ok is false when the
// event carried none (or did not parse).
func (m *Meter) Book(p []byte) (add Usage, ok bool) {
	add, err := Parse(p)
	if err != nil || add == (Usage{}) {
		return Usage{}, false
	}
	m.Usage.Add(add)
	if m.OnEvent != nil {
		m.OnEvent(add)
	}
	return add, true
}
