package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"rtgate/mockai"
)

// These tests dial mockai over wss:// (its TLS server is crypto/tls with a
// fresh self-signed certificate per start) and look at what the session
// cache does as a user would notice it: which dials resume, and that a
// cached session never lets a server with an untrusted certificate in.

// startTLSMockAt starts mockai with TLS on addr ("127.0.0.1:0" for any port).
func startTLSMockAt(t *testing.T, addr string) *mockai.Server {
	t.Helper()
	m, err := mockai.Start(mockai.Config{TLS: true}, addr)
	if err != nil {
		t.Fatalf("starting mockai: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// trusting returns a root pool holding the mocks' certificates.
func trusting(t *testing.T, mocks ...*mockai.Server) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, m := range mocks {
		if !pool.AppendCertsFromPEM(m.CertPEM()) {
			t.Fatal("mockai's certificate is not valid PEM")
		}
	}
	return pool
}

func realtimeTarget(t *testing.T, m *mockai.Server) Target {
	t.Helper()
	u, err := url.Parse(m.BaseURL() + "/realtime?model=gpt-realtime")
	if err != nil {
		t.Fatal(err)
	}
	return Target{URL: u, Header: http.Header{"Authorization": {"Bearer sk-test"}}}
}

// dialResumed dials t and reports whether the TLS handshake resumed.
func dialResumed(t *testing.T, d *Dialer, tg Target) bool {
	t.Helper()
	c, err := d.Dial(t.Context(), tg)
	if err != nil {
		t.Fatalf("dial %s: %v", tg.URL.Host, err)
	}
	defer c.Endpoint.Close()
	return c.Resumed
}

func TestTLSResumption(t *testing.T) {
	cases := []struct {
		name         string
		noResumption bool
		want         []bool // Resumed, dial by dial
	}{
		{name: "on by default", want: []bool{false, true, true, true}},
		{name: "off", noResumption: true, want: []bool{false, false, false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := startTLSMockAt(t, "127.0.0.1:0")
			d := &Dialer{Timeout: 5 * time.Second, NoResumption: tc.noResumption,
				TLSConfig: &tls.Config{RootCAs: trusting(t, m)}}
			tg := realtimeTarget(t, m)
			wantResumed := uint64(0)
			for i, want := range tc.want {
				if got := dialResumed(t, d, tg); got != want {
					t.Fatalf("dial %d: resumed %v, want %v", i+1, got, want)
				}
				if want {
					wantResumed++
				}
			}
			total, resumed := d.TLSHandshakes()
			if total != uint64(len(tc.want)) || resumed != wantResumed {
				t.Fatalf("TLSHandshakes() = %d, %d; want %d, %d", total, resumed, len(tc.want), wantResumed)
			}
		})
	}
}

// TestTLSResumptionPerAddress alternates dials between two upstreams that
// share a server name (two ports of 127.0.0.1, as two deployments on one
// host would). crypto/tls keys its cache by server name alone: with one
// shared cache each upstream's ticket would replace the other's, and no dial
// would resume.
func TestTLSResumptionPerAddress(t *testing.T) {
	a, b := startTLSMockAt(t, "127.0.0.1:0"), startTLSMockAt(t, "127.0.0.1:0")
	d := &Dialer{Timeout: 5 * time.Second, TLSConfig: &tls.Config{RootCAs: trusting(t, a, b)}}
	ta, tb := realtimeTarget(t, a), realtimeTarget(t, b)
	steps := []struct {
		tg   Target
		want bool
	}{{ta, false}, {tb, false}, {ta, true}, {tb, true}, {ta, true}}
	for i, s := range steps {
		if got := dialResumed(t, d, s.tg); got != s.want {
			t.Fatalf("dial %d (%s): resumed %v, want %v", i+1, s.tg.URL.Host, got, s.want)
		}
	}
}

// TestTLSResumptionNeverSkipsVerification replaces the upstream behind an
// address the dialer holds a session for. A new server cannot decrypt the
// old one's ticket, so it gets a full handshake and its certificate is
// verified: an untrusted one fails the dial (every time, not just once),
// a trusted one succeeds without resuming and is resumed from then on.
func TestTLSResumptionNeverSkipsVerification(t *testing.T) {
	first := startTLSMockAt(t, "127.0.0.1:0")
	addr := first.Addr()
	tg := realtimeTarget(t, first)
	roots := trusting(t, first)
	d := &Dialer{Timeout: 5 * time.Second, TLSConfig: &tls.Config{RootCAs: roots}}
	dialResumed(t, d, tg)
	if !dialResumed(t, d, tg) {
		t.Fatal("second dial to the same upstream did not resume")
	}

	// Another server on the same address, with a certificate nobody trusts.
	_ = first.Close()
	impostor := startTLSMockAt(t, addr)
	for i := range 2 {
		c, err := d.Dial(t.Context(), tg)
		if err == nil {
			c.Endpoint.Close()
			t.Fatalf("dial %d to an untrusted server holding the address succeeded (resumed %v)", i+1, c.Resumed)
		}
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Fatalf("dial %d to an untrusted server: %v, want a certificate verification error", i+1, err)
		}
	}

	// A trusted replacement (a redeployed upstream with a new certificate).
	_ = impostor.Close()
	next := startTLSMockAt(t, addr)
	if !roots.AppendCertsFromPEM(next.CertPEM()) {
		t.Fatal("bad PEM")
	}
	// The dialer's config was made on the first dial and shares the pool.
	if dialResumed(t, d, tg) {
		t.Fatal("dial to a new server resumed a session of the old one")
	}
	if !dialResumed(t, d, tg) {
		t.Fatal("second dial to the new server did not resume")
	}
}
