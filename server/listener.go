package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/netpoll"
	"golang.org/x/sys/unix"
)

// listen opens the client listener, with SO_REUSEPORT when REUSEPORT is
// set so that several gateway processes can share HOST:PORT (the kernel
// spreads new connections over them by a hash of the client's address).
func listen(cfg Settings) (net.Listener, error) {
	var lc net.ListenConfig
	if cfg.ReusePort {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("SO_REUSEPORT: %w", serr)
			}
			return nil
		}
	}
	return lc.Listen(context.Background(), "tcp", cfg.Addr())
}

// stoppableListener is the client listener as netpoll sees it, plus a way to
// stop accepting without closing the descriptor netpoll watches: closing it
// under netpoll (which keeps a duplicate and later detaches and closes that
// number) risks acting on a reused descriptor, and netpoll's own Shutdown
// would also close live sessions. shutdown(SHUT_RD) on a listening socket
// takes it out of the listening hash (and out of its SO_REUSEPORT group), so
// the kernel sends new connections elsewhere or refuses them, while the
// descriptor stays ours until Shutdown closes it.
type stoppableListener struct {
	netpoll.Listener // netpoll's conversion of the socket
	raw              syscall.RawConn
	stopped          atomic.Bool
}

func newStoppableListener(ln net.Listener) (*stoppableListener, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("listener %T has no descriptor", ln)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	npln, err := netpoll.ConvertListener(ln)
	if err != nil {
		return nil, fmt.Errorf("adopting the listener: %w", err)
	}
	return &stoppableListener{Listener: npln, raw: raw}, nil
}

// Accept is netpoll's, until the listener is stopped (then "nothing to
// accept", so netpoll does not log the shut socket's EINVAL).
func (l *stoppableListener) Accept() (net.Conn, error) {
	if l.stopped.Load() {
		return nil, nil
	}
	return l.Listener.Accept()
}

// acceptQueueLen is the number of connections the kernel has completed and
// nobody has accepted yet (tcpi_unacked of a listening socket).
func (l *stoppableListener) acceptQueueLen() (int, error) {
	var n int
	var serr error
	err := l.raw.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if serr == nil {
			n = int(info.Unacked)
		}
	})
	return n, errors.Join(err, serr)
}

// stop waits (up to wait) until netpoll has accepted everything queued, then
// stops listening. A connection that completes its handshake in the
// microseconds between the last check and the shutdown is reset, unless
// net.ipv4.tcp_migrate_req=1 moves it to another socket of the same
// SO_REUSEPORT group. It returns how many were still queued when it gave up
// waiting (0 normally).
func (l *stoppableListener) stop(wait time.Duration) (int, error) {
	deadline := time.Now().Add(wait)
	queued, err := l.acceptQueueLen()
	for err == nil && queued > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		queued, err = l.acceptQueueLen()
	}
	l.stopped.Store(true)
	var serr error
	if cerr := l.raw.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_RD) }); cerr != nil {
		return queued, cerr
	}
	return queued, errors.Join(err, serr)
}
