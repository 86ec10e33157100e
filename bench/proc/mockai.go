package proc

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Upstream is how mockai serves the benchmarks: over TLS (wss://), as OpenAI
// and Azure do and so the default, or plain ws:// for comparison.
type Upstream string

const (
	UpstreamTLS   Upstream = "tls"
	UpstreamPlain Upstream = "plain"
)

// ParseUpstream reads an -upstream flag value.
func ParseUpstream(s string) (Upstream, error) {
	switch u := Upstream(strings.TrimSpace(s)); u {
	case UpstreamTLS, UpstreamPlain:
		return u, nil
	}
	return "", fmt.Errorf("upstream %q: want tls (wss://, the default) or plain (ws://)", s)
}

// Scheme is the WebSocket scheme clients of this upstream dial.
func (u Upstream) Scheme() string {
	switch u {
	case UpstreamTLS:
		return "wss"
	default:
		return "ws"
	}
}

// Describe names the upstream for a report heading.
func (u Upstream) Describe() string {
	switch u {
	case UpstreamTLS:
		return "wss:// (TLS)"
	default:
		return "plain ws://"
	}
}

// Mockai is a running mockai.
type Mockai struct {
	*Proc
	Upstream Upstream
	Base     string // what /realtime is appended to: ws://127.0.0.1:port/v1 or wss://...
	Addr     string // 127.0.0.1:port
	// CAFile is mockai's self-signed certificate (PEM) with TLS, "" without:
	// the gateway trusts it through UPSTREAM_CA_FILE, peers through their
	// own CA settings.
	CAFile string
	tls    *tls.Config
	http   *http.Client
}

const mockaiReadyPrefix = "mockai listening on "

// StartMockai runs mockai with args on a kernel-chosen loopback port, over
// TLS or not as upstream says, and returns it once it prints its ready
// line. Its log (and, with TLS, its certificate) go into dir.
func StartMockai(ctx context.Context, bin string, upstream Upstream, args []string, dir string, wait time.Duration) (*Mockai, error) {
	args = append([]string{"-addr", "127.0.0.1:0"}, args...)
	caFile := ""
	if upstream == UpstreamTLS {
		caFile = filepath.Join(dir, "mockai-ca.pem")
		args = append(args, "-tls", "-cert-out", caFile)
	}
	pr, pw := io.Pipe()
	p, err := Start(Spec{Name: "mockai", Bin: bin, Args: args, LogPath: filepath.Join(dir, "mockai.log"), Stdout: pw})
	if err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		// The first line is the address; the rest goes to the log, so the
		// child never blocks on a full pipe.
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if !sent && strings.HasPrefix(line, mockaiReadyPrefix) {
				ready <- strings.TrimSpace(strings.TrimPrefix(line, mockaiReadyPrefix))
				sent = true
				continue
			}
			fmt.Fprintln(p.log, line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		<-p.exited
		pw.Close()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case base := <-ready:
		m, err := newMockai(p, upstream, base, caFile)
		if err != nil {
			p.Stop(2 * time.Second)
			return nil, err
		}
		return m, nil
	case <-p.exited:
		return nil, p.ExitError()
	case <-ctx.Done():
		p.Stop(2 * time.Second)
		return nil, ctx.Err()
	case <-t.C:
		p.Stop(2 * time.Second)
		return nil, fmt.Errorf("mockai printed no %q line within %v", mockaiReadyPrefix, wait)
	}
}

func newMockai(p *Proc, upstream Upstream, base, caFile string) (*Mockai, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("mockai ready line: base URL %q: %v", base, err)
	}
	if want := upstream.Scheme(); u.Scheme != want {
		return nil, fmt.Errorf("mockai serves %s://, want %s://", u.Scheme, want)
	}
	m := &Mockai{Proc: p, Upstream: upstream, Base: base, Addr: u.Host, CAFile: caFile}
	transport := &http.Transport{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("mockai certificate: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, errors.New("mockai certificate: no PEM certificate in " + caFile)
		}
		m.tls = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		transport.TLSClientConfig = m.tls
	}
	m.http = &http.Client{Timeout: 5 * time.Second, Transport: transport}
	return m, nil
}

// TLSConfig trusts mockai's certificate (nil for a plain upstream): what a
// client dialing mockai directly needs.
func (m *Mockai) TLSConfig() *tls.Config {
	if m.tls == nil {
		return nil
	}
	return m.tls.Clone()
}

// RealtimeURL is the endpoint a client dials to reach mockai directly.
func (m *Mockai) RealtimeURL() string { return m.Base + "/realtime?model=gpt-realtime" }

// LiveURL is mockai's GPT-Live endpoint (the model comes in session.start).
func (m *Mockai) LiveURL() string { return m.Base + "/live/sessions" }

// MockStats are the counters mockai serves at GET /mock/stats.
type MockStats struct {
	Upgrades  int64 `json:"upgrades"`
	Rejected  int64 `json:"rejected"`
	Active    int64 `json:"active"`
	Sessions  int64 `json:"sessions"`
	FramesIn  int64 `json:"frames_in"`
	FramesOut int64 `json:"frames_out"`
}

// Stats reads mockai's counters.
func (m *Mockai) Stats(ctx context.Context) (MockStats, error) {
	var st MockStats
	scheme := "http"
	if m.tls != nil {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+m.Addr+"/mock/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return st, fmt.Errorf("mockai stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("mockai stats: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("mockai stats: %w", err)
	}
	return st, nil
}
