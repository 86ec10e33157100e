package guardrail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// apiPath is the Generic Guardrail API's endpoint under api_base.
const apiPath = "/beta/litellm_basic_guardrail_api"

// genericAPI calls a service implementing LiteLLM's Generic Guardrail API:
//
//	POST {api_base}/beta/litellm_basic_guardrail_api
//	{"input_type": "request"|"response", "litellm_call_id": ..., "litellm_trace_id": ...,
//	 "texts": [...], "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}],
//	 "request_data": {"user_api_key_alias": ...}, "additional_provider_specific_params": {...},
//	 "model": ...}
//
// answered by {"action": "BLOCKED"|"NONE"|"GUARDRAIL_INTERVENED",
// "blocked_reason": ..., "texts": [...]}. tool_calls is sent only when there
// are some, model only when known.
//
// Where LiteLLM is lenient this is strict, because a guardrail that passes
// what it did not understand is a bypass: a missing or unknown action (which
// LiteLLM treats as NONE) is an error and goes to on_error; actions are
// compared case-insensitively.
type genericAPI struct {
	url     string
	client  *http.Client
	headers http.Header
	params  json.RawMessage // additional_provider_specific_params, encoded once
}

func newGenericAPI(s Spec, client *http.Client) (*genericAPI, error) {
	if strings.TrimSpace(s.APIBase) == "" {
		return nil, errors.New("generic_guardrail_api needs litellm_params.api_base")
	}
	u, err := url.Parse(strings.TrimSpace(s.APIBase))
	if err != nil {
		// Not err, not even its cause: both quote parts of the URL, which
		// may carry a token.
		return nil, errors.New("litellm_params.api_base is not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("litellm_params.api_base is not an http:// or https:// URL")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if !strings.HasSuffix(u.Path, apiPath) {
		u.Path += apiPath
	}
	a := &genericAPI{url: u.String(), headers: http.Header{}}
	a.headers.Set("Content-Type", "application/json")
	for k, v := range s.Headers {
		if !validHeaderName(k) {
			return nil, fmt.Errorf("litellm_params.headers: %q is not a valid header name", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, fmt.Errorf("litellm_params.headers: the value of %q has a line break or NUL", k)
		}
		a.headers.Set(k, v)
	}
	if s.APIKey != "" {
		if strings.ContainsAny(s.APIKey, "\r\n\x00") {
			return nil, errors.New("litellm_params.api_key has a line break or NUL")
		}
		a.headers.Set("x-api-key", s.APIKey)
	}
	params := s.AdditionalParams
	if params == nil {
		params = map[string]any{}
	}
	if a.params, err = json.Marshal(params); err != nil {
		return nil, fmt.Errorf("litellm_params.additional_provider_specific_params: %w", err)
	}
	if client == nil {
		client = defaultClient()
	}
	c := *client // a copy: the caller's client keeps following redirects
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	a.client = &c
	return a, nil
}

// defaultClient keeps more idle connections to the service than Go's
// default two, since every session's checks go to the same host at once.
func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t}
}

type apiRequest struct {
	InputType        string          `json:"input_type"`
	CallID           string          `json:"litellm_call_id"`
	TraceID          string          `json:"litellm_trace_id"`
	Texts            []string        `json:"texts"`
	ToolCalls        []apiToolCall   `json:"tool_calls,omitempty"`
	RequestData      apiRequestData  `json:"request_data"`
	AdditionalParams json.RawMessage `json:"additional_provider_specific_params"`
	Model            string          `json:"model,omitempty"`
}

type apiRequestData struct {
	UserAPIKeyAlias string `json:"user_api_key_alias,omitempty"`
}

type apiToolCall struct {
	ID       string      `json:"id"`
	Type     string      `json:"type"`
	Function apiFunction `json:"function"`
}

type apiFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type apiResponse struct {
	Action        string   `json:"action"`
	BlockedReason string   `json:"blocked_reason"`
	Texts         []string `json:"texts"`
}

func (a *genericAPI) body(in Input) ([]byte, error) {
	r := apiRequest{
		InputType:        "request",
		CallID:           in.CallID,
		TraceID:          in.TraceID,
		Texts:            in.Texts,
		RequestData:      apiRequestData{UserAPIKeyAlias: in.KeyAlias},
		AdditionalParams: a.params,
		Model:            in.Model,
	}
	if in.Response {
		r.InputType = "response"
	}
	if r.TraceID == "" {
		r.TraceID = in.CallID
	}
	if r.Texts == nil {
		r.Texts = []string{}
	}
	for _, c := range in.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, apiToolCall{ID: c.ID, Type: "function",
			Function: apiFunction{Name: c.Name, Arguments: c.Arguments}})
	}
	return json.Marshal(r)
}

// check asks the service once. Its errors never hold the URL (which may
// carry a token) nor a header value, and only the status of a non-2xx
// answer, not its body.
func (a *genericAPI) check(ctx context.Context, in Input) (Verdict, error) {
	body, err := a.body(in)
	if err != nil {
		return Verdict{}, fmt.Errorf("encoding the request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(body))
	if err != nil {
		return Verdict{}, fmt.Errorf("making the request: %w", withoutURL(err))
	}
	req.Header = a.headers.Clone()
	resp, err := a.client.Do(req)
	if err != nil {
		return Verdict{}, fmt.Errorf("calling the guardrail service: %w", withoutURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Drain a little so the connection can be reused; the body is not
		// reported (it may echo what was sent).
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return Verdict{}, fmt.Errorf("guardrail service answered HTTP %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return Verdict{}, fmt.Errorf("reading the guardrail service's answer: %w", err)
	}
	if len(data) > MaxResponseBytes {
		return Verdict{}, fmt.Errorf("guardrail service's answer is over %d bytes", MaxResponseBytes)
	}
	var r apiResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return Verdict{}, fmt.Errorf("guardrail service's answer is not Generic Guardrail API JSON: %w", err)
	}
	switch strings.ToUpper(strings.TrimSpace(r.Action)) {
	case "BLOCKED":
		reason := clip(strings.TrimSpace(r.BlockedReason), maxReasonBytes)
		if reason == "" {
			reason = "blocked by the guardrail service"
		}
		return Verdict{Blocked: true, Reason: reason}, nil
	case "NONE":
		return Verdict{}, nil
	case "GUARDRAIL_INTERVENED":
		return Verdict{Intervened: true, Texts: r.Texts}, nil
	case "":
		return Verdict{}, errors.New(`guardrail service's answer has no "action"`)
	default:
		return Verdict{}, fmt.Errorf("guardrail service answered unknown action %q", clip(r.Action, 64))
	}
}

// withoutURL strips a *url.Error down to its cause: its message quotes the
// request URL, which may carry credentials.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// redactURL is raw without user info and query, for printing a Spec.
func redactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return redactedValue
	}
	if u.User != nil {
		u.User = url.User(redactedValue)
	}
	if u.RawQuery != "" {
		u.RawQuery = redactedValue
	}
	return u.String()
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// validHeaderName reports whether k is an RFC 9110 token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
