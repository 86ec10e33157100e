package api

// The client-secret endpoints (POST /v1/realtime/client_secrets, POST
// /v1/realtime/translations/client_secrets) and the authentication of a
// request by key or client secret; the secrets themselves are
// server/apps's.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"rtgate/server/admission"
	"rtgate/server/apps"
	"rtgate/server/frontdoor"
	"rtgate/server/routes"
)

// secretTypeTranslation is the Claims.Type of a translation client secret.
const secretTypeTranslation = "translation"

// clientSecretRequest is the GA request body.
type clientSecretRequest struct {
	ExpiresAfter *struct {
		Anchor  string `json:"anchor"`
		Seconds *int   `json:"seconds"`
	} `json:"expires_after"`
	Session json.RawMessage `json:"session"`
}

// mintClientSecret answers POST /v1/realtime/client_secrets and POST
// /v1/realtime/translations/client_secrets.
func (e *Endpoints) mintClientSecret(req *http.Request, body []byte) Answer {
	table := e.deps.Routes()
	creds := frontdoor.ReadCredentials(req.Header)
	key, ok := table.Authenticate(creds.Key)
	if !ok {
		return errorAnswer(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"Incorrect or missing API key. Mint client secrets with a gateway key as Authorization: Bearer.")
	}
	return e.MintSecretFor(req.Context(), table, key, body, apiPaths[req.URL.Path] == "translation_secrets")
}

// MintSecretFor mints a client secret for key, already authenticated (the
// admin playground mints for the master key without holding it in clear);
// translation: for a Realtime translation session.
func (e *Endpoints) MintSecretFor(ctx context.Context, table *routes.Table, key *routes.ClientKey, body []byte, translation bool) Answer {
	var r clientSecretRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &r); err != nil {
			return errorAnswer(http.StatusBadRequest, "invalid_request_error", "invalid_json",
				"The request body is not valid JSON: "+err.Error())
		}
	}
	ttl := apps.SecretDefaultTTL
	if ea := r.ExpiresAfter; ea != nil {
		if ea.Anchor != "" && ea.Anchor != "created_at" {
			return paramError("expires_after.anchor", "Invalid value for 'expires_after.anchor': expected 'created_at'.")
		}
		if ea.Seconds != nil {
			ttl = *ea.Seconds
		}
	}
	if ttl < apps.SecretMinTTL || ttl > apps.SecretMaxTTL {
		return paramError("expires_after.seconds", fmt.Sprintf(
			"Invalid 'expires_after.seconds': %d; expected a number of seconds from %d to %d.", ttl, apps.SecretMinTTL, apps.SecretMaxTTL))
	}
	session := map[string]any{}
	if len(r.Session) > 0 && string(r.Session) != "null" {
		if err := json.Unmarshal(r.Session, &session); err != nil || session == nil {
			return paramError("session", "Invalid 'session': expected an object.")
		}
	}
	typ, herr := secretType(session, translation)
	if herr != nil {
		return refusedAnswer(herr)
	}
	session["type"] = typ
	ask := admission.GroupAsk{Transcription: typ == "transcription"}
	if translation {
		ask.Protocol = routes.ProtocolTranslation
	}
	if ask.Transcription {
		ask.Model = transcriptionModelOf(session)
	} else {
		ask.Model, _ = session["model"].(string)
	}
	group, herr := e.deps.PickGroup(table, key, ask)
	if herr != nil {
		return refusedAnswer(herr)
	}
	if typ != "transcription" {
		session["model"] = group
	}
	applied := session
	if translation {
		// A translation session's type and model are fixed at its
		// creation: the session.update that applies the secret carries
		// only its settings.
		applied = maps.Clone(session)
		delete(applied, "type")
	}
	cfg, _ := json.Marshal(applied) // map keys sorted: the digest is stable
	now := time.Now()
	c := apps.Claims{Version: 1, ID: apps.RandomID(), Key: key.Name, Group: group, Type: typ,
		IssuedAt: now.Unix(), Expires: now.Add(time.Duration(ttl) * time.Second).Unix(), Digest: apps.DigestOf(cfg)}
	inline := c
	inline.Config = apps.Deflate(cfg)
	token := e.deps.Secrets.Sign(inline)
	if len(token) > apps.MaxInlineSecret {
		where, err := e.deps.Secrets.Keep(ctx, c.ID, cfg, time.Duration(ttl)*time.Second)
		if err != nil {
			e.deps.Log.Error("client secret not minted", "key", key.Name, "err", err)
			return errorAnswer(http.StatusServiceUnavailable, "server_error", "secret_store_unavailable",
				"The session config is too large for a stateless secret and could not be stored; try again.")
		}
		c.Store = where
		token = e.deps.Secrets.Sign(c)
	}
	e.deps.Log.Info("client secret minted", "key", key.Name, "model_group", group, "type", typ, "secret_id", c.ID,
		"expires_in_s", ttl, "config_in", configPlace(c.Store), "token_bytes", len(token))
	out := map[string]any{}
	for k, v := range session {
		out[k] = v
	}
	out["object"] = "realtime.session"
	if translation {
		out["object"] = "realtime.translation_session"
	}
	out["expires_at"] = c.Expires
	return jsonAnswer(http.StatusOK, map[string]any{"value": token, "expires_at": c.Expires, "session": out})
}

// secretType is a secret's session.type: realtime (the default) or
// transcription on /v1/realtime/client_secrets, translation (the default
// and only) on the translation route.
func secretType(session map[string]any, translation bool) (string, *frontdoor.Refusal) {
	typ, _ := session["type"].(string)
	bad := func(want string) *frontdoor.Refusal {
		return &frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_value",
			Message: "Invalid value for 'session.type': expected " + want + ".", Param: "session.type"}
	}
	switch {
	case translation && (typ == "" || typ == secretTypeTranslation):
		if m, _ := session["model"].(string); m == "" {
			return "", &frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "missing_required_parameter",
				Message: "Missing required parameter: 'session.model'.", Param: "session.model"}
		}
		return secretTypeTranslation, nil
	case translation:
		return "", bad("'translation'")
	case typ == "":
		return "realtime", nil
	case typ == "realtime" || typ == "transcription":
		return typ, nil
	}
	return "", bad("'realtime' or 'transcription'")
}

// transcriptionModelOf reads session.audio.input.transcription.model.
func transcriptionModelOf(session map[string]any) string {
	audio, _ := session["audio"].(map[string]any)
	input, _ := audio["input"].(map[string]any)
	tr, _ := input["transcription"].(map[string]any)
	m, _ := tr["model"].(string)
	return m
}

func configPlace(store string) string {
	if store == apps.StoreToken {
		return "token"
	}
	return store
}

func paramError(param, msg string) Answer {
	return refusedAnswer(&frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_value",
		Message: msg, Param: param})
}

// Authenticate finds who a request is for: a gateway key, or a client
// secret standing for the key that minted it (which the session then
// counts against). A refused secret is a 401 that says why, never what it
// was. It is here, beside the minting, and exported for the server's
// WebSocket connects, which present the same keys and secrets.
func (e *Endpoints) Authenticate(table *routes.Table, presented string) (*routes.ClientKey, *apps.Grant, *frontdoor.Refusal) {
	if key, ok := table.Authenticate(presented); ok {
		return key, nil, nil
	}
	unauthorized := func(msg string) *frontdoor.Refusal {
		return &frontdoor.Refusal{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key", Message: msg}
	}
	if !strings.HasPrefix(presented, apps.SecretPrefix) {
		return nil, nil, unauthorized("Incorrect or missing API key. Send it as Authorization: Bearer, api-key, or the openai-insecure-api-key subprotocol.")
	}
	g, err := e.deps.Secrets.Verify(presented, time.Now())
	if err != nil {
		e.deps.Log.Info("client secret refused", "reason", err.Error())
		return nil, nil, unauthorized(err.Error())
	}
	key := table.KeyNamed(g.Claims.Key)
	if key == nil || !key.Allows(g.Claims.Group) {
		e.deps.Log.Info("client secret refused", "reason", "the issuing key no longer exists or may not use the model",
			"key", g.Claims.Key, "secret_id", g.Claims.ID)
		return nil, nil, unauthorized("The key that minted this client secret is no longer valid for its model.")
	}
	return key, g, nil
}
