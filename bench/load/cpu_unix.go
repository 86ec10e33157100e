//go:build unix

package load

import (
	"syscall"
	"time"
)

// ProcessCPU returns the user+system CPU time this process has used so far
// (getrusage RUSAGE_SELF), or 0 if the kernel does not say.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
