package peers

import (
	"strings"
	"testing"
)

func TestRenderConfig(t *testing.T) {
	p := ConfigParams{Listen: "127.0.0.1:18080", Upstream: "127.0.0.1:18089", RunDir: "/tmp/run", FileLimit: 20000}
	tests := []struct {
		peer string
		want []string // lines (trimmed) the rendered file must contain
	}{
		{SysNginx, []string{
			"worker_processes 2;",
			"worker_rlimit_nofile 20000;",
			"worker_connections 19500;",
			"listen 127.0.0.1:18080 backlog=4096;",
			"server 127.0.0.1:18089;",
			"pid /tmp/run/nginx.pid;",
			"proxy_set_header Upgrade $http_upgrade;",
			"proxy_read_timeout 1h;",
		}},
		{SysHAProxy, []string{
			"nbthread 2",
			"ulimit-n 20000",
			"maxconn 9750",
			"bind 127.0.0.1:18080",
			"server mockai 127.0.0.1:18089",
			"timeout tunnel 1h",
		}},
		{SysCaddy, []string{
			"http://127.0.0.1:18080 {",
			"bind 127.0.0.1",
			"reverse_proxy 127.0.0.1:18089",
			"admin off",
		}},
	}
	for _, tt := range tests {
		out, err := RenderConfig(tt.peer, p)
		if err != nil {
			t.Fatalf("%s: %v", tt.peer, err)
		}
		text := string(out)
		if strings.Contains(text, "{{") || strings.Contains(text, "}}") {
			t.Errorf("%s: unfilled template fields left:\n%s", tt.peer, text)
		}
		lines := map[string]bool{}
		for l := range strings.SplitSeq(text, "\n") {
			lines[strings.TrimSpace(l)] = true
		}
		for _, w := range tt.want {
			if !lines[w] {
				t.Errorf("%s: no line %q in:\n%s", tt.peer, w, text)
			}
		}
	}
}

func TestRenderConfigFollowsFileLimit(t *testing.T) {
	p := ConfigParams{Listen: "127.0.0.1:1", Upstream: "127.0.0.1:2", RunDir: "/r", FileLimit: 65536}
	nginx, err := RenderConfig(SysNginx, p)
	if err != nil {
		t.Fatal(err)
	}
	haproxy, err := RenderConfig(SysHAProxy, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"worker_rlimit_nofile 65536;", "worker_connections 65036;"} {
		if !strings.Contains(string(nginx), w) {
			t.Errorf("nginx config lacks %q", w)
		}
	}
	for _, w := range []string{"ulimit-n 65536", "maxconn 32518"} {
		if !strings.Contains(string(haproxy), w) {
			t.Errorf("haproxy config lacks %q", w)
		}
	}
}

func TestRenderConfigErrors(t *testing.T) {
	good := ConfigParams{Listen: "127.0.0.1:1", Upstream: "127.0.0.1:2", RunDir: "/r", FileLimit: 20000}
	tests := []struct {
		name, peer string
		edit       func(*ConfigParams)
		want       string
	}{
		{"unknown peer", "envoy", func(*ConfigParams) {}, `no configuration template for "envoy"`},
		{"gateway has none", SysPoolOn, func(*ConfigParams) {}, "no configuration template"},
		{"bad listen", SysNginx, func(p *ConfigParams) { p.Listen = "8080" }, "listen address"},
		{"bad upstream", SysHAProxy, func(p *ConfigParams) { p.Upstream = "" }, "upstream address"},
		{"no run dir", SysNginx, func(p *ConfigParams) { p.RunDir = "" }, "no run directory"},
		{"tiny file limit", SysCaddy, func(p *ConfigParams) { p.FileLimit = 256 }, "open-file limit 256"},
	}
	for _, tt := range tests {
		p := good
		tt.edit(&p)
		_, err := RenderConfig(tt.peer, p)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

// With a TLS upstream each peer dials wss:// and verifies mockai's certificate;
// without one, no TLS setting appears at all.
func TestRenderConfigTLSUpstream(t *testing.T) {
	tlsP := ConfigParams{Listen: "127.0.0.1:1", Upstream: "127.0.0.1:2", CAFile: "/r/mockai-ca.pem", RunDir: "/r", FileLimit: 20000}
	want := map[string][]string{
		SysNginx: {"proxy_pass https://mockai;", "proxy_ssl_trusted_certificate /r/mockai-ca.pem;", "proxy_ssl_verify on;",
			"proxy_ssl_name localhost;"},
		SysHAProxy: {"server mockai 127.0.0.1:2 ssl verify required ca-file /r/mockai-ca.pem verifyhost localhost"},
		SysCaddy:   {"reverse_proxy https://127.0.0.1:2 {", "tls_trusted_ca_certs /r/mockai-ca.pem", "tls_server_name localhost"},
	}
	for peer, lines := range want {
		out, err := RenderConfig(peer, tlsP)
		if err != nil {
			t.Fatalf("%s: %v", peer, err)
		}
		got := map[string]bool{}
		for l := range strings.SplitSeq(string(out), "\n") {
			got[strings.TrimSpace(l)] = true
		}
		for _, w := range lines {
			if !got[w] {
				t.Errorf("%s with TLS: no line %q in:\n%s", peer, w, out)
			}
		}
		plainP := tlsP
		plainP.CAFile = ""
		plain, err := RenderConfig(peer, plainP)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(plain), "\n") {
			if l = strings.TrimSpace(l); !strings.HasPrefix(l, "#") && l != "auto_https off" && (strings.Contains(l, "ssl") || strings.Contains(l, "https") || strings.Contains(l, "tls_")) {
				t.Errorf("%s plain: TLS setting %q", peer, l)
			}
		}
	}
}
