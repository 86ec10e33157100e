// Package admin is the gateway's admin port: /metrics, /debug/pprof/, and
// pages for people: the live status page (serveStatusPage), the session
// view (sessions.go: the live sessions and their conversation records) and
// the playground (servePlayground). It reads the gateway through the
// Gateway interface and never imports the server package.
package admin

// The admin port can mint client secrets (for the playground) with the
// master key, so it must not be reachable from a web page the operator
// happens to have open:
//
//   - DNS rebinding: a hostile page on evil.example resolves its own name to
//     127.0.0.1 and reads the admin port as same-origin. Its requests carry
//     Host: evil.example, so every request whose Host is not a loopback name
//     or address (or a name in ADMIN_HOSTS) is refused with 421. An IP
//     literal cannot be rebound, so when the admin listener is bound to a
//     specific non-loopback address (or to all of them), Hosts that are that
//     address (or any address) are accepted too: a Prometheus scrape by IP
//     keeps working.
//   - Cross-site requests: a hostile page can still POST to
//     http://127.0.0.1:4002 blind. The mint endpoint requires a token that
//     is only in the served playground page (a cross-site page cannot read
//     it) and an Origin that is the admin page's own.

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"rtgate/server/balance"
	"rtgate/server/routes"
	"rtgate/server/transcript"
	"rtgate/upstream"
)

// Gateway is what the admin port reads of the gateway it serves, given as
// functions by the gateway's wiring (server's adminGateway).
type Gateway struct {
	// Routes is the configuration in force.
	Routes func() *routes.Table
	// Sessions is the number of sessions in the registry now, and
	// SessionCounts the same by model group, by key name and by protocol
	// (realtime, live; a walk). A Live session counts under the model
	// group "" until its session.start names the model.
	Sessions      func() int
	SessionCounts func() (byGroup, byKey, byProtocol map[string]int)
	// SessionsEnded is the number of sessions ended so far.
	SessionsEnded func() float64
	Draining      func() bool
	// Pool is the warm pool, nil when it is off.
	Pool func() *upstream.Pool
	// Deployment is a deployment's state as the balancer holds it.
	Deployment func(d *routes.Deployment) balance.HostStatus
	// ClientListener is the client port: its address once listening (nil
	// before), and whether it speaks TLS.
	ClientListener func() (addr net.Addr, tls bool)
	// MintSecret mints a client secret for key from a mint request body,
	// as POST /v1/realtime/client_secrets would.
	MintSecret func(ctx context.Context, table *routes.Table, key *routes.ClientKey, body []byte) Answer
	// SessionViews lists the live sessions (the session view), and
	// Conversation is one's conversation record as it stands: nil when no
	// live session has that id or it keeps no record.
	SessionViews func() []SessionView
	Conversation func(id string) *transcript.Record
}

// Answer is a JSON API answer: Body on success, else the error's fields.
type Answer struct {
	Status                   int
	Body                     []byte
	ErrType, ErrCode, ErrMsg string
}

// Server is the admin port of one gateway.
type Server struct {
	gw         Gateway
	main       *prometheus.Registry // the gateway's metrics, served on /metrics
	hosts      []string             // ADMIN_HOSTS
	clientPort int                  // PORT, until the client listener says otherwise

	started time.Time
	// reg holds the collectors the status page reads (the pool's), which
	// are registered in the main registry too: sampling it each second
	// costs nothing for the Go and process collectors (the latter walks
	// /proc/self/fd, 20k entries on a busy gateway).
	reg      *prometheus.Registry
	pageKey  []byte                      // signs playground page tokens; random per process
	addr     atomic.Pointer[net.TCPAddr] // the admin listener, once ServeAdmin runs
	sampling sync.Once
	board    statusBoard
}

// New is the admin port of gw, whose metrics are in main; hosts are the
// names it answers to besides loopback ones (ADMIN_HOSTS), clientPort the
// configured client port.
func New(gw Gateway, main *prometheus.Registry, hosts []string, clientPort int) *Server {
	a := &Server{gw: gw, main: main, hosts: hosts, clientPort: clientPort, started: time.Now(),
		reg: prometheus.NewRegistry(), pageKey: randomBytes(32)}
	a.board.init()
	return a
}

// Tee returns a Registerer that registers with main and with the status
// page's own registry.
func (a *Server) Tee(main prometheus.Registerer) prometheus.Registerer {
	return teeRegisterer{main: main, status: a.reg}
}

type teeRegisterer struct{ main, status prometheus.Registerer }

func (t teeRegisterer) Register(c prometheus.Collector) error {
	if err := t.main.Register(c); err != nil {
		return err
	}
	return t.status.Register(c)
}

func (t teeRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t teeRegisterer) Unregister(c prometheus.Collector) bool {
	t.status.Unregister(c)
	return t.main.Unregister(c)
}

// Listening records the admin listener's address: the playground's
// origin (accepted by the client port) and the Host check depend on it.
func (s *Server) Listening(addr net.Addr) {
	if a, ok := addr.(*net.TCPAddr); ok {
		s.addr.Store(a)
	}
}

// Handler serves /metrics (Prometheus text format), /debug/pprof/, /status,
// /sessions and /playground, for loopback Hosts only (and ADMIN_HOSTS). The status
// sampler starts with the first Handler and runs until ctx ends.
func (s *Server) Handler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.main, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s.addPages(ctx, mux)
	return s.guard(mux)
}

// addPages mounts the status page and the playground, and starts the
// status sampler (one goroutine, until ctx ends).
func (s *Server) addPages(ctx context.Context, mux *http.ServeMux) {
	s.sampling.Do(func() { go s.sampleStatus(ctx) })
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status", http.StatusFound)
	})
	mux.HandleFunc("GET /status", s.serveStatusPage)
	mux.HandleFunc("GET /status.json", s.serveStatusJSON)
	mux.HandleFunc("GET /playground", s.servePlayground)
	mux.HandleFunc("POST /playground/client_secret", s.servePlaygroundSecret)
	s.addSessionView(mux)
}

// guard refuses requests whose Host could come from DNS rebinding.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No Host at all (HTTP/1.0, or a handler called in-process)
		// is no browser's request: browsers always send one.
		if r.Host != "" && !s.HostAllowed(r.Host) {
			http.Error(w, "admin server: this Host is not served; use a loopback address or list the name in ADMIN_HOSTS",
				http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HostAllowed says whether the admin server answers to hostport (a Host
// header).
func (s *Server) HostAllowed(hostport string) bool { return s.adminHost(hostport, true) }

// adminHost is HostAllowed; anyIP says whether every IP literal counts
// when the listener is bound to all addresses (true for Host headers; false
// for origins, where "any address on port 4002" would take in other
// machines' pages).
func (s *Server) adminHost(hostport string, anyIP bool) bool {
	h := hostOf(hostport)
	if h == "" {
		return false
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true // browsers resolve these to loopback themselves
	}
	if ip := net.ParseIP(h); ip != nil {
		if ip.IsLoopback() {
			return true
		}
		a := s.addr.Load()
		return a != nil && ((anyIP && a.IP.IsUnspecified()) || a.IP.Equal(ip))
	}
	return slices.Contains(s.hosts, h)
}

// hostOf is the host of a Host header value, lower case, without port,
// brackets or a trailing dot.
func hostOf(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".")
	return strings.ToLower(h)
}

// IsOrigin reports whether origin is a page served by this admin
// server: http(s), a loopback name or address, a name in ADMIN_HOSTS or the
// listener's own address, and its port. The client
// port accepts such origins even when ALLOWED_ORIGINS is set, so that the
// playground can connect.
func (s *Server) IsOrigin(origin string) bool {
	a := s.addr.Load()
	if a == nil || origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return port == strconv.Itoa(a.Port) && s.adminHost(u.Host, false)
}

// pageOrigin is the origin of a page served for r.
func pageOrigin(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}
