package protocol

import (
	"encoding/json"
	"strings"
)

// GPT-Live's HTTP and WebSocket paths and ids, which both the session side
// (a WebSocket session, a sideband, a WebSocket fork) and the HTTP API
// (server/api: WebRTC create, call controls, forks, recordings) read.

// livePaths are the routes of GPT-Live sessions: OpenAI's, Azure's and the
// unversioned form (IsLivePath).
var livePaths = [...]string{"/v1/live/sessions", "/openai/v1/live/sessions", "/live/sessions"}

// IsLivePath reports whether p is a route of GPT-Live sessions, where a
// WebSocket session or a WebRTC create goes.
func IsLivePath(p string) bool {
	for _, base := range livePaths {
		if p == base {
			return true
		}
	}
	return false
}

// liveOps are the operations under /v1/live/sessions/{id}/.
var liveOps = map[string]bool{"accept": true, "reject": true, "refer": true, "hangup": true, "fork": true, "content": true,
	"attach": true}

// LiveSubPath splits /v1/live/sessions/{id}/{op} (and the Azure and
// unversioned forms) into the session id and the operation.
func LiveSubPath(p string) (id, op string, ok bool) {
	for _, base := range livePaths {
		rest, found := strings.CutPrefix(p, base+"/")
		if !found {
			continue
		}
		id, op, found = strings.Cut(rest, "/")
		if !found || !liveOps[op] || !ValidID(id) {
			return "", "", false
		}
		return id, op, true
	}
	return "", "", false
}

// ValidID accepts OpenAI's session and call ids (live_…, rtc_…): letters,
// digits, _ and -, at most 128 of them.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// LiveSessionID reads session.id from a GPT-Live WebRTC create's (or HTTP
// fork's) answer ("" when it names no valid id).
func LiveSessionID(body []byte) string {
	var ans struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if json.Unmarshal(body, &ans) != nil || !ValidID(ans.Session.ID) {
		return ""
	}
	return ans.Session.ID
}
