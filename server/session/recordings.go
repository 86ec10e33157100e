package session

// Recordings for evals (server/recording): a Realtime conversation whose
// key, or else the deployment it starts on, says record_sessions is
// recorded whole, both sides' events and audio, and stored when it ends
// (the Manager's archive: a directory, or an S3-compatible bucket). The
// recorder reads the client's events on the client's inspector
// (clientWatch) and the upstream's on the session's observers, as the
// client gets them; only recorded sessions pay for it.
//
// A recording is held in memory until its session ends (about 5.8 MB a
// minute of call, both sides' audio; RECORDINGS_MAX_MINUTES bounds it) and
// is never redacted. GPT-Live sessions are not recorded here: OpenAI's
// own store and /content keep theirs (docs/gpt-live.md).

import (
	"time"

	"rtgate/server/recording"
	"rtgate/server/routes"
)

// recordSession starts the session's recording when its key, or else the
// first deployment it would start on (ds), records sessions.
func (m *Manager) recordSession(info *sessionInfo, ds []*routes.Deployment) {
	if !recordSessions(info.key, ds) {
		return
	}
	info.rec = recording.NewRecorder(info.id, info.start, recording.Limits{MaxAudio: m.cfg.RecordingMaxAudio})
}

// recordSessions says whether a session of key on one of ds is recorded:
// the key's record_sessions when it has one, else the first deployment's.
func recordSessions(key *routes.ClientKey, ds []*routes.Deployment) bool {
	if key != nil && key.RecordSessions != nil {
		return *key.RecordSessions
	}
	return len(ds) > 0 && ds[0].RecordSessions
}

// storeRecording hands an ended session's recording to the archive, which
// stores it off the session's path.
func (m *Manager) storeRecording(info *sessionInfo) {
	if info.rec != nil {
		m.archive.Save(info.rec.Finish(time.Now()))
	}
}

// recordWatch is the recording's observer of the upstream's events: every
// one, as the client gets it.
type recordWatch setupWatch

func (o *recordWatch) wants(_, _ []byte) bool { return true }
func (o *recordWatch) inspect(p []byte)       { o.rec.Upstream(time.Now(), p) }
