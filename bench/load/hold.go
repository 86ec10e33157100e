package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// HoldOptions shape a hold run: open N sessions, keep them idle, close them.
type HoldOptions struct {
	N           int
	Concurrency int           // sessions being opened at once
	HoldFor     time.Duration // idle time once every session is open
	// CloseWait bounds the close handshake of all sessions together
	// (default 10 s).
	CloseWait time.Duration
	Progress  *Progress
}

// HoldResult is what a hold run saw.
type HoldResult struct {
	// Opening has one sample per attempted session (Reached PhaseSession
	// when it was established).
	Opening []Sample
	// Established sessions received session.created.
	Established int
	// Held sessions were still open at the end of the hold: no close, drop
	// or error event while idle.
	Held int
	// Failed sessions never got established.
	Failed int
	// Lost counts established sessions that ended during the hold, by class.
	Lost map[string]int
	// ClosedClean sessions answered the final close 1000 with a close frame.
	ClosedClean int
	// OpenTime is how long opening all sessions took; Holding how long
	// they were held (shorter than asked if interrupted).
	OpenTime, Holding time.Duration
	CPU               time.Duration
	// MemPerSession is the growth of this process's heap and goroutine
	// stacks while opening, divided by the sessions established: what one
	// idle session costs the load generator (0 if none was established).
	MemPerSession int64
}

// held tracks one established session while it idles.
type held struct {
	sess *session
	// lost names how the session ended or failed during the hold (nil
	// while it is fine).
	lost atomic.Pointer[string]
	// closing is set once the hold is over and our close 1000 is on its
	// way; closedClean once the server answered it with a close frame.
	closing, closedClean atomic.Bool
	done                 chan struct{}
}

// Hold opens opts.N sessions, waits for every session.created, holds them
// idle for opts.HoldFor and then closes them all.
func Hold(ctx context.Context, client *Client, opts HoldOptions) (*HoldResult, error) {
	if opts.N <= 0 || opts.Concurrency <= 0 {
		return nil, fmt.Errorf("load: hold needs positive N and concurrency, got %d and %d", opts.N, opts.Concurrency)
	}
	if opts.HoldFor < 0 {
		return nil, fmt.Errorf("load: negative hold time %v", opts.HoldFor)
	}
	if opts.CloseWait <= 0 {
		opts.CloseWait = 10 * time.Second
	}
	res := &HoldResult{Opening: make([]Sample, opts.N), Lost: map[string]int{}}
	sessions := make([]*held, opts.N)
	mem0 := memInUse()
	cpu0, begin := ProcessCPU(), time.Now()

	// Open with bounded concurrency; each established session gets a
	// watcher that notices a close or error while idle.
	ForEach(ctx, opts.N, opts.Concurrency, func(i int) {
		sess, s := client.openIdle(ctx, time.Now())
		s.Offset = s.Start.Sub(begin)
		res.Opening[i] = s
		if sess != nil {
			h := &held{sess: sess, done: make(chan struct{})}
			sessions[i] = h
			go h.watch()
		}
		if opts.Progress != nil {
			if sess == nil {
				opts.Progress.Failed.Add(1)
			}
			opts.Progress.Done.Add(1)
		}
	})
	res.OpenTime = time.Since(begin)
	var established int64
	for _, h := range sessions {
		if h != nil {
			established++
		}
	}
	if established > 0 {
		res.MemPerSession = max(0, memInUse()-mem0) / established
	}

	holdStart := time.Now()
	timer := time.NewTimer(opts.HoldFor)
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	timer.Stop()
	res.Holding = time.Since(holdStart)

	// Judge first, then close: a session is held if nothing happened to it
	// during the hold.
	var open []*held
	for i, h := range sessions {
		if h == nil {
			if !res.Opening[i].Start.IsZero() {
				res.Failed++
			}
			continue
		}
		res.Established++
		if why := h.lost.Load(); why != nil {
			res.Lost[*why]++
		} else {
			res.Held++
		}
		open = append(open, h)
	}
	res.ClosedClean = closeAll(open, opts.CloseWait)
	res.Opening = trimUnstarted(res.Opening)
	res.CPU = ProcessCPU() - cpu0
	return res, nil
}

// closeAll sends close 1000 on every session, waits (up to wait in total)
// for the servers' close frames, then drops every socket.
func closeAll(open []*held, wait time.Duration) (clean int) {
	deadline := time.Now().Add(wait)
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	for _, h := range open {
		h.closing.Store(true)
		_ = h.sess.conn.NetConn().SetReadDeadline(deadline)
		_ = h.sess.conn.WriteControl(websocket.CloseMessage, msg, deadline)
	}
	for _, h := range open {
		<-h.done
		if h.closedClean.Load() {
			clean++
		}
		_ = h.sess.conn.Close()
	}
	return clean
}

// watch reads an idle session until it ends. Before the hold is over any
// end of the socket or error event marks the session lost; after our close
// 1000, the server's close frame marks it closed cleanly.
func (h *held) watch() {
	defer close(h.done)
	var head [64]byte
	for {
		_, r, err := h.sess.conn.NextReader()
		if err != nil {
			var ce *websocket.CloseError
			isClose := errors.As(err, &ce)
			switch {
			case h.closing.Load():
				if isClose && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseNoStatusReceived) {
					h.closedClean.Store(true)
				}
			case isClose:
				h.markLost(fmt.Sprintf("unexpected_close_%d", ce.Code))
			default:
				h.markLost("unexpected_close_1006")
			}
			return
		}
		// Only the start of an idle-time event matters: is it an error?
		n, _ := io.ReadFull(r, head[:])
		if _, err := io.Copy(io.Discard, r); err != nil {
			continue // the next NextReader reports the failure
		}
		if !h.closing.Load() && bytes.HasPrefix(head[:n], []byte(`{"type":"error"`)) {
			h.markLost("error_event")
		}
	}
}

func (h *held) markLost(why string) { h.lost.CompareAndSwap(nil, &why) }

// memInUse is the live heap plus goroutine stacks, after a collection.
func memInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

func trimUnstarted(samples []Sample) []Sample {
	out := samples[:0]
	for _, s := range samples {
		if !s.Start.IsZero() {
			out = append(out, s)
		}
	}
	return out
}
