package load

import (
	"fmt"
	"net/url"
	"strings"
)

// FailureExample is the first failure of one class in a run, with a hint at
// what to change when the class has a usual cause.
type FailureExample struct {
	Class  string
	Count  int
	Detail string // the first failing call's detail
	Hint   string // "" when there is nothing likely to suggest
}

// FirstFailures returns one example per failure class, most frequent class
// first, for the run's samples against target (the ws:// or wss:// URL).
func FirstFailures(target string, samples []Sample) []FailureExample {
	first := map[string]string{}
	counts := map[string]int{}
	for _, s := range samples {
		if s.Failure == "" { // also a held session, which stops at PhaseSession
			continue
		}
		if _, ok := first[s.Failure]; !ok {
			first[s.Failure] = s.Detail
		}
		counts[s.Failure]++
	}
	out := make([]FailureExample, 0, len(counts))
	for _, class := range FailureClasses(counts) {
		out = append(out, FailureExample{Class: class, Count: counts[class], Detail: first[class],
			Hint: Hint(target, class, first[class])})
	}
	return out
}

// Hint suggests the usual fix for a failure of class with detail against
// target, or "". The commonest mistake is the scheme: wsbench dials wss://
// unless told -insecure, and `make run` serves plain ws://.
func Hint(target, class, detail string) string {
	secure := strings.HasPrefix(target, "wss://")
	host := target
	if u, err := url.Parse(target); err == nil {
		host = u.Host
	}
	d := strings.ToLower(detail)
	switch {
	case secure && (strings.Contains(d, "does not look like a tls handshake") || strings.Contains(d, "wrong version number") ||
		strings.Contains(d, "record overflow") || strings.Contains(d, "packet length too long")):
		return "the server answered the TLS handshake in plain text: it serves plain ws:// there; add -insecure (or use a ws:// URL)"
	case secure && class == "timeout_dial":
		return "no answer to the TLS handshake: if the server serves plain ws:// it waits for an HTTP request instead; " +
			"add -insecure (or use a ws:// URL). Otherwise it is unreachable or overloaded"
	case !secure && (class == "handshake_400" || strings.Contains(d, "malformed http response")):
		return "if the server serves TLS on that port, a plain request gets 400 or garbage: drop -insecure (or use a wss:// URL)"
	case !secure && class == "timeout_dial":
		return "no answer to the upgrade request: if the server serves TLS, drop -insecure (or use a wss:// URL). " +
			"Otherwise it is unreachable or overloaded"
	case strings.Contains(d, "connection refused"):
		return fmt.Sprintf("nothing listens on %s: is the gateway running? (make run listens on 127.0.0.1:4001)", host)
	case strings.Contains(d, "x509:") || strings.Contains(d, "certificate"):
		return "the server's certificate is not trusted: pass its CA with -ca <file.pem>"
	}
	return classHints[class]
}

// classHints are the fixes for the failure classes that say enough by
// themselves; Hint looks here after the scheme and the error text.
var classHints = map[string]string{
	"handshake_401": "the key was refused: pass the gateway's key with -key or WSBENCH_KEY (make run uses sk-local)",
	"handshake_403": "the key may not use this model: check -m and the key's models",
	"handshake_429": "a per-key limit refused it: lower -c or -rate, or raise MAX_SESSIONS_PER_KEY / CONNECT_RATE_PER_KEY",
	"handshake_503": "the gateway is at MAX_CONNECTIONS or draining",
	"handshake_404": "no realtime endpoint at that path: wsbench adds /v1/realtime to a bare host",
	"overload":      "more calls were due than -max-inflight allows: the target is slower than -rate (or -when-full delay to queue them)",
}
