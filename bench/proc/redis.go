package proc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Redis is a redis-server the benchmarks start for the gateway's REDIS_URL
// (shared limits): loopback only, no persistence, its own folder.
type Redis struct {
	*Proc
	Addr string // host:port
}

// URL is the REDIS_URL for the server.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// StartRedis starts redis-server (from PATH) on a free loopback port with
// dir as its folder and log, and waits until it answers PING.
func StartRedis(ctx context.Context, dir string, wait time.Duration) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (apt-get install -y redis-server): %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	p, err := Start(Spec{Name: "redis-server", Bin: bin, LogPath: filepath.Join(dir, "redis.log"),
		Args: []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"}})
	if err != nil {
		return nil, err
	}
	r := &Redis{Proc: p, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if err := WaitReady(ctx, p, wait, r.ping); err != nil {
		p.Stop(time.Second)
		return nil, err
	}
	return r, nil
}

// ping sends an inline PING and wants +PONG.
func (r *Redis) ping(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", r.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis-server answered PING with %q", line)
	}
	return nil
}
