package load

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// VoiceOptions shape a sustained voice run: N sessions that each, for
// Duration, send an input_audio_buffer.append of one Interval of 24 kHz PCM16
// every Interval and receive the upstream's audio deltas (mockai -stream sends
// one per Interval), as a call in progress does.
type VoiceOptions struct {
	N           int
	Concurrency int           // sessions being opened at once
	Duration    time.Duration // the measured streaming window
	// Warmup is how long every session streams before the window opens: the
	// upstream's pacers start, buffers grow and the relay's pools fill there, so
	// the window sees the steady state of calls in progress. Nothing sent or
	// received in it is counted.
	Warmup   time.Duration
	Interval time.Duration // append pace (default 20 ms)
	// AtStart and AtEnd, if set, are called at the window's edges (a harness
	// reads the relay's CPU there).
	AtStart, AtEnd func()
}

// lateAfter is how far behind its slot a send may start and still count as on
// time: half an interval, after which a real-time voice client would leave a
// gap the listener can hear.
func lateAfter(interval time.Duration) time.Duration { return interval / 2 }

// VoiceResult is what a voice run saw, in the measured window (after the
// warm-up). Expected counts are per the schedule: every open session sends
// Duration/Interval appends in the window and should receive as many deltas.
type VoiceResult struct {
	Sessions int            `json:"sessions"` // asked for
	Opened   int            `json:"opened"`
	Failures map[string]int `json:"failures,omitempty"` // sessions that did not open, by class
	// Lost counts sessions that ended or failed during the window, by class.
	Lost     map[string]int `json:"lost,omitempty"`
	Window   time.Duration  `json:"window_ns"`
	Warmup   time.Duration  `json:"warmup_ns"`
	Interval time.Duration  `json:"interval_ns"`
	// SentExpected appends were scheduled; Sent were written; LateSends
	// started more than half an interval after their slot (MaxLate the worst).
	SentExpected int64         `json:"sent_expected"`
	Sent         int64         `json:"sent"`
	LateSends    int64         `json:"late_sends"`
	MaxLate      time.Duration `json:"max_late_ns"`
	// Received audio deltas arrived during the window, of RecvExpected.
	RecvExpected int64         `json:"received_expected"`
	Received     int64         `json:"received"`
	OpenTime     time.Duration `json:"open_ns"`
	CPU          time.Duration `json:"wsbench_cpu_ns"` // this process, over the window
}

// voiceAppend is one interval of silent 24 kHz PCM16 mono as an append.
func voiceAppend(interval time.Duration) []byte {
	pcm := make([]byte, int(interval/time.Millisecond)*48)
	return []byte(`{"type":"input_audio_buffer.append","audio":"` + base64.StdEncoding.EncodeToString(pcm) + `"}`)
}

// Voice opens opts.N sessions, streams audio both ways on all of them for
// opts.Duration, and closes them.
func Voice(ctx context.Context, client *Client, opts VoiceOptions) (*VoiceResult, error) {
	if opts.Interval == 0 {
		opts.Interval = audioChunk
	}
	if opts.N <= 0 || opts.Concurrency <= 0 || opts.Duration <= 0 || opts.Warmup < 0 || opts.Interval < time.Millisecond {
		return nil, fmt.Errorf("load: voice needs positive N, concurrency and duration, a warm-up of 0 or more and an interval of 1ms or more, got %d, %d, %v, %v, %v",
			opts.N, opts.Concurrency, opts.Duration, opts.Warmup, opts.Interval)
	}
	res := &VoiceResult{Sessions: opts.N, Failures: map[string]int{}, Lost: map[string]int{}, Interval: opts.Interval}
	conns := make([]*websocket.Conn, opts.N)
	begin := time.Now()
	var mu sync.Mutex
	ForEach(ctx, opts.N, opts.Concurrency, func(i int) {
		conn, s := client.Open(ctx)
		if conn == nil {
			mu.Lock()
			res.Failures[s.Failure]++
			mu.Unlock()
			return
		}
		conns[i] = conn
	})
	res.OpenTime = time.Since(begin)
	var open []*websocket.Conn
	for _, c := range conns {
		if c != nil {
			open = append(open, c)
		}
	}
	res.Opened = len(open)
	if res.Opened == 0 || ctx.Err() != nil {
		closeConns(open)
		return res, ctx.Err()
	}

	// Slots [0, warm) are the warm-up, [warm, slots) the measured window.
	warm := int64(opts.Warmup / opts.Interval)
	slots := warm + int64(opts.Duration/opts.Interval)
	res.Window, res.Warmup = time.Duration(slots-warm)*opts.Interval, time.Duration(warm)*opts.Interval
	res.SentExpected, res.RecvExpected = (slots-warm)*int64(res.Opened), (slots-warm)*int64(res.Opened)
	msg := voiceAppend(opts.Interval)
	// Streaming starts a moment from now, so every session's goroutines are
	// ready for it; sessions' slots are spread evenly over one interval.
	t0 := time.Now().Add(100 * time.Millisecond)
	w0 := t0.Add(res.Warmup) // the measured window
	end := w0.Add(res.Window)
	var (
		sent, late, recv atomic.Int64
		maxLate          atomic.Int64
		writers, readers sync.WaitGroup
		lost             = map[string]int{}
	)
	markLost := func(class string) {
		mu.Lock()
		lost[class]++
		mu.Unlock()
	}
	var closing atomic.Bool
	for i, conn := range open {
		offset := opts.Interval * time.Duration(i) / time.Duration(len(open))
		failed := make(chan struct{})
		writers.Go(func() {
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			// One deadline for the whole run, not one per write: setting it is a
			// measurable share of the client's CPU at thousands of writes a second.
			_ = conn.SetWriteDeadline(end.Add(10 * time.Second))
			for k := range slots {
				slot := t0.Add(offset + time.Duration(k)*opts.Interval)
				timer.Reset(time.Until(slot))
				select {
				case <-failed:
					return
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				counted := k >= warm
				if d := time.Since(slot); counted && d > lateAfter(opts.Interval) {
					late.Add(1)
					for m := maxLate.Load(); int64(d) > m && !maxLate.CompareAndSwap(m, int64(d)); m = maxLate.Load() {
					}
				}
				if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
					return // the reader names the failure
				}
				if counted {
					sent.Add(1)
				}
			}
		})
		readers.Go(func() {
			defer close(failed)
			head := make([]byte, 64)
			for {
				_, r, err := conn.NextReader()
				if err != nil {
					if !closing.Load() {
						class, _ := classifyRead(ctx, err, PhaseSession)
						markLost(class)
					}
					return
				}
				n, _ := io.ReadFull(r, head)
				if _, err := io.Copy(io.Discard, r); err != nil {
					continue // the next NextReader reports it
				}
				typ, err := EventType(head[:n])
				if err == nil && (typ == evAudioDeltaGA || typ == evAudioDeltaBeta) {
					if now := time.Now(); !now.Before(w0) && now.Before(end) {
						recv.Add(1)
					}
				} else if typ == evError && !closing.Load() {
					markLost("error_event")
				}
			}
		})
	}
	var cpu0 time.Duration
	if sleepUntil(ctx, w0) {
		cpu0 = ProcessCPU()
		if opts.AtStart != nil {
			opts.AtStart()
		}
		if sleepUntil(ctx, end) && opts.AtEnd != nil {
			opts.AtEnd()
		}
		res.CPU = ProcessCPU() - cpu0
	}
	writers.Wait()
	closing.Store(true)
	closeConns(open)
	readers.Wait()
	res.Sent, res.LateSends, res.Received = sent.Load(), late.Load(), recv.Load()
	res.MaxLate = time.Duration(maxLate.Load())
	res.Lost = lost
	return res, ctx.Err()
}

// closeConns sends close 1000 on each connection and drops it.
func closeConns(conns []*websocket.Conn) {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	deadline := time.Now().Add(time.Second)
	for _, c := range conns {
		_ = c.WriteControl(websocket.CloseMessage, msg, deadline)
		_ = c.Close()
	}
}

// sleepUntil waits until t or ctx's end; false means ctx ended.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
