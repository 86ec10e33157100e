// Package sysmem says how much memory the gateway may use: the machine's RAM
// or its cgroup's limit (Linux); unknown elsewhere.
package sysmem

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Available is the machine's RAM, or the cgroup v2 memory limit when
// that is lower; 0 if neither can be read.
func Available() int64 {
	var si syscall.Sysinfo_t
	var ram int64
	if syscall.Sysinfo(&si) == nil {
		ram = int64(si.Totalram) * int64(si.Unit)
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (ram == 0 || n < ram) {
			return n
		}
	}
	return ram
}
