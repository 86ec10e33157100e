package soak

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// tcpStates names /proc/net/tcp's st column.
var tcpStates = map[uint64]string{
	1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING",
}

// openSockets lists the TCP sockets process pid holds, as "local remote
// state", so that a session left open can be told apart: a client socket
// has the gateway's port as its local port, an upstream socket mockai's as
// its remote one, and CLOSE_WAIT means the peer has gone. It reads
// /proc/PID/fd and /proc/net/tcp{,6} through procfs (Linux only).
func openSockets(pid int) ([]string, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return nil, err
	}
	targets, err := p.FileDescriptorTargets()
	if err != nil {
		return nil, err
	}
	inodes := map[uint64]bool{}
	for _, t := range targets {
		if ino, ok := strings.CutPrefix(t, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64); err == nil {
				inodes[n] = true
			}
		}
	}
	var out []string
	for _, table := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		lines, err := table()
		if err != nil {
			continue // no IPv6, say
		}
		for _, l := range lines {
			if !inodes[l.Inode] {
				continue
			}
			out = append(out, fmt.Sprintf("%s %s %s", hostPort(l.LocalAddr, l.LocalPort), hostPort(l.RemAddr, l.RemPort),
				cmp.Or(tcpStates[l.St], strconv.FormatUint(l.St, 16))))
		}
	}
	slices.Sort(out)
	return out, nil
}

func hostPort(ip net.IP, port uint64) string {
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
}
