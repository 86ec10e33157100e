package server

// GPT-Live's warm pool on the session path (LIVE_POOL_SIZE, off by
// default). The pool itself (upstream/livepool.go) holds upgraded,
// unstarted sockets per upstream URL and header set; here the gateway
// fills it for every Live deployment, and a Live session whose
// session.start has named its model takes one for its first-choice
// deployment instead of dialing: session.start is written on it first
// (Pool.TakeLive), and a socket found dead before that write is replaced by
// the next one, or by the ordinary dial, without the client seeing it.
//
// Off by default because two things cannot be measured offline: how long
// OpenAI keeps an upgraded socket on which no session.start came (not
// documented; LIVE_POOL_MAX_IDLE_SECS should stay below it), and whether
// unstarted sockets count against the per-model concurrent-session cap.

import (
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/poller"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/upstream"
)

// liveTakeTries bounds the pooled sockets a session tries before it dials.
const liveTakeTries = 3

// newLivePool makes the Live pool when LIVE_POOL_SIZE is set (nil
// otherwise): pinged as the Realtime pool's sockets are, within the
// descriptors sessions leave free, its metrics rtgate_live_pool_*.
func newLivePool(cfg Settings, d *upstream.Dialer, sessions *atomic.Int64, log *slog.Logger, reg prometheus.Registerer) *upstream.Pool {
	lc := cfg.LivePool
	if lc.Size <= 0 {
		return nil
	}
	lc.PingInterval, lc.PongTimeout = cfg.Pool.PingInterval, cfg.Pool.PongTimeout
	fdLimit := openFileLimit()
	lc.Spare = func() int { return fdLimit - fdReserve - 2*int(sessions.Load()) }
	log.Info("GPT-Live warm pool on", "size", lc.Size, "max_idle", lc.MaxIdle)
	return upstream.NewLivePool(d, lc, log, upstream.NewPoolMetricsNamed(reg, "rtgate_live_pool"))
}

// primeLivePool fills the Live pool for every Live deployment (pool nil:
// off).
func primeLivePool(pool *upstream.Pool, r *routes.Table) {
	if pool == nil {
		return
	}
	for g, ds := range r.Groups {
		for _, d := range ds {
			if d.Protocol == routes.ProtocolLive {
				pool.Prime(target(d, nil, nil), g)
			}
		}
	}
}

// fromPool starts the session on a pooled socket of deployment d, writing
// st (rewritten for d) first; it reports false when the pool is off or
// gave nothing, and the caller dials.
func (ls *liveState) fromPool(d *routes.Deployment, group string, st protocol.Start) bool {
	s, info := ls.srv, ls.info
	if s.livePool == nil {
		return false
	}
	hold, err := s.livePool.TakeLive(target(d, nil, ls.hdr), group, st.For(d.Model), liveTakeTries)
	if err != nil {
		return false
	}
	adopted := ls.sess.AdoptWarm(func(o poller.Owner) (*poller.Handle, []byte) {
		h, held := hold.Adopt(o)
		if h != nil {
			info.poolHit = true
			info.attached(s.balancer, d) // before its first frame reaches the client
		}
		return h, held
	})
	if !adopted {
		// It died after session.start went, before the session owned
		// it: nothing reached the client, so the ordinary dial (and a
		// fresh session.start) follows.
		hold.Handle().Endpoint().Drop()
		return false
	}
	s.balancer.Succeeded(d)
	return true
}
