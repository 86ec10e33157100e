// Command gateway runs rtgate: a WebSocket gateway for OpenAI's Realtime API.
//
// Configuration comes from the environment (LITELLM_MASTER_KEY,
// OPENAI_API_KEY, OPENAI_REALTIME_MODEL, OPENAI_API_BASE, HOST, PORT, ...);
// flags override it. docs/configuration.md lists every setting.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"rtgate/poller"
	"rtgate/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	cfg, err := server.FromEnv(os.LookupEnv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	f, err := newFlags(&cfg)
	if err != nil {
		return err
	}
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	if *f.pollers < 0 {
		return fmt.Errorf("-pollers: %d is negative (0 picks the default)", *f.pollers)
	}
	if *f.apiBase != "" {
		u, err := server.ParseAPIBase(*f.apiBase)
		if err != nil {
			return fmt.Errorf("-api-base: %w", err)
		}
		cfg.APIBase = u
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToLower(*f.logLevel))); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.MasterKey == "" {
		log.Warn("LITELLM_MASTER_KEY is not set: every request will be refused")
	}

	runOn, err := poller.ParseHandlers(*f.handlers)
	if err != nil {
		return fmt.Errorf("-handlers: %w", err)
	}
	if err := poller.Tune(poller.Tuning{Pollers: *f.pollers, BufferSize: *f.bufSize, NodeSize: *f.nodeSize, Handlers: runOn}); err != nil {
		return err
	}
	srv, err := server.New(cfg, log)
	if err != nil {
		return err
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	if cfg.AdminAddr != "" {
		ln, err := net.Listen("tcp", cfg.AdminAddr)
		if err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
		defer ln.Close()
		log.Info("admin listening", "addr", ln.Addr().String())
		go func() { _ = srv.ServeAdmin(ln) }()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
wait:
	for {
		select {
		case err := <-errc:
			// Serve ends without a signal only when the client listener
			// is lost (server's serveListener): exit non-zero so that a
			// supervisor starts a fresh process.
			if err == nil {
				err = errors.New("the client listener stopped without a signal")
			}
			return fmt.Errorf("serving clients: %w", err)
		case <-hup:
			_ = srv.ReopenLogs() // logrotate's postrotate; logs its own outcome
			_ = srv.Reload()     // logs its own outcome
		case sig := <-sigs:
			log.Info("draining on signal; a second signal exits at once", "signal", sig.String())
			break wait
		}
	}
	go func() {
		<-sigs
		log.Warn("second signal: exiting without draining")
		os.Exit(1)
	}()
	srv.Drain(cfg.DrainTimeout)
	return nil
}

// gatewayFlags is the command line: each flag overrides its setting in the
// settings it was made over (newFlags), or sets what only the command reads.
type gatewayFlags struct {
	fs                          *flag.FlagSet
	apiBase, logLevel, handlers *string
	bufSize, nodeSize, pollers  *int
}

// newFlags is the command line over cfg, whose values (the environment's)
// are the flags' defaults. Every flag is a row of server.SettingsTable
// (TestEveryFlagIsInTheSettingsTable).
func newFlags(cfg *server.Settings) (*gatewayFlags, error) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.StringVar(&cfg.Host, "host", cfg.Host, "listen address (HOST)")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "listen port (PORT)")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "model name clients ask for (OPENAI_REALTIME_MODEL)")
	apiBase := fs.String("api-base", "", "upstream base URL, e.g. wss://api.openai.com/v1 (OPENAI_API_BASE)")
	fs.StringVar(&cfg.UpstreamCAFile, "upstream-ca", cfg.UpstreamCAFile, "extra CA file for wss:// upstreams (UPSTREAM_CA_FILE)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "certificate for a TLS client listener (TLS_CERT)")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "key for a TLS client listener (TLS_KEY)")
	fs.StringVar(&cfg.RoutesFile, "config", cfg.RoutesFile, "LiteLLM-style YAML of model groups, deployments and keys (CONFIG_FILE)")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, "admin listener for /metrics, /debug/pprof/, /status and /playground, empty for none (ADMIN_ADDR)")
	fs.BoolVar(&cfg.ReusePort, "reuseport", cfg.ReusePort, "listen with SO_REUSEPORT so several processes share the port (REUSEPORT)")
	fs.DurationVar(&cfg.DrainGrace, "drain-grace", cfg.DrainGrace, "after SIGTERM, how long /health says 503 while connects are still served (DRAIN_GRACE_SECS)")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "then how long live sessions may continue (DRAIN_TIMEOUT)")
	logLevel := fs.String("log-level", envOr("LOG_LEVEL", "info"), "debug, info, warn or error (LOG_LEVEL)")
	// 256 rather than 512: an idle session keeps one node of each per socket
	// (0.75 KiB less live heap per idle plain session, measured), and a read
	// that fills its buffer doubles the next one, so large frames still get
	// large nodes (CPU per round trip showed no difference in the noise).
	bufSize := fs.Int("buffer-size", 256, "netpoll's initial input buffer per connection, bytes")
	nodeSize := fs.Int("node-size", 256, "netpoll's smallest buffer node, bytes (kept per connection on the output side)")
	defPollers, err := envCount("POLLER_NUM")
	if err != nil {
		return nil, err
	}
	pollers := fs.Int("pollers", defPollers, "netpoll's epoll loops; 0: one per core (GOMAXPROCS) with inline handlers, netpoll's GOMAXPROCS/20+1 with pool (POLLER_NUM)")
	handlers := fs.String("handlers", envOr("POLLER_HANDLERS", poller.DefaultHandlers.String()), "where read handlers run: inline (relayed sockets on their poller goroutine) or pool (a goroutine per read event) (POLLER_HANDLERS)")
	return &gatewayFlags{fs: fs, apiBase: apiBase, logLevel: logLevel, handlers: handlers,
		bufSize: bufSize, nodeSize: nodeSize, pollers: pollers}, nil
}

// envOr reads one of the settings the gateway's main reads itself
// (server.ReadByCommand rows of server.SettingsTable: LOG_LEVEL,

// POLLER_HANDLERS), def when unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envCount reads a count of 0 or more from the environment (0 when unset);
// anything else is a start-up error naming the variable.
func envCount(name string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("configuration: %s=%q is not a count (0 or more)", name, v)
	}
	return n, nil
}
