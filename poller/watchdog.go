package poller

import (
	"sync/atomic"
	"time"

	"rtgate/frames"
)

// Read-only queries for the server's watchdog. They take no locks, so a
// sweep over every session costs a few loads each.

func nowNano() int64 { return time.Now().UnixNano() }

// writeTimeouts counts sockets a backlog writer dropped because the kernel
// took nothing from it for the write timeout: peers that stopped reading.
// A metric, process-wide: the only package-level state that changes.
var writeTimeouts atomic.Uint64

// backlogged counts the sockets whose writer goroutine runs: those with
// bytes the kernel has not taken yet. A gauge, process-wide like
// writeTimeouts: it lets the server's watchdog skip its walk over every
// session for stalls while no socket anywhere has a backlog, which is
// nearly always (an idle session must cost no CPU).
var backlogged atomic.Int64

// Backlogged returns how many sockets in this process have a backlog now
// (bytes written to them that the kernel has not taken).
func Backlogged() int64 { return backlogged.Load() }

// WriteTimeouts returns how many sockets were dropped so far, in this
// process, because the kernel took nothing from them for the connection's
// write timeout (WRITE_TIMEOUT_SECS).
func WriteTimeouts() uint64 { return writeTimeouts.Load() }

// Idle returns how long neither side has sent anything.
func (s *Session) Idle(now time.Time) time.Duration {
	return time.Duration(now.UnixNano() - s.lastActivity.Load())
}

// Stalled reports a side that has not taken what the gateway is writing to
// it for longer than grace, and how many bytes wait for it: the side's own
// backlog plus what netpoll has read from the other side and not yet
// forwarded (netpoll keeps reading).
func (s *Session) Stalled(now time.Time, grace time.Duration) (side frames.Side, waiting int, stalled bool) {
	n := now.UnixNano()
	up := s.upEP.Load()
	if b, since := s.client.ep.Backlog(); since != 0 && time.Duration(n-since) > grace {
		if up != nil {
			b += up.conn.Reader().Len()
		}
		return frames.ClientSide, b, true
	}
	if up != nil {
		if b, since := up.Backlog(); since != 0 && time.Duration(n-since) > grace {
			return frames.UpstreamSide, b + s.client.ep.conn.Reader().Len(), true
		}
	}
	return 0, 0, false
}

// Buffered returns the bytes the session holds in the gateway's memory
// for sockets that have not taken them: both backlogs. It takes no locks.
func (s *Session) Buffered() int {
	n, _ := s.client.ep.Backlog()
	if up := s.upEP.Load(); up != nil {
		b, _ := up.Backlog()
		n += b
	}
	return n
}

// Terminating reports whether the gateway already started ending the
// session.
func (s *Session) Terminating() bool { return s.terminating.Load() }

// UpstreamUnavailable reports whether the upstream could not be reached.
func (s *Session) UpstreamUnavailable() bool {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	return s.upState == upFailed
}
