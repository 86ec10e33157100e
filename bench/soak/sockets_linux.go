package soak

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// childAttr makes the kernel kill a child if wsbench dies without cleaning
// up (SIGKILL, crash), so no mockai or gateway outlives the soak.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// tcpStates names /proc/net/tcp's st column.
var tcpStates = map[string]string{
	"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
	"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
}

// openSockets lists the TCP sockets process pid holds, as "local remote
// state", so that a session left open can be told apart: a client socket
// has the gateway's port as its local port, an upstream socket mockai's as
// its remote one, and CLOSE_WAIT means the peer has gone.
func openSockets(pid int) ([]string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, e := range entries {
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			if ino, ok := strings.CutPrefix(link, "socket:["); ok {
				inodes[strings.TrimSuffix(ino, "]")] = true
			}
		}
	}
	var out []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			out = append(out, fmt.Sprintf("%s %s %s", hexAddr(f[1]), hexAddr(f[2]), cmp.Or(tcpStates[f[3]], f[3])))
		}
	}
	slices.Sort(out)
	return out, nil
}

// hexAddr turns /proc/net/tcp's "0100007F:1F90" into "127.0.0.1:8080"
// (IPv4; IPv6 addresses are left as they are, with the port decoded).
func hexAddr(s string) string {
	h, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil {
		return s
	}
	if v, err := strconv.ParseUint(h, 16, 32); err == nil && len(h) == 8 {
		return fmt.Sprintf("%d.%d.%d.%d:%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24), port)
	}
	return fmt.Sprintf("[%s]:%d", h, port)
}
