package server

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"rtgate/frames"
	"rtgate/server/cluster"
)

// The Redis admission check runs in a goroutine of its own, never in
// netpoll's handler (which may one day run on the poller itself): the
// handler hands the connection over, and while the check is out any bytes
// the client sends are collected behind the request head. When the verdict
// is in, the goroutine runs handle again on the same head; admit then
// returns the verdict instead of checking again, and the request is refused
// or the session opened as it would have been at once.
//
//	state       event                          next
//	http        complete head, key has limits  pending (goroutine started)
//	pending     client bytes                   pending (appended behind head)
//	pending     verdict                        done (refused) or relay (opened)
//
// netpoll's close callback does not wait for that goroutine, so while a check
// is out it leaves telling the session to the goroutine (clientGone).
type clusterWait struct {
	pending atomic.Bool // set by the handler, cleared by the goroutine
	mu      sync.Mutex  // held by the goroutine while it finishes the request
	decided bool        // the verdict below is for the head being handled
	verdict *httpError
	gone    atomic.Bool // the client's socket closed
	told    atomic.Bool // the session was told so
}

// clientGone is the close callback's side: it reports whether the cluster
// goroutine tells the session instead (or already did).
func (w *clusterWait) clientGone() bool {
	w.gone.Store(true)
	if w.pending.Load() {
		return true
	}
	return !w.told.CompareAndSwap(false, true)
}

// errAdmitPending is admit's answer when the verdict comes later from the
// cluster goroutine: the handler just returns.
var errAdmitPending = &httpError{message: "admission pending"}

// setupCluster connects the cluster-wide limits when REDIS_URL is set.
func (s *Server) setupCluster() error {
	if s.cfg.RedisURL == "" {
		return nil
	}
	st, err := cluster.NewStore(s.cfg.RedisURL, s.cfg.RedisTimeout)
	if err != nil {
		return err
	}
	s.store = st
	s.admitter = cluster.NewLimiter(st, s.cfg.ClusterLease, s.cfg.ClusterInstances, s.log, s.metrics.reg)
	s.log.Info("per-key limits are cluster-wide", "redis", cluster.RedactURL(s.cfg.RedisURL),
		"instance", st.Instance, "lease", s.cfg.ClusterLease, "timeout", s.cfg.RedisTimeout)
	return nil
}

// admitAsync applies per-key limits that need I/O (Redis): the check is
// started in a goroutine and errAdmitPending returned. sessionsOpen is
// already reserved by the caller.
func (s *Server) admitAsync(c *clientConn, name string, maxSessions int, rate float64) *httpError {
	c.wait.pending.Store(true)
	go func() {
		var herr *httpError
		if r := s.admitter.Admit(name, maxSessions, rate); r != nil {
			herr = keyRefused(r)
		}
		w := &c.wait
		w.mu.Lock()
		defer w.mu.Unlock()
		if herr != nil {
			s.sessionsOpen.Add(-1)
		}
		w.decided, w.verdict = true, herr
		end := headEnd(c.head.B)
		s.handle(c, c.head.B[:end], c.head.B[end:])
		if w.decided && herr == nil {
			// handle refused the request before it reached admit (the
			// configuration was reloaded meanwhile): give the slot back.
			w.decided = false
			s.sessionsOpen.Add(-1)
			s.admitter.Release(name)
		}
		w.pending.Store(false)
		if w.gone.Load() && w.told.CompareAndSwap(false, true) && c.sess != nil {
			s.clientLeft(c.sess) // the socket closed while the check was out
		}
	}()
	return errAdmitPending
}

// takeVerdict returns the cluster verdict for a request handled a second
// time, once.
func (c *clientConn) takeVerdict() (*httpError, bool) {
	if !c.wait.decided {
		return nil, false
	}
	c.wait.decided = false
	return c.wait.verdict, true
}

// bufferWhilePending collects what the client sends while its admission is
// out, and reports whether it did (false: the verdict is in, carry on).
func (c *clientConn) bufferWhilePending() bool {
	c.wait.mu.Lock()
	defer c.wait.mu.Unlock()
	if !c.wait.pending.Load() {
		return false
	}
	err := c.ep.Read(func(src frames.Source) error {
		p, err := src.Next(src.Len())
		c.head.B = append(c.head.B, p...)
		return err
	})
	if (err != nil && !errors.Is(err, net.ErrClosed)) || len(c.head.B) > c.srv.cfg.MaxHeaderBytes+c.srv.cfg.MaxPending {
		_ = c.conn.Close()
	}
	return true
}
