package peers

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where a comparison ran, for the table's caption.
type Machine struct {
	CPU      string            `json:"cpu"`
	Cores    int               `json:"cores"`
	MemoryGB float64           `json:"memory_gb"`
	Kernel   string            `json:"kernel"`
	Go       string            `json:"go"`
	Versions map[string]string `json:"versions"` // per system binary
	// Binaries are the SHA-256 prefixes of the mockai and gateway builds that ran.
	Binaries map[string]string `json:"binaries"`
}

// describeMachine reads /proc and asks each binary for its version (bounded).
func describeMachine(ctx context.Context, o *Options) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Versions: map[string]string{}}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemoryGB = float64(parseMemTotalKB(data)) / (1 << 20)
	}
	version := func(bin string, args ...string) string {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	for _, s := range o.Systems {
		switch s {
		case SysNginx: // "nginx version: nginx/1.22.1"
			m.Versions[s] = strings.TrimPrefix(version(o.Nginx, "-v"), "nginx version: ")
		case SysHAProxy: // "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/"
			if f := strings.Fields(version(o.HAProxy, "-v")); len(f) >= 3 {
				m.Versions[s] = "HAProxy " + f[2]
			}
		case SysCaddy: // "v2.6.2 h1:..." or "2.6.2"
			if f := strings.Fields(version(o.Caddy, "version")); len(f) >= 1 {
				m.Versions[s] = "Caddy " + f[0]
			}
		case SysPoolOff, SysPoolOn:
			if rev := version("git", "rev-parse", "--short", "HEAD"); rev != "" && !strings.Contains(rev, " ") {
				m.Versions["rtgate"] = "rtgate " + rev
				if version("git", "status", "--porcelain", "--untracked-files=no") != "" {
					m.Versions["rtgate"] += " with uncommitted changes"
				}
			}
		}
	}
	return m
}

// parseMemTotalKB reads MemTotal from /proc/meminfo (0 if absent).
func parseMemTotalKB(data []byte) int64 {
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
