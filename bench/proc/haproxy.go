package proc

import (
	"fmt"
	"strings"
	"time"
)

// HAProxyTCP is an HAProxy configuration that balances TCP connections over
// gateway instances by fewest connections, as the seed's load balancer did,
// taking an instance out of rotation while its /health is not 200. The
// compare bench's -instances leg and the rolling-restart test both front
// their gateways with it.
type HAProxyTCP struct {
	Bind    string   // the address HAProxy listens on
	Servers []string // the gateways' addresses
	// ConnectTimeout bounds a connect to a gateway; IdleTimeout a
	// connection's silence on either side.
	ConnectTimeout, IdleTimeout time.Duration
	// CheckEvery is the health check's interval; Fall failed checks take an
	// instance out, Rise passed ones put it back.
	CheckEvery time.Duration
	Fall, Rise int
}

// Config renders the configuration file.
func (h HAProxyTCP) Config() string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 4000
defaults
    mode tcp
    timeout connect %s
    timeout client %s
    timeout server %s
    retries 3
    option redispatch
frontend realtime
    bind %s
    default_backend gateways
backend gateways
    balance leastconn
    option httpchk
    http-check send meth GET uri /health
    http-check expect status 200
    default-server inter %s fall %d rise %d
`, haproxyTime(h.ConnectTimeout), haproxyTime(h.IdleTimeout), haproxyTime(h.IdleTimeout), h.Bind,
		haproxyTime(h.CheckEvery), h.Fall, h.Rise)
	for i, s := range h.Servers {
		fmt.Fprintf(&b, "    server gw%d %s check\n", i+1, s)
	}
	return b.String()
}

// haproxyTime writes d in HAProxy's time format: whole seconds as "5s",
// anything else in milliseconds.
func haproxyTime(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
