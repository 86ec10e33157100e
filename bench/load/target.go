package load

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// DefaultPath is added when the target names only a host (and port).
const DefaultPath = "/v1/realtime"

// BuildURL turns the -host flag into the WebSocket URL calls dial.
//
// host may be "host", "host:port", "host:port/path" or a full ws:// or wss://
// URL. Without a scheme, wss is used unless insecure is set (then plain ws).
// A full URL's scheme wins over insecure. An empty path (or "/") becomes
// /v1/realtime. model is added as ?model= unless the URL already selects a
// session with model, call_id or intent.
func BuildURL(host string, insecure bool, model string) (string, error) {
	return BuildURLFor(ProtocolRealtime, host, insecure, model)
}

// BuildURLFor is BuildURL for protocol p. A Live target's empty path becomes
// /v1/live/sessions, a Gemini target's AI Studio's Live path (GeminiPath);
// neither gets a model in its query (Live names it in session.start,
// Gemini in setup).
func BuildURLFor(p Protocol, host string, insecure bool, model string) (string, error) {
	host = strings.TrimSpace(host)
	if host == "" {
		return "", errors.New("target: empty host")
	}
	raw := host
	if !strings.Contains(host, "://") {
		scheme := "wss"
		if insecure {
			scheme = "ws"
		}
		raw = scheme + "://" + host
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("target %q: %w", host, err)
	}
	switch u.Scheme {
	case "ws", "wss":
	default:
		return "", fmt.Errorf("target %q: unsupported scheme %q (use ws:// or wss://)", host, u.Scheme)
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("target %q: missing host name", host)
	}
	if p := u.Port(); p != "" {
		if _, err := net.LookupPort("tcp", p); err != nil {
			return "", fmt.Errorf("target %q: bad port %q", host, p)
		}
	}
	if u.User != nil {
		return "", fmt.Errorf("target %q: user info in the URL is not supported; use -key", u.Redacted())
	}
	switch p {
	case ProtocolLive, ProtocolGemini:
		if u.Path == "" || u.Path == "/" {
			u.Path = LivePath
			if p == ProtocolGemini {
				u.Path = GeminiPath
			}
		}
		u.Fragment = ""
		return u.String(), nil
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = DefaultPath
	}
	q := u.Query()
	if q.Get("model") == "" && q.Get("call_id") == "" && q.Get("intent") == "" {
		if model == "" {
			return "", fmt.Errorf("target %q: no model (set -m)", host)
		}
		q.Set("model", model)
		u.RawQuery = q.Encode()
	}
	u.Fragment = ""
	return u.String(), nil
}
