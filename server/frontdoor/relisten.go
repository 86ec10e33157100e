// The client listener served again when netpoll lets go of it.
//
// netpoll's Serve returns when its poller reports a hang-up on the listening
// socket. StopAccepting's shutdown(SHUT_RD) is one, and how serving ends.
// Any other leaves a socket that may well still listen with no poller
// watching it: connects complete in the kernel, wait in the accept queue and
// are never accepted, and a client's upgrade goes unanswered, in silence.
// netpoll's race build does exactly that (docs/known-issues.md): it finds
// an event's handler by descriptor number, so a hang-up fetched for a socket
// that was then closed, and whose number the listener took, is delivered to
// the listener.
//
// So a Serve that returns while the gateway is not stopping is logged,
// counted (rtgate_listener_restarts_total) and run again, on a new event
// loop, as long as the socket still listens. When it cannot be (the socket
// no longer listens, or netpoll gave it up again at once maxQuickReturns
// times in a row), Door.Serve returns the error and cmd/gateway exits
// non-zero, so that a supervisor starts a fresh process rather than leave
// one that accepts nothing.
//
// Why a new event loop rather than netpoll's Serve again on the old one:
// netpoll's Shutdown closes the listener of the server its loop last
// started. A Shutdown that came between the return and a second Serve on the
// same loop would close the socket, and that Serve would then poll a closed
// descriptor number, perhaps already another socket's. A new loop that
// Shutdown finds before its Serve has started closes nothing, and the
// listener's end-of-serving bookkeeping closes the socket once
// (stoppableListener.serveEnded). The old loop is dropped, not shut down:
// its Shutdown would detach and close the listener under the new loop.
// Connections it accepted live on (they belong to their pollers, not to the
// loop) and are ended by Door.Shutdown's hang-up of every client
// connection, like all others.

package frontdoor

import (
	"errors"
	"fmt"
	"time"

	"github.com/cloudwego/netpoll"
)

const (
	// quickReturn: a netpoll Serve that ends sooner than this after it
	// began gave the listener up at once.
	quickReturn = time.Second
	// maxQuickReturns quick returns in a row and the listener is not served
	// again: something keeps taking it away, and a fresh process is the
	// better cure than a loop.
	maxQuickReturns = 3
)

// serveListener runs netpoll's Serve on sl until StopAccepting stops it
// (nil), or until netpoll lets go of it and it cannot be served again (the
// error).
func (f *Door) serveListener(loop netpoll.EventLoop, sl *stoppableListener) error {
	quick := 0
	for {
		began := time.Now()
		err := loop.Serve(sl)
		if sl.stopped.Load() {
			return nil // StopAccepting shut it: that is how serving ends
		}
		if err == nil {
			err = errors.New("netpoll's Serve returned without an error")
		}
		if time.Since(began) < quickReturn {
			quick++
		} else {
			quick = 0
		}
		if why := canServeAgain(sl, quick); why != nil {
			err = fmt.Errorf("client listener %s: netpoll stopped serving it (%w) and it cannot be served again: %w",
				sl.Addr(), err, why)
			f.log.Error("client listener lost while the gateway runs; no new client can connect", "err", err)
			return err
		}
		next, nerr := f.newEventLoop()
		if nerr != nil {
			return fmt.Errorf("client listener %s: serving it again after %w: %w", sl.Addr(), err, nerr)
		}
		// Under f.mu, as shutdown reads f.loop as it marks the front door
		// closing: either shutdown finds the new loop, or this finds it
		// closing.
		f.mu.Lock()
		stopping := f.closing
		if !stopping {
			f.loop = next
		}
		f.mu.Unlock()
		if stopping {
			return nil // shutdown has begun; it stops and closes the listener
		}
		loop = next
		f.restarts.Inc()
		f.log.Warn("client listener: netpoll stopped serving it while the gateway runs; serving it again "+
			"(docs/known-issues.md)", "addr", sl.Addr().String(), "err", err)
	}
}

// canServeAgain says why sl cannot be served again (nil if it can), after
// quick returns of netpoll's Serve in a row.
func canServeAgain(sl *stoppableListener, quick int) error {
	if quick > maxQuickReturns {
		return fmt.Errorf("netpoll gave it up within %s of serving it %d times in a row", quickReturn, quick)
	}
	return sl.listening()
}
