package load

import "syscall"

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT: bind() to a source address
// without reserving a port, so the kernel picks the port at connect() and
// can reuse it towards different destinations. Without it every bound
// socket holds its own ephemeral port.
const ipBindAddressNoPort = 24

func bindNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	})
	if err != nil {
		return err
	}
	// Best effort: an older kernel without the option still works, just
	// with fewer ports per source address.
	_ = serr
	return nil
}
