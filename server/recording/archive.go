package recording

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ArchiveConfig says where recordings go and how long they stay.
type ArchiveConfig struct {
	// Dir is the directory recordings are written to when S3.Bucket is "".
	Dir string
	// S3 is the bucket recordings are written to when S3.Bucket is set.
	S3 S3Config
	// Retention: 0 keeps recordings forever; else a recording older than
	// it (by its newest object's time in the store) is deleted, checked
	// once at start and every Retention/10 (at least every hour, at most
	// every second).
	Retention time.Duration
	// MaxBuffer is the most recording bytes held in memory while waiting
	// for the store (0 = 256 MiB); past it a recording is dropped and
	// counted in rtgate_recordings_dropped_total.
	MaxBuffer int
	// Now is the retention's clock (nil = time.Now), for tests that make a
	// recording old without waiting.
	Now func() time.Time
	// RetryMin is the first wait after a failed write; it doubles up to 30 s
	// (0 = 1 s).
	RetryMin time.Duration
}

// Archive stores finished recordings asynchronously: Save queues, one
// goroutine writes in order and retries a write that failed (an outage of
// the store) until it succeeds, holding at most MaxBuffer bytes meanwhile.
// A janitor deletes recordings past the retention.
type Archive struct {
	cfg   ArchiveConfig
	store Store
	log   *slog.Logger
	m     archiveMetrics

	mu       sync.Mutex
	queue    []*Recording
	buffered int
	closed   bool

	wake        chan struct{} // a Save for the writer
	stop        chan struct{} // closed by Close
	abort       context.CancelFunc
	writeCtx    context.Context
	writerDone  chan struct{}
	janitorDone chan struct{}
}

type archiveMetrics struct {
	saved, dropped, failures, deleted prometheus.Counter
	buffered                          prometheus.Gauge
}

// NewArchive opens the store (a directory by default, S3 when
// cfg.S3.Bucket is set) and starts the writer and, with a retention, the
// janitor. reg may be nil (no metrics registered).
func NewArchive(cfg ArchiveConfig, reg prometheus.Registerer, log *slog.Logger) (*Archive, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var store Store
	switch {
	case cfg.S3.Bucket != "":
		s, err := NewS3Store(cfg.S3)
		if err != nil {
			return nil, err
		}
		store = s
	case cfg.Dir != "":
		store = DirStore(cfg.Dir)
	default:
		return nil, errors.New("recording: neither a directory nor an S3 bucket configured")
	}
	if cfg.MaxBuffer <= 0 {
		cfg.MaxBuffer = 256 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = time.Second
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("recording: negative retention %s", cfg.Retention)
	}
	m, err := newArchiveMetrics(reg)
	if err != nil {
		return nil, err
	}
	a := &Archive{cfg: cfg, store: store, log: log, m: m, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		writerDone: make(chan struct{}), janitorDone: make(chan struct{})}
	a.writeCtx, a.abort = context.WithCancel(context.Background())
	go a.writer()
	if cfg.Retention > 0 {
		go a.janitor()
	} else {
		close(a.janitorDone)
	}
	return a, nil
}

func newArchiveMetrics(reg prometheus.Registerer) (archiveMetrics, error) {
	m := archiveMetrics{
		saved: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_recordings_saved_total",
			Help: "Session recordings written whole to the store."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_recordings_dropped_total",
			Help: "Session recordings lost: past the buffer (RECORDINGS_MAX_BUFFER) while the store was failing, or still unwritten at shutdown."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_recordings_write_failures_total",
			Help: "Failed attempts to write a recording to the store (each is retried)."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_recordings_deleted_total",
			Help: "Session recordings deleted by the retention."}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtgate_recordings_buffered_bytes",
			Help: "Bytes of recordings waiting to be written to the store."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.saved, m.dropped, m.failures, m.deleted, m.buffered} {
		if err := reg.Register(c); err != nil {
			return m, fmt.Errorf("recording: metrics: %w", err)
		}
	}
	return m, nil
}

// Store is where the archive writes.
func (a *Archive) Store() Store { return a.store }

// Save queues rec for the store and returns at once.
func (a *Archive) Save(rec *Recording) {
	if rec == nil {
		return
	}
	size := rec.Size()
	a.mu.Lock()
	switch {
	case a.closed:
		a.mu.Unlock()
		a.m.dropped.Inc()
		a.log.Warn("recording dropped: the archive is closed", "session_id", rec.SessionID)
		return
	case a.buffered+size > a.cfg.MaxBuffer:
		held := a.buffered
		a.mu.Unlock()
		a.m.dropped.Inc()
		a.log.Warn("recording dropped: the buffer is full while the store catches up", "session_id", rec.SessionID,
			"bytes", size, "buffered_bytes", held, "max_buffer", a.cfg.MaxBuffer)
		return
	}
	a.queue = append(a.queue, rec)
	a.buffered += size
	a.m.buffered.Set(float64(a.buffered))
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *Archive) head() (*Recording, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) == 0 {
		return nil, a.closed
	}
	return a.queue[0], false
}

func (a *Archive) pop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec := a.queue[0]
	a.queue[0] = nil
	a.queue = a.queue[1:]
	a.buffered -= rec.Size()
	a.m.buffered.Set(float64(a.buffered))
}

// writer writes the queue in order, retrying the head until it lands; it
// returns once closed and empty, or aborted.
func (a *Archive) writer() {
	defer close(a.writerDone)
	wait := a.cfg.RetryMin
	for {
		rec, closed := a.head()
		if rec == nil {
			if closed {
				return
			}
			select {
			case <-a.wake:
			case <-a.stop:
			}
			continue
		}
		ctx, cancel := context.WithTimeout(a.writeCtx, 2*time.Minute)
		err := Write(ctx, a.store, rec)
		cancel()
		if err == nil {
			a.pop()
			a.m.saved.Inc()
			wait = a.cfg.RetryMin
			continue
		}
		a.m.failures.Inc()
		if a.writeCtx.Err() != nil {
			return
		}
		a.log.Warn("recording: the store failed a write; retrying", "session_id", rec.SessionID, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-a.writeCtx.Done():
			t.Stop()
			return
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// Close stops taking recordings, writes what is queued until ctx ends, and
// stops the janitor. Recordings still unwritten then are dropped, counted
// and reported in the error.
func (a *Archive) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	close(a.stop)
	var err error
	select {
	case <-a.writerDone:
	case <-ctx.Done():
		a.abort()
		<-a.writerDone
		a.mu.Lock()
		n, b := len(a.queue), a.buffered
		a.queue, a.buffered = nil, 0
		a.m.buffered.Set(0)
		a.mu.Unlock()
		if n > 0 {
			a.m.dropped.Add(float64(n))
			err = fmt.Errorf("recording: %d recordings (%d bytes) not stored: %w", n, b, ctx.Err())
		}
	}
	a.abort()
	<-a.janitorDone
	return err
}

func (a *Archive) janitor() {
	defer close(a.janitorDone)
	every := min(max(a.cfg.Retention/10, time.Second), time.Hour)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := a.Sweep(a.writeCtx); err != nil && a.writeCtx.Err() == nil {
			a.log.Warn("recording: retention sweep failed", "err", err)
		}
		select {
		case <-t.C:
		case <-a.stop:
			return
		}
	}
}

// Sweep deletes, now, the recordings older than the retention (what the
// janitor does on its schedule) and returns how many it deleted. A
// recording's age is its newest object's time in the store, so one still
// being written is young. With no retention it deletes nothing.
func (a *Archive) Sweep(ctx context.Context) (int, error) {
	if a.cfg.Retention <= 0 {
		return 0, nil
	}
	objs, err := a.store.List(ctx, "")
	if err != nil {
		return 0, err
	}
	cutoff := a.cfg.Now().Add(-a.cfg.Retention)
	type rec struct {
		newest time.Time
		keys   []string
	}
	recs := map[string]*rec{}
	var order []string
	for _, o := range objs {
		sid, _, ok := strings.Cut(o.Key, "/")
		if !ok {
			continue // not a recording's
		}
		r := recs[sid]
		if r == nil {
			r = &rec{}
			recs[sid] = r
			order = append(order, sid)
		}
		if o.LastModified.After(r.newest) {
			r.newest = o.LastModified
		}
		r.keys = append(r.keys, o.Key)
	}
	deleted := 0
	for _, sid := range order {
		r := recs[sid]
		if !r.newest.Before(cutoff) {
			continue
		}
		// meta.json first: a recording without it is not whole, and no
		// reader takes it for one while the rest goes.
		keys := append([]string{sid + "/" + MetaObject}, r.keys...)
		for _, k := range keys {
			if err := a.store.Delete(ctx, k); err != nil {
				return deleted, err
			}
		}
		deleted++
		a.m.deleted.Inc()
	}
	if deleted > 0 {
		a.log.Info("recording: retention deleted recordings", "count", deleted, "older_than", cutoff)
	}
	return deleted, nil
}
