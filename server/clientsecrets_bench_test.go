package server

import (
	"crypto/x509"
	"testing"

	"github.com/gorilla/websocket"
)

// BenchmarkConnectKeyVsSecret measures a connect up to the client's first
// event (session.created) with a gateway key and with a client secret, warm
// pool on, mockai in-process over ws:// and wss://. A secret's session pays
// one more upstream round trip (its session.update and the reply) even on a
// pool hit; compare the two sub-benchmarks of one run.
//
//	go test -run '^$' -bench BenchmarkConnectKeyVsSecret -benchtime 200x ./server/
func BenchmarkConnectKeyVsSecret(b *testing.B) {
	for _, up := range upstreams {
		b.Run(up.name, func(b *testing.B) {
			mock := startMock(b, up.cfg)
			g := startGateway(b, mock, func(c *Settings) {
				c.Pool.Size = 8
				if mock.CertPEM() != nil {
					c.UpstreamRoots = x509.NewCertPool()
					c.UpstreamRoots.AppendCertsFromPEM(mock.CertPEM())
				}
			})
			ek, _ := mint(b, g, testMasterKey, map[string]any{"session": map[string]any{"instructions": "Be brief."}})
			for _, how := range []string{"key", "secret"} {
				b.Run(how, func(b *testing.B) {
					d := dialer()
					h := bearer(testMasterKey)
					if how == "secret" {
						d.Subprotocols = []string{"realtime", "openai-insecure-api-key." + ek}
						h = nil
					}
					for b.Loop() {
						c, _, err := d.Dial(g.url("model=gpt-realtime"), h)
						if err != nil {
							b.Fatal(err)
						}
						if _, _, err := c.ReadMessage(); err != nil {
							b.Fatal(err)
						}
						_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
						_ = c.Close()
					}
				})
			}
		})
	}
}
