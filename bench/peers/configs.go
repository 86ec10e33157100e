package peers

import (
	"bytes"
	"embed"
	"fmt"
	"net"
	"text/template"
)

// The peers' configuration templates. They are plain files next to this code so that
// a reader can see, and copy, exactly what each peer ran with.
//
//go:embed nginx.conf haproxy.cfg Caddyfile
var configFiles embed.FS

// ConfigParams fill a peer's configuration template.
type ConfigParams struct {
	Listen   string // host:port the peer listens on
	Upstream string // host:port of mockai
	// CAFile is mockai's certificate when it serves TLS ("" for plain ws://): the
	// peer then dials wss:// and verifies mockai against it (name "localhost").
	CAFile string
	RunDir string // where the peer may write its pid file, logs and temp files
	// FileLimit is the open-file limit each proxy process should run with (the hard limit).
	FileLimit int
}

// TLS says whether the upstream is wss://.
func (p ConfigParams) TLS() bool { return p.CAFile != "" }

// Host is the host part of Listen (for Caddy's bind directive).
func (p ConfigParams) Host() string {
	h, _, _ := net.SplitHostPort(p.Listen)
	return h
}

// WorkerConnections is nginx's per-worker connection cap: the file limit less a margin
// for listeners, logs and the worker's own files.
func (p ConfigParams) WorkerConnections() int { return p.FileLimit - fileMargin }

// MaxConn is HAProxy's maxconn: every proxied session costs two sockets, so twice it
// plus a margin must fit the file limit.
func (p ConfigParams) MaxConn() int { return (p.FileLimit - fileMargin) / 2 }

// fileMargin is the open files a proxy process keeps for things other than sessions.
const fileMargin = 500

// configFile names each peer's template.
var configFile = map[string]string{
	SysNginx:   "nginx.conf",
	SysHAProxy: "haproxy.cfg",
	SysCaddy:   "Caddyfile",
}

// RenderConfig fills peer's template with p.
func RenderConfig(peer string, p ConfigParams) ([]byte, error) {
	name, ok := configFile[peer]
	if !ok {
		return nil, fmt.Errorf("no configuration template for %q", peer)
	}
	if _, _, err := net.SplitHostPort(p.Listen); err != nil {
		return nil, fmt.Errorf("%s config: listen address %q: %w", peer, p.Listen, err)
	}
	if _, _, err := net.SplitHostPort(p.Upstream); err != nil {
		return nil, fmt.Errorf("%s config: upstream address %q: %w", peer, p.Upstream, err)
	}
	if p.RunDir == "" {
		return nil, fmt.Errorf("%s config: no run directory", peer)
	}
	if p.FileLimit < 2*fileMargin {
		return nil, fmt.Errorf("%s config: open-file limit %d is below %d", peer, p.FileLimit, 2*fileMargin)
	}
	tmpl, err := template.New(name).Option("missingkey=error").ParseFS(configFiles, name)
	if err != nil {
		return nil, fmt.Errorf("%s config: %w", peer, err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("%s config: %w", peer, err)
	}
	return buf.Bytes(), nil
}
