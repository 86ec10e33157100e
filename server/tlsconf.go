package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

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
