//go:build !linux

package soak

import (
	"errors"
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return nil }

// openSockets is only implemented on Linux.
func openSockets(int) ([]string, error) { return nil, errors.ErrUnsupported }
