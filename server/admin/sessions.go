package admin

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"rtgate/server/transcript"
)

// The session view: the live sessions, and one session's conversation
// record as it stands (log_transcripts; docs/conversation-record.md). It
// is on the admin port only, behind its Host guard: transcripts are
// what callers said, not for the client port.
//
//	GET /sessions                       the page: live sessions, one's conversation
//	GET /sessions.json                  the live sessions (no conversations)
//	GET /sessions/{id}/conversation     one live session's conversation record (404:
//	                                    no such live session, or it keeps none)

// SessionView is one live session as the session view shows it.
type SessionView struct {
	ID         string    `json:"id"`
	KeyName    string    `json:"key_name"`
	ModelGroup string    `json:"model_group"`
	Protocol   string    `json:"protocol"`
	StartedAt  time.Time `json:"started_at"`
	// Kept says whether the session keeps its conversation record.
	Kept bool `json:"kept"`
}

//go:embed sessions.html
var sessionsPage []byte

// addSessionView mounts the session view's routes.
func (s *Server) addSessionView(mux *http.ServeMux) {
	mux.HandleFunc("GET /sessions", func(w http.ResponseWriter, _ *http.Request) {
		pageHeaders(w)
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "+
			"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		_, _ = w.Write(sessionsPage)
	})
	mux.HandleFunc("GET /sessions.json", func(w http.ResponseWriter, _ *http.Request) {
		var list []SessionView
		if s.gw.SessionViews != nil {
			list = s.gw.SessionViews()
		}
		slices.SortFunc(list, func(a, b SessionView) int { return a.StartedAt.Compare(b.StartedAt) })
		writeJSON(w, http.StatusOK, map[string]any{"sessions": list})
	})
	mux.HandleFunc("GET /sessions/{id}/conversation", func(w http.ResponseWriter, r *http.Request) {
		var rec *transcript.Record
		if s.gw.Conversation != nil {
			rec = s.gw.Conversation(r.PathValue("id"))
		}
		if rec == nil {
			writeJSONError(w, http.StatusNotFound, "invalid_request_error", "not_found",
				"no live session with that id keeps a conversation record")
			return
		}
		writeJSON(w, http.StatusOK, rec)
	})
}

// writeJSON answers v as JSON, never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
