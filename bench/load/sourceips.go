package load

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
)

// maxSourceIPs bounds -source-ips so a typo like 127.0.0.1-127.255.255.255
// is an error, not sixteen million addresses.
const maxSourceIPs = 1024

// ParseSourceIPs parses a list of local source addresses: comma-separated
// items, each an IP address or an inclusive IPv4 range "a-b" (for example
// "127.0.0.1-127.0.0.8"). An empty string means "let the kernel choose".
func ParseSourceIPs(s string) ([]net.IP, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []net.IP
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(item, "-")
		if !isRange {
			ip := net.ParseIP(item)
			if ip == nil {
				return nil, fmt.Errorf("source IPs: %q is not an IP address", item)
			}
			out = append(out, ip)
		} else {
			a, b := net.ParseIP(strings.TrimSpace(lo)).To4(), net.ParseIP(strings.TrimSpace(hi)).To4()
			if a == nil || b == nil {
				return nil, fmt.Errorf("source IPs: range %q needs two IPv4 addresses", item)
			}
			from, to := binary.BigEndian.Uint32(a), binary.BigEndian.Uint32(b)
			if to < from {
				return nil, fmt.Errorf("source IPs: range %q ends before it starts", item)
			}
			if to-from >= maxSourceIPs {
				return nil, fmt.Errorf("source IPs: range %q has more than %d addresses", item, maxSourceIPs)
			}
			for v := from; ; v++ {
				ip := make(net.IP, 4)
				binary.BigEndian.PutUint32(ip, v)
				out = append(out, ip)
				if v == to {
					break
				}
			}
		}
		if len(out) > maxSourceIPs {
			return nil, fmt.Errorf("source IPs: more than %d addresses", maxSourceIPs)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("source IPs: no address in %q", s)
	}
	return out, nil
}
