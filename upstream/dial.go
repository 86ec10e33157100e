package upstream

// Dialing blocks: the TCP connect, the TLS handshake and the WebSocket upgrade
// run in the caller's goroutine (a handshake cannot resume after a would-block
// the way TLS reads can). Once the upgrade is done the socket switches to
// event-driven reads and no goroutine stays with it.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"

	"rtgate/poller"
)

// Dialer opens upstream WebSocket connections.
type Dialer struct {
	// TLSConfig is used for wss:// upstreams; nil means the system roots.
	TLSConfig *tls.Config
	// Timeout bounds connect, TLS handshake and upgrade together.
	Timeout time.Duration
	// WriteTimeout bounds each write to the upstream once relaying: a write
	// that cannot finish in this time closes the session.
	WriteTimeout time.Duration
	// CloseTimeout bounds how long a socket the gateway closes (a retired
	// warm socket) may take to answer the close frame and close its TCP
	// connection: the upstream closes first (RFC 6455 7.1.1), so that
	// TIME_WAIT stays off the gateway's ephemeral ports. 0 means 2 s.
	CloseTimeout time.Duration
	// SourceIPs, if set, are the local addresses upstream sockets are bound
	// to, in turn. One source address reaches one upstream address over at
	// most the ephemeral port range (about 28k ports by default); k source
	// addresses reach k times that.
	SourceIPs []net.IP
	// NoResumption turns off TLS session resumption for upstream dials
	// (see tlsConfigFor); on by default.
	NoResumption bool

	next atomic.Uint64 // round-robin position in SourceIPs

	// tlsConfigs holds one *tls.Config per upstream address (host:port),
	// built on that address's first wss:// dial: see tlsConfigFor.
	tlsConfigs sync.Map
	// handshakes counts the upstream TLS handshakes that completed, and
	// resumed those of them that resumed an earlier session.
	handshakes, resumed atomic.Uint64

	// afterHandshake, in tests, runs between the handshake and the dial's
	// check of its deadline: the window a deadline's Close fell into.
	afterHandshake func(netpoll.Connection)
}

// TLSHandshakes reports how many upstream TLS handshakes completed since the
// dialer was made, and how many of them resumed an earlier session (no
// certificate sent or verified, cheaper on both sides).
func (d *Dialer) TLSHandshakes() (total, resumed uint64) {
	return d.handshakes.Load(), d.resumed.Load()
}

// Target is one upstream connect: the full ws:// or wss:// URL with its query,
// and the headers to send (the upstream's credentials among them).
type Target struct {
	URL    *url.URL
	Header http.Header
	// Authorize, when set, adds a credential that cannot be fixed in
	// Header because it expires (Vertex AI's OAuth access token) to the
	// headers of one dial. Dial calls it on every dial, pool refills
	// included, with the dial's context (so a token fetch is bounded by
	// the dial's deadline) and a copy of Header, before it connects; an
	// error fails the dial. It must be safe for concurrent use. It is not
	// part of the pool's key (Key): to the pool, targets that differ only
	// in it are interchangeable.
	Authorize func(ctx context.Context, h http.Header) error
}

// Upgraded is an upstream socket past its WebSocket upgrade: the socket's
// one Endpoint, which the warm pool and then a session own in turn, and the
// bytes that came with the 101.
type Upgraded struct {
	Endpoint *poller.Endpoint
	// Preface holds bytes the upstream sent right behind its 101 response,
	// which the handshake read along with it. The upstream sends
	// session.created unprompted, so this is often where it is.
	Preface []byte
	// Resumed is true when the TLS handshake resumed an earlier session.
	Resumed bool
}

// Error is a failed dial. Status is the HTTP status the upstream answered
// the upgrade with, or 0 if it never answered one.
type Error struct {
	Status int
	Err    error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("upstream answered the upgrade with HTTP %d", e.Status)
	}
	return "upstream dial: " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// LoadCAFile returns the system roots plus the PEM certificates in path, for
// upstreams with a private CA (mockai -tls in tests).
func LoadCAFile(path string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading CA file: %w", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// Dial connects to t and completes the WebSocket upgrade.
func (d *Dialer) Dial(ctx context.Context, t Target) (*Upgraded, error) {
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	if t.Authorize != nil {
		// A copy: pooled targets are dialed again and again, at once.
		h := t.Header.Clone()
		if h == nil {
			h = http.Header{}
		}
		if err := t.Authorize(ctx, h); err != nil {
			return nil, &Error{Err: fmt.Errorf("upstream credentials: %w", err)}
		}
		t.Header = h
	}
	secure := t.URL.Scheme == "wss"
	addr := hostPort(t.URL, secure)

	timeout := d.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	conn, err := d.dialTCP(ctx, addr, timeout)
	if err != nil {
		return nil, &Error{Err: err}
	}
	// Past the deadline the socket is shut down both ways, which fails
	// whatever read or write the handshake is blocked in (netpoll wakes it
	// with the hang-up). That is the handshake's only read timeout:
	// netpoll's own (SetReadTimeout) makes a timer on the first wait and
	// keeps it in the connection for its life (~250 B per idle upstream
	// socket).
	//
	// Shut down, not closed: netpoll's Close from another goroutine frees
	// the connection's input buffer while the handshake may be reading
	// from it (a nil pointer in netpoll's LinkBuffer.Next crashed a gateway
	// whose dials timed out under load). Only this goroutine closes the
	// socket, below, once the handshake has returned; fdMu keeps a late
	// shutdown off a descriptor number that Close has given back. A
	// shutdown also keeps the inline invariant (package poller's doc) however
	// late it lands. Once the handshake is done, a deadline that already
	// fired fails the dial.
	var fdMu sync.Mutex
	fdOpen := true
	stop := context.AfterFunc(ctx, func() {
		fdMu.Lock()
		defer fdMu.Unlock()
		if fdOpen {
			shutdown(conn)
		}
	})
	defer stop()
	_ = conn.SetWriteTimeout(d.WriteTimeout)

	ep, preface, resumed, err := d.handshake(conn, t, addr, secure)
	if d.afterHandshake != nil {
		d.afterHandshake(conn)
	}
	if err == nil && !stop() {
		err = fmt.Errorf("deadline passed as the handshake completed: %w", ctx.Err())
	}
	if err != nil {
		fdMu.Lock()
		fdOpen = false
		fdMu.Unlock()
		_ = conn.Close()
		if ctx.Err() != nil && !errors.As(err, new(*Error)) {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		var ue *Error
		if errors.As(err, &ue) {
			return nil, ue
		}
		return nil, &Error{Err: err}
	}
	// From here on reads are event-driven and never wait.
	return &Upgraded{Endpoint: ep, Preface: preface, Resumed: resumed}, nil
}

func (d *Dialer) handshake(conn netpoll.Connection, t Target, addr string, secure bool) (*poller.Endpoint, []byte, bool, error) {
	nb := poller.NewNBConn(conn)
	var rw io.ReadWriter = nb
	var tc *tls.Conn
	if secure {
		tc = tls.Client(nb, d.tlsConfigFor(t.URL, addr))
		// Handshake, not HandshakeContext: on ctx's end HandshakeContext
		// closes the connection from a goroutine of its own, and the
		// handshake's writes go to the descriptor number by hand
		// (poller.NBConn), not through netpoll's lock against Close, so
		// a ClientHello could land on the socket that took the number
		// next: a client's, accepted in the same moment (seen once in CI,
		// a test client reading a ClientHello as its 101). Dial's
		// shutdown enforces ctx's deadline instead, and only Dial closes.
		if err := tc.Handshake(); err != nil {
			return nil, nil, false, fmt.Errorf("TLS handshake: %w", err)
		}
		rw = tc
	}
	status := 0
	wd := ws.Dialer{
		Header:        ws.HandshakeHeaderHTTP(t.Header),
		OnStatusError: func(code int, _ []byte, _ io.Reader) { status = code },
	}
	br, _, err := wd.Upgrade(rw, t.URL)
	if err != nil {
		if status != 0 {
			return nil, nil, false, &Error{Status: status, Err: err}
		}
		return nil, nil, false, fmt.Errorf("websocket upgrade: %w", err)
	}
	preface := drain(br)

	if tc != nil {
		resumed := tc.ConnectionState().DidResume
		d.handshakes.Add(1)
		if resumed {
			d.resumed.Add(1)
		}
		ep := poller.NewTLSEndpoint(nb, tc)
		ep.MarkDialed()
		return ep, preface, resumed, nil
	}
	nb.SetBlocking(false)
	ep := poller.NewPlainEndpoint(conn)
	ep.MarkDialed()
	return ep, preface, false, nil
}

// tlsConfigFor returns the TLS configuration for dials to addr, made once per
// address from TLSConfig and then shared by every connection to it (a
// tls.Conn keeps a pointer to its config for its life, so a clone per dial
// cost each idle upstream socket a copy). Each address gets:
//
//   - ServerName from the URL, unless TLSConfig names one;
//   - its own session cache, so that dials resume the TLS session of an
//     earlier one (TLS 1.3 PSK with a fresh key exchange): no certificate is
//     sent, signed or verified, which makes the warm pool's refills and fresh
//     dials cheaper on both sides. crypto/tls keys cached sessions by server
//     name only; one cache per address keeps deployments that share a name
//     (two ports of one host) from overwriting each other's tickets. A
//     resumed session is only used while its certificate, checked again
//     against RootCAs, the name and the time at each resumption, is still
//     valid; a server that cannot decrypt the ticket (another server under
//     the same address) gets a full handshake with full verification.
//   - DynamicRecordSizingDisabled: crypto/tls would otherwise cut the first
//     records of each connection to ~1.2 KB, growing by that much per record,
//     and each record is a write on the socket; the endpoint already gathers
//     a read's frames into one write.
//
// A config from TLSConfig with its own ClientSessionCache keeps that cache
// (shared across addresses, keyed by server name, as crypto/tls does).
func (d *Dialer) tlsConfigFor(u *url.URL, addr string) *tls.Config {
	if c, ok := d.tlsConfigs.Load(addr); ok {
		return c.(*tls.Config)
	}
	cfg := &tls.Config{}
	if d.TLSConfig != nil {
		cfg = d.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	cfg.DynamicRecordSizingDisabled = true
	if d.NoResumption {
		cfg.ClientSessionCache = nil
	} else if cfg.ClientSessionCache == nil {
		// One entry: crypto/tls keeps one session per server name, and
		// this cache serves one address (and so one name).
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	c, _ := d.tlsConfigs.LoadOrStore(addr, cfg)
	return c.(*tls.Config)
}

// dialTCP connects a netpoll socket to addr, from the next source address
// when SourceIPs is set. A connect netpoll reports closed before it
// completed is tried once more at once. Under the race detector netpoll
// (v0.7.2) finds a socket's handler by its descriptor number, so a hang-up
// queued for a socket just closed reaches a new socket given the same
// number: a rollover closes the old upstream and dials the new one in the
// same moment, and the test suite (run with -race) saw the fresh dial fail
// "closed by peer" (../shared/reactor-notes.md). A connect really refused
// reports the same error and fails again as fast: the retry costs one SYN.
func (d *Dialer) dialTCP(ctx context.Context, addr string, timeout time.Duration) (netpoll.Connection, error) {
	c, err := d.connect(ctx, addr, timeout)
	if errors.Is(err, netpoll.ErrConnClosed) && ctx.Err() == nil {
		if c, err = d.connect(ctx, addr, timeout); err != nil {
			err = fmt.Errorf("%w (tried twice)", err)
		}
	}
	return c, err
}

// connect is one connect of dialTCP's.
func (d *Dialer) connect(ctx context.Context, addr string, timeout time.Duration) (netpoll.Connection, error) {
	if len(d.SourceIPs) == 0 {
		return netpoll.DialConnection("tcp", addr, timeout)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return nil, err
	}
	src := d.SourceIPs[d.next.Add(1)%uint64(len(d.SourceIPs))]
	var firstErr error
	for _, ip := range ips {
		if (ip.IP.To4() == nil) != (src.To4() == nil) {
			continue // a source address of the other family cannot reach it
		}
		c, err := netpoll.DialTCP(ctx, "tcp",
			&netpoll.TCPAddr{TCPAddr: net.TCPAddr{IP: src}},
			&netpoll.TCPAddr{TCPAddr: net.TCPAddr{IP: ip.IP, Port: pn, Zone: ip.Zone}})
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("no address of %s matches source address %s", host, src)
	}
	return nil, firstErr
}

// ParseSourceIPs reads a list of addresses and ranges, such as
// "127.0.0.2,127.0.0.5-127.0.0.8" (a range varies the last part only).
func ParseSourceIPs(v string) ([]net.IP, error) {
	var out []net.IP
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		from, to, isRange := strings.Cut(part, "-")
		a := net.ParseIP(strings.TrimSpace(from)).To4()
		if !isRange {
			ip := net.ParseIP(part)
			if ip == nil {
				return nil, fmt.Errorf("%q is not an IP address", part)
			}
			out = append(out, ip)
			continue
		}
		b := net.ParseIP(strings.TrimSpace(to)).To4()
		if a == nil || b == nil || !a[:3:3].Equal(b[:3:3]) || a[3] > b[3] {
			return nil, fmt.Errorf("%q is not a range of IPv4 addresses differing in the last part", part)
		}
		for i := int(a[3]); i <= int(b[3]); i++ {
			out = append(out, net.IPv4(a[0], a[1], a[2], byte(i)))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no address", v)
	}
	return out, nil
}

// drain copies out what the handshake's reader holds beyond the 101 response.
func drain(br *bufio.Reader) []byte {
	if br == nil {
		return nil
	}
	defer ws.PutReader(br)
	n := br.Buffered()
	if n == 0 {
		return nil
	}
	b, _ := br.Peek(n)
	return append([]byte(nil), b...)
}

func hostPort(u *url.URL, secure bool) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if secure {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// shutdown shuts a dialing socket down both ways: netpoll sees the hang-up
// and fails a read or write waiting on it, without freeing anything.
func shutdown(conn netpoll.Connection) {
	if fc, ok := conn.(netpoll.Conn); ok {
		_ = unix.Shutdown(fc.Fd(), unix.SHUT_RDWR)
	}
}
