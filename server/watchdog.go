package server

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"time"

	"github.com/gobwas/ws"
	"github.com/prometheus/client_golang/prometheus"

	"rtgate/frames"
	"rtgate/internal/every"
	"rtgate/internal/sysmem"
	"rtgate/poller"
	"rtgate/server/session"
)

// The watchdog is one goroutine for the whole gateway, not a timer per
// session: every tick it walks the live sessions and ends those that have
// been idle too long, have lived too long, or have a side that fell more
// than MaxStalledBytes behind (netpoll keeps reading the other side and
// cannot pause it, so what waits is the memory a slow peer costs). A side
// that is still reading, only slower than the other side sends (a phone on
// a slow link in front of a long answer), is kept up to that ceiling; a
// side that reads nothing at all is not the watchdog's: its backlog writer
// closes the socket once the kernel has taken nothing for WriteTimeout
// (poller.Endpoint's backlog). A session over the ceiling is caught within
// watchdogTick+stallGrace of passing it, so its backlog stays under
// MaxStalledBytes plus 0.2 s of the other side's sending rate. The walk for
// stalls runs only while some socket has a backlog (see watchdog).
//
// MaxStalledBytes bounds one session; MaxBufferedBytes bounds them all
// together, since 10,000 slow mobile clients each under the per-session cap
// could still hold 640 GB. When the backlogs the walk finds add up to more
// than the budget, the sessions holding the most are ended first, until the
// rest fit: the slow socket is closed under its blocked write (an error
// event cannot reach a peer that is not reading) and the other side gets a
// close frame, the upstream 1001. rtgate_sessions_ended_total{reason=
// "memory_budget"} counts them.
//
// What the budget counts is the bytes waiting in netpoll's input buffers
// behind a stalled write (Session.Stalled), not the heap they occupy, which
// netpoll does not expose: it allocates input nodes as large as the longest
// backlog the connection has seen (its read-size hint only grows, up to
// 8 MiB), and the batch already handed to the blocked Flush stays pinned. In
// BenchmarkBacklogResidue and BenchmarkStalledClientsMemoryBudget the heap
// held was 1.5 to 2.1 times the bytes counted, hence a default of a quarter
// of GOMEMLIMIT. After a backlog drains, an idle session keeps about 5 KiB
// more heap than before over ws:// and about 50 KiB over wss:// (crypto/tls's
// grown input buffer); netpoll's grown read size makes later bursts allocate
// nodes that large again, which the budget sees only as the bytes they hold.
const (
	watchdogTick = 100 * time.Millisecond
	stallGrace   = 100 * time.Millisecond
)

// memoryBudget is the global bound on bytes held for slow peers.
type memoryBudget struct {
	max      int64
	ended    *prometheus.CounterVec // sessions ended by the watchdog, by reason
	buffered prometheus.Gauge       // backlog bytes found by the last walk
}

func (b *memoryBudget) init(cfg Settings, reg prometheus.Registerer) {
	b.max = cfg.MaxBufferedBytes
	b.ended = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_sessions_ended_total",
		Help: "Sessions the watchdog ended: stalled (one session over MAX_STALLED_BYTES) or memory_budget " +
			"(the backlogs of all sessions with a slow peer over MAX_BUFFERED_BYTES; the largest go first)."}, []string{"reason"})
	for _, r := range []string{endedStalled, endedBudget} {
		b.ended.WithLabelValues(r) // a series per reason from the start, at 0
	}
	b.buffered = prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtgate_stalled_buffered_bytes",
		Help: "Bytes waiting behind writes to peers slower than their other side, summed over sessions at the last watchdog walk."})
	writeTimeouts := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rtgate_write_timeouts_total",
		Help: "Sockets dropped because the kernel took nothing from them for WRITE_TIMEOUT_SECS (peers that stopped reading), client and upstream, since the process started."},
		func() float64 { return float64(poller.WriteTimeouts()) })
	reg.MustRegister(b.ended, b.buffered, writeTimeouts)
}

const (
	endedStalled = "stalled"
	endedBudget  = "memory_budget"
)

// A watchdog walks the live sessions on a tick. The walk for stalls runs
// every watchdogTick, but only while some socket of the process has a
// backlog (poller.Backlogged), which is rare; the walk for the duration and
// idle limits, whose units are seconds, runs every limitsEvery. So an idle
// session costs the watchdog one look a second: measured before, a walk of
// every session every 100 ms cost 0.53 cores for 100,000 idle sessions
// (about 0.6 µs a session a walk, mostly cache misses on the two sockets'
// backlog fields).
type watchdog struct {
	live        func() []session.Live
	log         *slog.Logger
	budget      *memoryBudget
	maxStalled  int           // MaxStalledBytes
	maxDuration time.Duration // MaxSessionDuration, 0 for none
	idleTimeout time.Duration // IdleTimeout, 0 for none
	lastLimits  time.Time     // the last walk for the duration and idle limits
}

// limitsEvery is how often the watchdog checks the sessions' duration and
// idle limits (seconds and minutes, so a second late at most).
const limitsEvery = time.Second

func (s *Server) newWatchdog() *watchdog {
	return &watchdog{live: s.sessions.Live, log: s.log, budget: &s.memBudget,
		maxStalled: s.cfg.MaxStalledBytes, maxDuration: s.cfg.MaxSessionDuration, idleTimeout: s.cfg.IdleTimeout}
}

func (w *watchdog) run(ctx context.Context) { every.Tick(ctx, watchdogTick, w.tick) }

// backlog is a stalled session and what waits behind it.
type backlog struct {
	sess    *poller.Session
	side    frames.Side
	waiting int
}

func (w *watchdog) tick(now time.Time) {
	limits := now.Sub(w.lastLimits) >= limitsEvery
	stalls := poller.Backlogged() > 0
	if !limits && !stalls {
		w.budget.buffered.Set(0)
		return
	}
	if limits {
		w.lastLimits = now
	}
	var stalled []backlog
	var total int64
	for _, l := range w.live() {
		sess := l.Session
		if stalls {
			if side, waiting, ok := sess.Stalled(now, stallGrace); ok {
				if waiting > w.maxStalled {
					w.log.Warn("dropping a session whose "+side.String()+" fell too far behind",
						"waiting_bytes", waiting, "limit", w.maxStalled)
					w.budget.ended.WithLabelValues(endedStalled).Inc()
					go sess.Abort(side, side.String()+" too slow: output backlog over limit")
					continue
				}
				stalled = append(stalled, backlog{sess, side, waiting})
				total += int64(waiting)
				continue
			}
		}
		if !limits {
			continue
		}
		d := w.maxDuration
		if l.MaxSecs > 0 {
			d = time.Duration(l.MaxSecs) * time.Second // the key's max_session_secs
		}
		if d > 0 && now.Sub(l.Start) > d {
			go l.End(ws.StatusGoingAway, "maximum session duration reached", "session_max_duration",
				"The session reached the gateway's maximum duration of "+d.String()+".")
			continue
		}
		if d := w.idleTimeout; d > 0 && sess.Idle(now) > d {
			go l.End(ws.StatusNormalClosure, "idle timeout", "session_idle_timeout",
				"No frames in either direction for "+d.String()+"; the gateway closed the session.")
		}
	}
	w.budget.buffered.Set(float64(total))
	w.enforceBudget(stalled, total)
}

// enforceBudget ends the stalled sessions holding the most bytes until the
// rest fit in MaxBufferedBytes.
func (w *watchdog) enforceBudget(stalled []backlog, total int64) {
	if w.budget.max <= 0 || total <= w.budget.max {
		return
	}
	slices.SortFunc(stalled, func(a, b backlog) int { return cmp.Compare(b.waiting, a.waiting) })
	ended := 0
	for _, b := range stalled {
		if total <= w.budget.max {
			break
		}
		total -= int64(b.waiting)
		ended++
		w.budget.ended.WithLabelValues(endedBudget).Inc()
		go b.sess.Abort(b.side, b.side.String()+" too slow: gateway memory budget for slow peers exceeded")
	}
	w.log.Warn("ended the sessions holding the most unsent bytes: over MAX_BUFFERED_BYTES",
		"sessions", ended, "limit", w.budget.max, "left_bytes", total)
}

// defaultMaxBufferedBytes is a quarter of GOMEMLIMIT when one is set, else
// an eighth of the memory the process may use (the machine's RAM, or the
// cgroup's limit when lower). What waits for slow peers sits in netpoll's
// buffers on the Go heap, so GOMEMLIMIT is the figure to divide; the rest of
// it is for the sessions themselves, TLS state and the collector's headroom.
// Without GOMEMLIMIT the gateway may share the machine, hence the smaller
// share. 0 (no limit found) turns the budget off.
func defaultMaxBufferedBytes() int64 {
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 {
		return lim / 4
	}
	return sysmem.Available() / 8
}
