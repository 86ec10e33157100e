package session

// What the rest of the gateway reads of the registry of live sessions: the
// watchdog and the drain walk it (Live), the admin page counts it (Count,
// Counts), and a reload ends the sessions of revoked keys (Revoke).

import (
	"time"

	"github.com/gobwas/ws"

	"rtgate/poller"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/transcript"
)

// Live is a session that is not ending, and when its client's upgrade
// completed.
type Live struct {
	Session *poller.Session
	Start   time.Time
	MaxSecs int               // the key's max_session_secs, 0 for MAX_SESSION_SECS
	proto   protocol.Protocol // what its client speaks (its kind's)
}

// End ends the session on the gateway's initiative: an error event errCode
// in its client's protocol, then close code.
func (l Live) End(code ws.StatusCode, reason, errCode, message string) {
	terminate(l.proto, l.Session, code, reason, errCode, message)
}

// Live copies the registry so that a walk runs without the lock.
func (m *Manager) Live() []Live {
	m.sessMu.Lock()
	defer m.sessMu.Unlock()
	out := make([]Live, 0, len(m.sessions))
	for sess, info := range m.sessions {
		if !sess.Terminating() {
			out = append(out, Live{sess, info.start, info.key.MaxSessionSecs, info.proto()})
		}
	}
	return out
}

// Count is the number of sessions in the registry.
func (m *Manager) Count() int {
	m.sessMu.Lock()
	defer m.sessMu.Unlock()
	return len(m.sessions)
}

// Counts are the registry's sessions by model group, key name and protocol.
func (m *Manager) Counts() (byGroup, byKey, byProtocol map[string]int) {
	byGroup, byKey, byProtocol = map[string]int{}, map[string]int{}, map[string]int{}
	m.sessMu.Lock()
	defer m.sessMu.Unlock()
	for _, info := range m.sessions {
		byGroup[info.group]++
		if info.key != nil {
			byKey[info.key.Name]++
		}
		byProtocol[info.protocol()]++
	}
	return byGroup, byKey, byProtocol
}

// Revoke applies a reloaded routes table t to what is live: a session
// whose key t no longer holds (removed, or its secret changed) ends with an
// error event key_revoked and close 1008, and a WebRTC call or GPT-Live
// WebRTC session of such a key is hung up. The rest needs nothing here: a
// resume or rollover reserves among t's deployments (Manager.resume), budgets
// and limits are read from t (budgets.budgetOf, admission.Gate.Admit).
func (m *Manager) Revoke(t *routes.Table) {
	var revoked []Live
	m.sessMu.Lock()
	for sess, info := range m.sessions {
		if t.Current(info.key) == nil {
			revoked = append(revoked, Live{Session: sess, proto: info.proto()})
		}
	}
	m.sessMu.Unlock()
	for _, l := range revoked {
		l.End(ws.StatusPolicyViolation, "key revoked", "key_revoked",
			"The key this session was opened with has been revoked.")
	}
	n := len(revoked)
	cm := m.meters
	cm.live.Range(func(k, _ any) bool {
		if c := k.(*callMeter); c.lm == nil && t.Current(c.info.key) == nil {
			n++
			go cm.hangUpCall(c.info.currentDeployment(), c.callID)
		}
		return true
	})
	cm.sessions.Range(func(_, v any) bool {
		if lm := v.(*liveMetering); t.Current(lm.info.key) == nil {
			n++
			go cm.hangUp(lm.d, lm.id)
		}
		return true
	})
	if n > 0 {
		m.log.Warn("config reload revoked keys of live sessions: they are ended", "sessions_and_calls", n)
	}
}

// Described is one live session as the admin port's session view lists
// it.
type Described struct {
	ID, KeyName, ModelGroup, Protocol string
	StartedAt                         time.Time
	Kept                              bool // it keeps its conversation record
}

// Describe lists the live sessions (the admin port's session view).
func (m *Manager) Describe() []Described {
	m.sessMu.Lock()
	defer m.sessMu.Unlock()
	out := make([]Described, 0, len(m.sessions))
	for _, info := range m.sessions {
		d := Described{ID: info.id, ModelGroup: info.group, Protocol: info.protocol(), StartedAt: info.start.UTC(), Kept: info.conv != nil && info.conv.Kept()}
		if info.key != nil {
			d.KeyName = info.key.Name
		}
		out = append(out, d)
	}
	return out
}

// Conversation is the conversation record of the live session id as it
// stands, nil when there is no such session or it keeps none.
func (m *Manager) Conversation(id string) *transcript.Record {
	m.sessMu.Lock()
	var conv *transcript.Recorder
	for _, info := range m.sessions {
		if info.id == id {
			conv = info.conv
			break
		}
	}
	m.sessMu.Unlock()
	if conv == nil || !conv.Kept() {
		return nil
	}
	rec := conv.Snapshot()
	return &rec
}
