//go:build !unix

package proc

import "errors"

// FileLimit is only known on Unix.
func FileLimit() (int, error) { return 0, errors.ErrUnsupported }
