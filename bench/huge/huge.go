package huge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/proc"
)

// Config is one run.
type Config struct {
	harness.Settings
	// WsbenchBin is the client binary (`wsbench -hold`); empty: this
	// process's own executable.
	WsbenchBin string
	// Sessions is how many idle sessions to hold.
	Sessions int
	// Gateways is how many gateway processes share the port.
	Gateways int
	// PerProcess caps the sockets of one mockai or client process (and
	// sizes how many run); 0: 90% of the hard open-file limit.
	PerProcess int
	// Concurrency is how many sessions each client process opens at once.
	Concurrency int
	// OpenTimeout bounds the establishment; HoldFor is how long the
	// sessions are held once open.
	OpenTimeout, HoldFor time.Duration
	// SampleEvery is how often the gateways' /metrics are read while
	// sessions open.
	SampleEvery time.Duration
}

// DefaultConfig is what `wsbench huge` runs without flags.
func DefaultConfig() Config {
	return Config{
		Settings: harness.Settings{MockaiBin: "bin/mockai", GatewayBin: "bin/gateway", Upstream: proc.UpstreamPlain,
			OutDir: filepath.Join("bench", "results")},
		Sessions: 100_000, Gateways: 12, Concurrency: 200,
		OpenTimeout: 10 * time.Minute, HoldFor: 30 * time.Second, SampleEvery: time.Second,
	}
}

// maxGateways bounds Gateways: each takes a source address 127.0.0.(10+i).
const maxGateways = 200

// maxClients bounds the client processes: each takes addresses 127.1.k.*.
const maxClients = 250

// Layout is how many processes of each role a run starts and how the
// sessions spread over them.
type Layout struct {
	Gateways   int   `json:"gateways"`
	PerGateway int   `json:"sessions_per_gateway"` // expected: the kernel spreads them
	Mockai     int   `json:"mockai"`
	Clients    []int `json:"client_sessions"` // sessions each client process opens
	FileLimit  int   `json:"file_limit"`
	PerProcess int   `json:"per_process"`
}

// plan lays the run out under the open-file limit fileLimit.
func plan(c Config, fileLimit int) (Layout, error) {
	if c.Sessions <= 0 || c.Gateways <= 0 || c.Gateways > maxGateways || c.Concurrency <= 0 {
		return Layout{}, fmt.Errorf("sessions, gateways (1-%d) and concurrency must be positive (got %d, %d, %d)",
			maxGateways, c.Sessions, c.Gateways, c.Concurrency)
	}
	per := c.PerProcess
	if per <= 0 {
		per = fileLimit * 9 / 10
	}
	if per <= 0 || per > fileLimit-64 {
		return Layout{}, fmt.Errorf("%d sockets per process does not fit the open-file limit %d", per, fileLimit)
	}
	l := Layout{Gateways: c.Gateways, PerGateway: (c.Sessions + c.Gateways - 1) / c.Gateways, FileLimit: fileLimit, PerProcess: per}
	// A session is two descriptors in the gateway, which also keeps 256
	// for itself (its MAX_CONNECTIONS default); the kernel's spread over
	// the gateways is uneven by a few percent.
	if need := spread(2*l.PerGateway) + 256; need > fileLimit {
		return Layout{}, fmt.Errorf("%d sessions per gateway need about %d descriptors each, over the limit %d: use more gateways (-gateways)",
			l.PerGateway, need, fileLimit)
	}
	// Each gateway's upstream sockets all go to one mockai: as few mockai
	// as fit the gateways' sessions.
	for m := 1; m <= c.Gateways; m++ {
		if spread((c.Gateways+m-1)/m*l.PerGateway) <= per {
			l.Mockai = m
			break
		}
	}
	if l.Mockai == 0 {
		return Layout{}, fmt.Errorf("%d sessions per gateway do not fit one mockai of %d sockets: use more gateways (-gateways)", l.PerGateway, per)
	}
	k := (c.Sessions + per - 1) / per
	if k > maxClients {
		return Layout{}, fmt.Errorf("%d client processes needed, at most %d", k, maxClients)
	}
	for i := range k {
		l.Clients = append(l.Clients, c.Sessions/k+btoi(i < c.Sessions%k))
	}
	return l, nil
}

// spread is n plus 5%: what the most loaded of several processes sharing
// a port may get when they expect n.
func spread(n int) int { return n * 105 / 100 }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (c Config) validate() error {
	var errs []error
	errs = append(errs, c.Settings.Check(true)...)
	if c.OpenTimeout <= 0 || c.HoldFor < 0 || c.SampleEvery <= 0 {
		errs = append(errs, errors.New("open timeout and sample interval must be positive, hold time not negative"))
	}
	return errors.Join(errs...)
}

// gatewaySourceIP is gateway i's upstream source address.
func gatewaySourceIP(i int) string { return "127.0.0." + strconv.Itoa(10+i) }

// clientSourceIPs are client process k's source addresses.
func clientSourceIPs(k int) string {
	return fmt.Sprintf("127.1.%d.1-127.1.%d.8", k, k)
}

// Run starts the processes, holds the sessions, reads the figures and stops
// everything it started. It returns an error only when the run could not
// start; a run that started returns its report, whose Problems say what
// went wrong.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("huge: %w", err)
	}
	limit, err := proc.FileLimit()
	if err != nil {
		return nil, fmt.Errorf("huge: open-file limit: %w", err)
	}
	lay, err := plan(cfg, limit)
	if err != nil {
		return nil, fmt.Errorf("huge: %w", err)
	}
	wsbench := cfg.WsbenchBin
	if wsbench == "" {
		if wsbench, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("huge: %w", err)
		}
	}
	dir, started, say, err := cfg.Begin("huge", true)
	if err != nil {
		return nil, fmt.Errorf("huge: %w", err)
	}
	say("huge: %d sessions over %d gateways (about %d each), %d mockai, %d client processes; open-file limit %d, up to %d sockets a process",
		cfg.Sessions, lay.Gateways, lay.PerGateway, lay.Mockai, len(lay.Clients), limit, lay.PerProcess)

	upstreamKey, masterKey := harness.RandomKey("sk-mock-"), harness.RandomKey("sk-gw-")
	var mocks []*proc.Mockai
	defer func() { stopAll(mocks, 5*time.Second) }()
	for i := range lay.Mockai {
		mdir := filepath.Join(dir, fmt.Sprintf("mockai-%d", i+1))
		if err := os.MkdirAll(mdir, 0o755); err != nil {
			return nil, fmt.Errorf("huge: %w", err)
		}
		m, err := proc.StartMockai(ctx, cfg.MockaiBin, cfg.Upstream, []string{"-key", upstreamKey}, mdir, 15*time.Second)
		if err != nil {
			return nil, fmt.Errorf("huge: %w", err)
		}
		mocks = append(mocks, m)
	}

	port, err := proc.FreePort()
	if err != nil {
		return nil, fmt.Errorf("huge: %w", err)
	}
	var gws []*proc.Gateway
	defer func() { stopAll(gws, 10*time.Second) }()
	for i := range lay.Gateways {
		set := proc.GatewaySettings(mocks[i%len(mocks)], upstreamKey, masterKey, "warn")
		set["REUSEPORT"] = "1"
		set["UPSTREAM_SOURCE_IPS"] = gatewaySourceIP(i)
		set["REALTIME_POOL_SIZE"] = "0"
		// The clients have closed their sessions by the time a gateway
		// is stopped: no need to wait for load balancers.
		set["DRAIN_GRACE_SECS"], set["DRAIN_TIMEOUT"] = "0", "5"
		g, err := proc.StartGatewayOn(ctx, cfg.GatewayBin, nil, set, port, filepath.Join(dir, fmt.Sprintf("gateway-%d.log", i+1)))
		if err != nil {
			return nil, fmt.Errorf("huge: gateway %d: %w", i+1, err)
		}
		gws = append(gws, g)
	}
	roles := &roles{gateways: gws, mocks: mocks}
	rep := &Report{Config: cfg, Run: runConfig(cfg), Layout: lay, Started: started, Dir: dir, Host: readHost()}

	// The idle baseline: every gateway after a collection.
	if rep.Idle, err = roles.reading(ctx, true); err != nil {
		return nil, fmt.Errorf("huge: %w", err)
	}
	say("huge: %d gateways up on 127.0.0.1:%d (idle RSS %.1f MiB together); starting the clients", len(gws), port, mib(rep.Idle.GatewayRSS))

	// Clients hold until stopped: their own hold time only bounds them if
	// this process dies without stopping them.
	clientHold := cfg.OpenTimeout + cfg.HoldFor + time.Minute
	defer func() { stopAll(roles.clients, 30*time.Second) }()
	begin := time.Now()
	for k, n := range lay.Clients {
		args := []string{"-host", "127.0.0.1:" + strconv.Itoa(port), "-insecure", "-hold", strconv.Itoa(n),
			"-hold-for", clientHold.String(), "-c", strconv.Itoa(cfg.Concurrency), "-t", "60",
			"-source-ips", clientSourceIPs(k), "-quiet", "-json", filepath.Join(dir, fmt.Sprintf("client-%d.json", k+1))}
		env := append(os.Environ(), "WSBENCH_KEY="+masterKey) // not on the command line, where ps shows it
		c, err := proc.Start(proc.Spec{Name: fmt.Sprintf("client %d", k+1), Bin: wsbench, Args: args, Env: env,
			LogPath: filepath.Join(dir, fmt.Sprintf("client-%d.log", k+1))})
		if err != nil {
			return nil, fmt.Errorf("huge: %w", err)
		}
		roles.clients = append(roles.clients, c)
	}

	rep.Opened, rep.OpenTime, rep.Progress = roles.waitOpen(ctx, cfg, begin, say)
	if rep.AtOpen, err = roles.reading(ctx, false); err != nil {
		rep.problem("reading at the end of establishment: %v", err)
	}
	say("huge: %d of %d sessions open after %v; holding them %v", rep.Opened, cfg.Sessions, rep.OpenTime.Round(time.Millisecond), cfg.HoldFor)
	if harness.Sleep(ctx, cfg.HoldFor) != nil {
		rep.Interrupted = true
	}
	if rep.Held, err = roles.reading(ctx, true); err != nil {
		rep.problem("reading at the end of the hold: %v", err)
	}
	rep.check()
	if err := harness.WriteJSON(filepath.Join(dir, "results.json"), rep); err != nil {
		say("huge: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(rep.Markdown()), 0o644); err != nil {
		say("huge: %v", err)
	}
	return rep, nil
}

// readHost reads the kernel settings a run with many sockets depends on.
func readHost() map[string]string {
	out := map[string]string{}
	for _, name := range []string{"fs/nr_open", "fs/file-max", "net/ipv4/ip_local_port_range", "net/core/somaxconn",
		"net/ipv4/tcp_mem", "net/ipv4/tcp_rmem", "net/ipv4/tcp_wmem", "net/ipv4/tcp_max_syn_backlog"} {
		if b, err := os.ReadFile("/proc/sys/" + name); err == nil {
			out[strings.ReplaceAll(name, "/", ".")] = strings.Join(strings.Fields(string(b)), " ")
		}
	}
	if n, err := proc.FileLimit(); err == nil {
		out["RLIMIT_NOFILE (hard)"] = strconv.Itoa(n)
	}
	return out
}

// stopAll stops every process by its PID, all at once (a gateway drains
// on SIGTERM, and one after the other the waits add up), and returns when
// all have exited.
func stopAll[P interface{ Stop(time.Duration) error }](ps []P, grace time.Duration) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { _ = p.Stop(grace) })
	}
	wg.Wait()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
