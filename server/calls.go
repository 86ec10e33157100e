package server

// WebRTC calls: POST /v1/realtime/calls with an SDP offer, as raw
// application/sdp or OpenAI's multipart form with sdp and session parts. The
// gateway authenticates the caller (a gateway key or a client secret), picks
// the model group (the session part's model, else a model query, else the
// secret's group, else the default), and forwards the offer to the chosen
// deployment's calls endpoint (<base>/realtime/calls; Azure GA
// /openai/v1/realtime/calls) with the deployment's key, always as the
// multipart form with a session part naming the deployment's model (a
// secret's session config when the caller sent none). The SDP answer, the
// status and the Location header come back unchanged.
//
// Media never flows through the gateway: the browser and OpenAI exchange it
// directly. To meter the call the gateway opens its own sideband connection
// (?call_id=) to the deployment and counts response.done usage against the
// key, as for WebSocket sessions; it remembers which key made the call for
// sideband access (sideband.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/routes"
	"rtgate/server/usage"
	"rtgate/upstream"
)

// callOffer is what a calls request carried.
type callOffer struct {
	sdp     []byte
	session map[string]any // nil when none was sent
}

// parseCallOffer reads raw application/sdp or the multipart form.
func parseCallOffer(req *http.Request, body []byte) (*callOffer, *apiAnswer) {
	mt, params, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	bad := func(msg string) (*callOffer, *apiAnswer) {
		a := errorAnswer(http.StatusBadRequest, "invalid_request_error", "invalid_value", msg)
		return nil, &a
	}
	switch {
	case err == nil && mt == "application/sdp":
		return &callOffer{sdp: body}, nil
	case err == nil && mt == "multipart/form-data":
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		o := &callOffer{}
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return bad("malformed multipart body: " + err.Error())
			}
			b, _ := io.ReadAll(io.LimitReader(p, maxAPIBody))
			switch p.FormName() {
			case "sdp":
				o.sdp = b
			case "session":
				if err := json.Unmarshal(b, &o.session); err != nil || o.session == nil {
					return bad("Invalid 'session': expected a JSON object.")
				}
			}
		}
		if len(o.sdp) == 0 {
			return bad("Missing required parameter: 'sdp'.")
		}
		return o, nil
	}
	a := errorAnswer(http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type",
		"Send the SDP offer as application/sdp, or multipart/form-data with sdp and session parts.")
	return nil, &a
}

// createCall answers POST /v1/realtime/calls; it runs in the request's own
// goroutine.
func (s *Server) createCall(req *http.Request, body []byte) apiAnswer {
	table := s.routes.Load()
	key, grant, herr := s.authenticateConnect(table, credentials(req.Header).key)
	if herr != nil {
		return herr.answer()
	}
	offer, bad := parseCallOffer(req, body)
	if bad != nil {
		return *bad
	}
	ask := groupAsk{grant: grant, model: req.URL.Query().Get("model")}
	if grant != nil {
		if offer.session == nil {
			if err := s.secrets.LoadConfig(req.Context(), grant); err != nil {
				return errorAnswer(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", apps.ErrSecretConfig.Error())
			}
			_ = json.Unmarshal(grant.Config, &offer.session)
		}
	} else if offer.session != nil && offer.session["model"] != nil {
		ask.model, _ = offer.session["model"].(string) // the session part's model wins over the query's
	}
	group, herr := s.pickGroup(table, key, ask)
	if herr != nil {
		return herr.answer()
	}
	if offer.session == nil {
		offer.session = map[string]any{"type": "realtime"}
	}
	var last string
	for i, d := range s.balancer.Rank(table.Groups[group]) {
		if i == balance.MaxAttempts {
			break
		}
		a, callID, err := forwardCall(req.Context(), s.httpClient, s.cfg.DialTimeout, d, offer)
		if err != nil {
			last = err.Error()
			s.balancer.Failed(d, "calls request failed")
			s.log.Warn("upstream calls request failed", "deployment", d.Name, "err", err)
			continue
		}
		s.balancer.Succeeded(d)
		if callID != "" {
			if err := s.calls.Remember(context.Background(), callID, key.Name); err != nil {
				s.log.Warn("call owner not stored in Redis; only this instance knows it", "call_id", callID, "err", err)
			}
			s.log.Info("call created", "key", key.Name, "model_group", group, "deployment", d.Name, "call_id", callID)
			go s.meters.start(key, group, d, callID)
		}
		return a
	}
	return errorAnswer(http.StatusBadGateway, "server_error", "upstream_unavailable",
		"the upstream calls endpoint could not be reached: "+last)
}

// callsURL is the deployment's calls endpoint.
func callsURL(d *routes.Deployment) (*url.URL, http.Header) {
	t := d.Target(url.Values{"call_id": {"x"}}) // no model in the query
	u := *t.URL
	switch u.Scheme {
	case "wss":
		u.Scheme = "https"
	case "ws":
		u.Scheme = "http"
	}
	u.Path = path.Join(u.Path, "calls")
	q := u.Query()
	q.Del("call_id")
	u.RawQuery = q.Encode()
	return &u, t.Header
}

// forwardCall sends the offer to d and returns its answer unchanged; err is
// set only when d could not be reached (or answered 5xx), so the next
// deployment is tried.
func forwardCall(ctx context.Context, client *http.Client, timeout time.Duration, d *routes.Deployment, offer *callOffer) (apiAnswer, string, error) {
	session := map[string]any{}
	for k, v := range offer.session {
		session[k] = v
	}
	session["model"] = d.Model
	if session["type"] == nil {
		session["type"] = "realtime"
	}
	sj, _ := json.Marshal(session)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("sdp", string(offer.sdp))
	_ = mw.WriteField("session", string(sj))
	_ = mw.Close()

	u, h := callsURL(d)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), &buf)
	if err != nil {
		return apiAnswer{}, "", err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := client.Do(req)
	if err != nil {
		return apiAnswer{}, "", fmt.Errorf("POST %s: %w", redactedURL(u), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody))
	if err != nil {
		return apiAnswer{}, "", fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode >= 500 {
		return apiAnswer{}, "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	a := apiAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: body, header: http.Header{}}
	callID := ""
	if loc := resp.Header.Get("Location"); loc != "" {
		a.header.Set("Location", loc)
		if resp.StatusCode == http.StatusCreated {
			callID = path.Base(loc)
		}
	}
	return a, callID, nil
}

// callMeters are the gateway's own sidebands to the calls it forwarded,
// which meter each call's usage against the key that made it.
type callMeters struct {
	ctx     context.Context // the server's: a sideband's dial ends with it
	timeout time.Duration   // the dial timeout
	dialer  *upstream.Dialer
	log     *slog.Logger
	metrics *metrics
	records *records
	live    sync.Map // *callMeter → struct{}
	// A GPT-Live WebRTC session's budget (liveapps.go): the ledger, and how
	// a session over budget is ended (its call hung up upstream).
	budgets *budgets
	hangUp  func(d *routes.Deployment, id string)
}

// start holds the gateway's own sideband to a call and counts its
// usage against key until the call ends.
func (cm *callMeters) start(key *routes.ClientKey, group string, d *routes.Deployment, callID string) {
	ctx, cancel := context.WithTimeout(cm.ctx, cm.timeout)
	defer cancel()
	conn, err := cm.dialer.Dial(ctx, d.Target(url.Values{"call_id": {callID}}))
	if err != nil {
		cm.log.Warn("call not metered: its sideband did not connect", "call_id", callID, "deployment", d.Name, "err", err)
		cm.metrics.dialFailures.WithLabelValues(group).Inc()
		return
	}
	cm.watch(&sessionInfo{id: usage.NewSessionID(), key: key, group: group, deployment: d, start: time.Now()}, callID, conn)
}

// watch makes conn, the gateway's own sideband to call (or Live session)
// callID, meter it for info until it ends.
func (cm *callMeters) watch(info *sessionInfo, callID string, conn *upstream.Upgraded) {
	m := &callMeter{meters: cm, info: info, callID: callID, h: poller.NewHandle(conn.Endpoint)}
	m.sc.Init(frames.FromServer, 0)
	m.sc.SetInspector(m)
	cm.live.Store(m, struct{}{})
	m.h.Start(m, func() {
		if len(conn.Preface) > 0 {
			m.scan(frames.NewByteSource(conn.Preface))
		}
	})
}

// callMeter is the poller.Owner of a call's metering sideband: it reads the
// call's events (nothing is forwarded) and records the usage when the
// sideband ends.
type callMeter struct {
	meters *callMeters
	info   *sessionInfo
	callID string
	h      *poller.Handle
	sc     frames.Scanner // under the Handle's read lock
	once   sync.Once
}

// Wants implements frames.Inspector: the events that carry usage.
func (m *callMeter) Wants(prefix []byte) bool {
	if ls := m.info.live; ls != nil {
		return ls.meter.Wants(prefix)
	}
	return m.info.meter.Wants(prefix)
}

// Inspect implements frames.Inspector: a call can last an hour, so its usage
// reaches the metrics as each response ends, and the usage log when the call
// does.
func (m *callMeter) Inspect(p []byte) {
	if ls := m.info.live; ls != nil {
		ls.meter.Inspect(p) // GPT-Live: seconds, backend tokens (liveapps.go)
		return
	}
	if add, ok := m.info.meter.Book(p); ok {
		m.meters.metrics.countTokens(m.info.group, m.info.key.Name, add)
	}
}

// UpstreamReadable implements poller.Owner.
func (m *callMeter) UpstreamReadable() {
	if err := m.h.Endpoint().Read(func(src frames.Source) error { m.scan(src); return nil }); err != nil {
		m.h.Endpoint().Drop()
	}
}

func (m *callMeter) scan(src frames.Source) {
	for src.Len() > 0 {
		cl, err := m.sc.Forward(src, nil)
		if err != nil {
			m.h.Endpoint().Drop()
			return
		}
		if cl != nil { // the call ended: answer the close, then the socket goes
			_ = m.h.Endpoint().Send(frames.AppendClose(nil, cl.Code, "", true))
			m.h.Endpoint().Close()
			return
		}
	}
}

// UpstreamGone implements poller.Owner: the call ended.
func (m *callMeter) UpstreamGone() {
	m.once.Do(func() {
		cm := m.meters
		cm.live.Delete(m)
		cm.log.Info("call metered", "call_id", m.callID, "session_id", m.info.id)
		rec := usage.Record{SessionID: m.info.id, KeyName: m.info.key.Name, ModelGroup: m.info.group,
			Deployment: m.info.currentDeployment().Name, StartedAt: m.info.start.UTC(), EndedAt: time.Now().UTC(),
			DurationMS: time.Since(m.info.start).Milliseconds(), Outcome: "call_ended", Usage: m.info.meter.Usage,
			Protocol: "realtime"}
		if ls := m.info.live; ls != nil {
			ls.fillWebRTC(&rec)
		}
		cm.records.record(m.info, &rec)
	})
}

// close ends every metering sideband (shutdown).
func (cm *callMeters) close() {
	cm.live.Range(func(k, _ any) bool {
		m := k.(*callMeter)
		_ = m.h.Endpoint().Send(frames.AppendClose(nil, ws.StatusGoingAway, "gateway shutting down", true))
		m.h.Endpoint().Close()
		return true
	})
}

// countTokens adds usage to the token metrics.
func (m *metrics) countTokens(group, key string, u usage.Usage) {
	in, out := u.InputTokenDetails, u.OutputTokenDetails
	for kind, n := range map[string]int64{
		"input_text": in.TextTokens, "input_audio": in.AudioTokens, "input_image": in.ImageTokens,
		"input_cached": in.CachedTokens, "output_text": out.TextTokens, "output_audio": out.AudioTokens,
	} {
		if n > 0 {
			m.tokens.WithLabelValues(group, key, kind).Add(float64(n))
		}
	}
}
