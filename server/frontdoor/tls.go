package frontdoor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"rtgate/poller"
)

// The client-side TLS handshake, off netpoll's handlers.
//
// crypto/tls cannot resume a handshake that would block, so the handshake
// runs blocking, in a goroutine. It must not run in OnRequest: that would
// park one of netpoll's handler goroutines per client for as long as the
// client likes (or stall a poller, with handlers run inline), and a flood of
// clients that open TCP and send half a ClientHello would park thousands.
// Instead:
//
//	state       event                              next
//	collecting  bytes arrive (OnRequest)           collecting: moved into handshakeConn's buffer
//	collecting  a whole ClientHello is buffered    handshaking: one goroutine runs tls.Server's handshake
//	collecting  not a TLS record                   done: plain HTTP gets a 400 saying "use wss://", else closed
//	handshaking bytes arrive (OnRequest)           handshaking: moved into the buffer the goroutine reads
//	handshaking handshake done                     http: reads go to netpoll's buffer (non-blocking);
//	                                               the goroutine reads the request once itself, since the
//	                                               client's first bytes may already sit in the buffer or
//	                                               inside tls.Conn, where no read event will come for them
//	any         handshake timeout, client closes   closed
//
// So a half-open client costs its buffered bytes and its timer, no
// goroutine, and holds a MaxConnections slot until the handshake timeout; a
// goroutine exists only from a complete ClientHello to the end of the
// handshake, at most MaxHandshakes of them (more are closed at once), each
// ended by the handshake deadline. OnRequest never blocks: it only moves bytes. It and the
// handshake goroutine's hand-off run under Conn.readMu, so reads of
// the connection never overlap.

const (
	// maxClientHello bounds what a client may send before its ClientHello
	// is complete: crypto/tls refuses handshake messages over 64 KiB, and a
	// real one (with post-quantum key shares) is under 2 KiB.
	maxClientHello = 64<<10 + 1024
	// maxHandshakeInput bounds what may be buffered while the handshake
	// runs; the client's second flight is a few hundred bytes, and the
	// request head that may follow it is bounded on its own.
	maxHandshakeInput = 256 << 10
)

// handshakeConn is the net.Conn crypto/tls runs the client handshake over.
// Until handOff, reads come from bytes OnRequest moved out of netpoll's
// buffer (blocking until some arrive or the connection closes); after it,
// from that buffer's remainder and then straight from the NBConn, which the
// TLS endpoint switches to non-blocking reads. Writes go to the socket.
type handshakeConn struct {
	*poller.NBConn

	mu       sync.Mutex
	in       []byte
	handed   bool
	closed   bool
	arrivals chan struct{} // one pending wake-up for a blocked Read
}

func newHandshakeConn(nb *poller.NBConn) *handshakeConn {
	return &handshakeConn{NBConn: nb, arrivals: make(chan struct{}, 1)}
}

func (h *handshakeConn) wake() {
	select {
	case h.arrivals <- struct{}{}:
	default:
	}
}

// feed appends bytes from netpoll's buffer and returns how many are buffered.
func (h *handshakeConn) feed(b []byte) int {
	h.mu.Lock()
	h.in = append(h.in, b...)
	n := len(h.in)
	h.mu.Unlock()
	h.wake()
	return n
}

// clientHello reports whether the buffer holds a whole ClientHello.
func (h *handshakeConn) clientHello() (complete bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return clientHelloComplete(h.in)
}

// handOff sends later reads to the NBConn once the buffer is empty.
func (h *handshakeConn) handOff() {
	h.mu.Lock()
	h.handed = true
	h.mu.Unlock()
}

// shut wakes a blocked Read with io.EOF: the connection closed.
func (h *handshakeConn) shut() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.wake()
}

func (h *handshakeConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		h.mu.Lock()
		if len(h.in) > 0 {
			n := copy(p, h.in)
			h.NBConn.Fed(p[:n]) // NBConn follows TLS records for its read-ahead
			h.in = h.in[n:]
			if len(h.in) == 0 {
				h.in = nil // a session keeps this conn: let the handshake's bytes go
			}
			h.mu.Unlock()
			return n, nil
		}
		handed, closed := h.handed, h.closed
		h.mu.Unlock()
		switch {
		case handed:
			return h.NBConn.Read(p)
		case closed:
			return 0, io.EOF
		}
		<-h.arrivals
	}
}

// errNotTLS means the first bytes on a TLS listener are not a TLS handshake.
var errNotTLS = errors.New("not a TLS handshake")

// clientHelloComplete reports whether b starts with a whole ClientHello:
// handshake records (type 22) whose payloads hold the 4-byte handshake
// header and the message it announces. It reads only framing.
func clientHelloComplete(b []byte) (bool, error) {
	if len(b) == 0 {
		return false, nil
	}
	if b[0] != 22 {
		return false, errNotTLS
	}
	var hdr [4]byte
	got, want := 0, -1 // handshake payload bytes seen; message size with its header
	for len(b) > 0 {
		if len(b) < 5 {
			return false, nil
		}
		if b[0] != 22 || b[1] != 3 {
			return false, errNotTLS
		}
		n := int(b[3])<<8 | int(b[4])
		if n == 0 || n > 16<<10 {
			return false, errNotTLS
		}
		payload := b[5:]
		if len(payload) > n {
			payload = payload[:n]
		}
		for _, c := range payload {
			if got < 4 {
				hdr[got] = c
			}
			got++
			if got == 4 {
				if hdr[0] != 1 { // client_hello
					return false, errNotTLS
				}
				want = 4 + (int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3]))
			}
			if want >= 0 && got >= want {
				return true, nil
			}
		}
		if len(b) < 5+n {
			return false, nil
		}
		b = b[5+n:]
	}
	return false, nil
}

// collectTLS runs in OnRequest while the handshake has not finished: it moves
// what arrived into the handshake's buffer and starts the handshake once the
// ClientHello is whole. It never blocks. Callers hold c.readMu.
func (c *Conn) collectTLS() error {
	r := c.conn.Reader()
	b, _ := r.Next(r.Len())
	n := c.hs.feed(b)
	_ = r.Release()
	if c.hsStarted {
		if n > maxHandshakeInput {
			return c.conn.Close()
		}
		return nil
	}
	complete, err := c.hs.clientHello()
	switch {
	case err != nil:
		c.refuseNotTLS()
		return nil
	case complete:
		if !c.door.startTLSHandshake() {
			return c.conn.Close() // MaxHandshakes running: refused at once
		}
		c.hsStarted = true
		go c.tlsHandshake()
	case n > maxClientHello:
		return c.conn.Close()
	}
	return nil
}

// tlsHandshake runs the server side of TLS in its own goroutine, bounded by
// the handshake deadline, then hands the connection to the HTTP phase.
func (c *Conn) tlsHandshake() {
	defer c.door.endTLSHandshake()
	ctx, cancel := context.WithDeadline(c.door.deps.Context, c.accepted.Add(c.door.cfg.HandshakeTimeout))
	defer cancel()
	tc := tls.Server(c.hs, c.door.cfg.TLS)
	// On the deadline HandshakeContext closes the connection, which wakes a
	// blocked read (onClose shuts handshakeConn).
	if err := tc.HandshakeContext(ctx); err != nil {
		c.door.log.Debug("client TLS handshake failed", "remote", c.conn.RemoteAddr().String(), "err", err)
		_ = c.conn.Close()
		return
	}
	if h := c.door.testHooks(); h != nil && h.TLSHandshaken != nil {
		h.TLSHandshaken(c.conn, c.waitReads)
	}
	c.offLoop.Store(true)
	defer c.goInline() // after the unlock below
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.hs.handOff()
	c.ep = poller.NewTLSEndpoint(c.hs.NBConn, tc)
	c.setPhase(phaseHTTP)
	// What the client sent behind its Finished is in handshakeConn's buffer
	// or inside tc; no read event will come for it.
	_ = c.readHead()
	if h := c.door.testHooks(); h != nil && h.TLSRequest != nil {
		h.TLSRequest(c.hasSession())
	}
}

// refuseNotTLS answers a client that spoke plaintext to the TLS listener: a
// plain HTTP request (someone dialed ws:// or http://) gets a readable 400;
// anything else is closed.
func (c *Conn) refuseNotTLS() {
	c.hs.mu.Lock()
	looksHTTP := len(c.hs.in) > 0 && c.hs.in[0] >= 'A' && c.hs.in[0] <= 'Z'
	c.hs.mu.Unlock()
	if !looksHTTP {
		_ = c.conn.Close()
		return
	}
	c.setPhase(phaseDone)
	ep := poller.NewPlainEndpoint(c.conn)
	_ = ep.Send(badRequest("this gateway serves TLS on this port: connect with wss:// (or https://)").response())
	ep.Close()
}

// refuseTLS answers, at once, a TLS ClientHello that reached the plain
// listener (a client that dialed wss:// by mistake). The client expects a
// TLS record, so it reports something like Go's "tls: first record does not
// look like a TLS handshake" or OpenSSL's "wrong version number" straight
// away, instead of waiting out the handshake timeout; anyone who looks at
// the bytes sees the reason. An alert would be reported as a TLS version or
// cipher problem, which misleads.
func (c *Conn) refuseTLS() {
	c.Refuse(&Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "tls_not_served",
		Message: "this gateway serves plain ws:// on this port, not TLS: connect with ws:// (or http://)"})
}

// tlsRecordStart reports whether b starts like a TLS handshake record.
func tlsRecordStart(b []byte) bool { return len(b) > 0 && b[0] == 22 && (len(b) < 2 || b[1] == 3) }

// serverTLSConfig is the client listener's TLS: TLS 1.2 and up, and for 1.2
// only forward-secret AEAD suites (1.3's suites are all strong and not
// configurable). Records go out at full size from the first write:
// crypto/tls would otherwise cut the first records of each connection to
// ~1.2 KB (growing by that much per record), one socket write each, and the
// client endpoint already gathers a read's frames into one write.
func serverTLSConfig(certs *certReloader) *tls.Config {
	return &tls.Config{
		MinVersion:                  tls.VersionTLS12,
		GetCertificate:              certs.get,
		DynamicRecordSizingDisabled: true,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
	}
}

// certReloader serves the certificate in certFile/keyFile and picks up new
// files without a restart: at most once a second, a handshake checks the
// files' modification times and reloads them if they changed. A pair that
// fails to load (a half-written renewal, say) is logged and the previous
// certificate kept.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	mod     time.Time // newest modification time of the two files when loaded
	checked time.Time
}

// TLSConfig is the client listener's TLS (serverTLSConfig) for the
// certificate in certFile and keyFile (TLS_CERT, TLS_KEY), reloaded when
// the files change (certReloader).
func TLSConfig(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	certs, err := newCertReloader(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	return serverTLSConfig(certs), nil
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) modTime() (time.Time, error) {
	var newest time.Time
	for _, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return time.Time{}, err
		}
		if st.ModTime().After(newest) {
			newest = st.ModTime()
		}
	}
	return newest, nil
}

func (r *certReloader) load() error {
	mod, err := r.modTime()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("loading key pair: %w", err)
	}
	r.cert, r.mod = &cert, mod
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= time.Second {
		r.checked = now
		if mod, err := r.modTime(); err == nil && !mod.Equal(r.mod) {
			if err := r.load(); err != nil {
				r.log.Error("reloading the TLS certificate failed; keeping the previous one", "err", err)
			} else {
				r.log.Info("reloaded the TLS certificate", "file", r.certFile)
			}
		}
	}
	return r.cert, nil
}
