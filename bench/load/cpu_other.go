//go:build !unix

package load

import "time"

// ProcessCPU is not available on this platform and reports 0.
func ProcessCPU() time.Duration { return 0 }
