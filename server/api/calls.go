package api

// WebRTC calls: POST /v1/realtime/calls with an SDP offer, as raw
// application/sdp or OpenAI's multipart form with sdp and session parts. The
// gateway authenticates the caller (a gateway key or a client secret), picks
// the model group (the session part's model, else a model query, else the
// secret's group, else the default), and forwards the offer to the chosen
// deployment's calls endpoint (<base>/realtime/calls; Azure GA
// /openai/v1/realtime/calls) with the deployment's key, always as the
// multipart form with a session part naming the deployment's model (a
// secret's session config when the caller sent none). The SDP answer, the
// status come back unchanged, the Location header as the gateway's own path
// (/v1/realtime/calls/{id}).
//
// Media never flows through the gateway: the browser and OpenAI exchange it
// directly. A call is admitted as a session (Deps.Admit): the key's
// models, budget, max_sessions and connect_rate and the deployment's slot,
// held while the call is live. To meter the call the gateway opens its own
// sideband connection (?call_id=) to the deployment and books response.done
// usage against the key (its token metrics and its budget: over budget, the
// call is hung up: HangUpCall), as for WebSocket sessions; the call ends,
// and its admission is given back, when that sideband closes
// (Admission.MeterCall). It remembers who made the call (the key, the
// deployment, the client secret) for sideband access (Deps.Owners).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"slices"
	"time"

	"rtgate/server/admission"
	"rtgate/server/apps"
	"rtgate/server/frontdoor"
	"rtgate/server/protocol"
	"rtgate/server/routes"
)

// callOffer is what a calls request carried.
type callOffer struct {
	sdp     []byte
	session map[string]any // nil when none was sent
}

// parseCallOffer reads raw application/sdp or the multipart form.
func parseCallOffer(req *http.Request, body []byte) (*callOffer, *Answer) {
	mt, params, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	bad := func(msg string) (*callOffer, *Answer) {
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
			b, _ := io.ReadAll(io.LimitReader(p, MaxBody))
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
func (e *Endpoints) createCall(req *http.Request, body []byte) Answer {
	table := e.deps.Routes()
	key, grant, herr := e.Authenticate(table, frontdoor.ReadCredentials(req.Header).Key)
	if herr != nil {
		return refusedAnswer(herr)
	}
	offer, bad := parseCallOffer(req, body)
	if bad != nil {
		return *bad
	}
	ask := admission.GroupAsk{Grant: grant, Model: req.URL.Query().Get("model")}
	if grant != nil {
		if offer.session == nil {
			if err := e.deps.Secrets.LoadConfig(req.Context(), grant); err != nil {
				return errorAnswer(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", apps.ErrSecretConfig.Error())
			}
			_ = json.Unmarshal(grant.Config, &offer.session)
		}
	} else if offer.session != nil && offer.session["model"] != nil {
		ask.Model, _ = offer.session["model"].(string) // the session part's model wins over the query's
	}
	group, herr := e.deps.PickGroup(table, key, ask)
	if herr != nil {
		return refusedAnswer(herr)
	}
	if offer.session == nil {
		offer.session = map[string]any{"type": "realtime"}
	}
	adm, herr := e.deps.Admit(key, table, group, nil)
	if herr != nil {
		return refusedAnswer(herr)
	}
	if !slices.ContainsFunc(adm.Candidates(), (*routes.Deployment).HasWebRTC) {
		adm.Release()
		return errorAnswer(http.StatusBadRequest, "invalid_request_error", "unsupported_for_provider",
			fmt.Sprintf("Model group '%s' is served by a provider without WebRTC calls (xAI, Gemini): connect over WebSocket at /v1/realtime.", group))
	}
	var a Answer
	var callID string
	d, tried := e.firstToAnswer(adm, "calls request", func(d *routes.Deployment) (err error) {
		if !d.HasWebRTC() {
			return errCannotServe
		}
		a, callID, err = forwardCall(req.Context(), e.deps.HTTPClient, e.cfg.DialTimeout, d, offer)
		return err
	})
	if d == nil {
		adm.Release()
		return upstreamUnreachable(group, tried)
	}
	if callID == "" {
		adm.Release() // refused upstream: no call to count
		return a
	}
	owner := apps.Owner{Key: key.Name, Deployment: d.Name}
	if grant != nil {
		owner.Secret = grant.Claims.ID
	}
	if err := e.deps.Owners.Remember(context.Background(), callID, owner); err != nil {
		e.deps.Log.Warn("call owner not stored in Redis; only this instance knows it", "call_id", callID, "err", err)
	}
	e.deps.Log.Info("call created", "key", key.Name, "model_group", group, "deployment", d.Name, "call_id", callID)
	go adm.MeterCall(key, group, d, callID)
	return a
}

// HangUpCall ends call id on d: a call over its key's budget, or of a
// revoked key (the server's call meters and reload call it).
func (e *Endpoints) HangUpCall(d *routes.Deployment, id string) {
	u, h := callsURL(d)
	u.Path = path.Join(u.Path, id, "hangup")
	ctx, cancel := context.WithTimeout(e.deps.Context, max(e.cfg.DialTimeout, time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := e.deps.HTTPClient.Do(req)
	if err != nil {
		e.deps.Log.Warn("call not hung up", "call_id", id, "deployment", d.Name, "err", err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBody))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.deps.Log.Warn("call not hung up", "call_id", id, "deployment", d.Name, "status", resp.StatusCode)
	}
}

// callsURL is the deployment's calls endpoint.
func callsURL(d *routes.Deployment) (*url.URL, http.Header) {
	ws, h := d.Address(url.Values{"call_id": {"x"}}) // no model in the query
	u := routes.HTTPURL(ws)
	u.Path = path.Join(u.Path, "calls")
	q := u.Query()
	q.Del("call_id")
	u.RawQuery = q.Encode()
	return u, h
}

// forwardCall sends the offer to d and returns its answer unchanged; err is
// set only when d could not be reached (or answered 5xx), so the next
// deployment is tried.
func forwardCall(ctx context.Context, client *http.Client, timeout time.Duration, d *routes.Deployment, offer *callOffer) (Answer, string, error) {
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
		return Answer{}, "", err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := client.Do(req)
	if err != nil {
		return Answer{}, "", fmt.Errorf("POST %s: %w", routes.RedactedURL(u), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return Answer{}, "", fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode >= 500 {
		return Answer{}, "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	a := Answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body, Header: http.Header{}}
	// The client sees the gateway's own path for the call, never the
	// upstream's host (an absolute Location, an Azure api-version query).
	callID := callIDOf(resp.Header.Get("Location"))
	if callID != "" {
		a.Header.Set("Location", "/v1/realtime/calls/"+callID)
	}
	if resp.StatusCode != http.StatusCreated {
		callID = ""
	}
	return a, callID, nil
}

// callIDOf is the call id a Location header names (its path's last
// segment: never its query), "" when there is none that is an id.
func callIDOf(loc string) string {
	u, err := url.Parse(loc)
	if err != nil || u.Path == "" {
		return ""
	}
	id := path.Base(u.Path)
	if !protocol.ValidID(id) {
		return ""
	}
	return id
}
