package usage

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Record is the account of one ended session: one structured log line,
// and one JSON line in USAGE_LOG.
type Record struct {
	Key         string    `json:"key"`
	ModelGroup  string    `json:"model_group"`
	Deployment  string    `json:"deployment,omitempty"`
	Start       time.Time `json:"start"`
	DurationMS  int64     `json:"duration_ms"`
	PoolHit     bool      `json:"pool_hit"`
	Outcome     string    `json:"outcome"`
	CloseCode   int       `json:"close_code,omitempty"`
	CloseReason string    `json:"close_reason,omitempty"`
	CloseSide   string    `json:"close_side,omitempty"`
	FramesIn    uint64    `json:"frames_in"`
	BytesIn     uint64    `json:"bytes_in"`
	FramesOut   uint64    `json:"frames_out"`
	BytesOut    uint64    `json:"bytes_out"`
	Usage       Usage     `json:"usage"`
}

// LogAttrs are the record as slog attributes, for the session's log line.
func (r Record) LogAttrs() []any {
	u := r.Usage
	attrs := []any{
		"key", r.Key, "model_group", r.ModelGroup, "deployment", r.Deployment,
		"start", r.Start.Format(time.RFC3339Nano), "duration_ms", r.DurationMS,
		"pool_hit", r.PoolHit, "outcome", r.Outcome,
		"frames_in", r.FramesIn, "bytes_in", r.BytesIn, "frames_out", r.FramesOut, "bytes_out", r.BytesOut,
		"responses", u.Responses, "input_tokens", u.InputTokens, "output_tokens", u.OutputTokens,
		"input_audio_tokens", u.InputAudio, "output_audio_tokens", u.OutputAudio,
	}
	if r.CloseSide != "" {
		attrs = append(attrs, "close_code", r.CloseCode, "close_reason", r.CloseReason, "close_side", r.CloseSide)
	}
	return attrs
}

// Log appends records to a file as JSON lines. Sessions never wait on
// the disk: records go through a queue to one writer goroutine, which writes
// and fsyncs them in batches (every usageSyncEvery or usageBatch records).
// A failing disk is logged and counted; the records are lost, the sessions
// are not.
type Log struct {
	f      *os.File
	log    *slog.Logger
	errors prometheus.Counter

	mu     sync.RWMutex // write holds it shared, close exclusively
	closed bool
	queue  chan []byte
	done   chan struct{}
}

const (
	usageQueue     = 8192
	usageBatch     = 256
	usageSyncEvery = time.Second
)

// Open opens (or creates) the file at path for appending; errors counts
// the records lost.
func Open(path string, log *slog.Logger, errors prometheus.Counter) (*Log, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	u := &Log{f: f, log: log, errors: errors, queue: make(chan []byte, usageQueue), done: make(chan struct{})}
	go u.run()
	return u, nil
}

// Write queues rec; it never waits on the disk.
func (u *Log) Write(rec Record) {
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	if u.closed {
		u.errors.Inc()
		return
	}
	select {
	case u.queue <- append(b, '\n'):
	default:
		u.errors.Inc()
	}
}

func (u *Log) run() {
	defer close(u.done)
	tick := time.NewTicker(usageSyncEvery)
	defer tick.Stop()
	var batch [][]byte
	var lastErr time.Time
	flush := func() {
		if len(batch) == 0 {
			return
		}
		var err error
		for _, b := range batch {
			if _, err = u.f.Write(b); err != nil {
				break
			}
		}
		if err == nil {
			err = u.f.Sync()
		}
		if err != nil {
			u.errors.Add(float64(len(batch)))
			if time.Since(lastErr) > 10*time.Second { // a full disk fails every batch: say so now and then
				u.log.Error("writing the usage log failed; records are being lost", "err", err)
				lastErr = time.Now()
			}
		}
		batch = batch[:0]
	}
	for {
		select {
		case b, ok := <-u.queue:
			if !ok {
				flush()
				return
			}
			batch = append(batch, b)
			if len(batch) >= usageBatch {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// Close writes what is queued and closes the file.
func (u *Log) Close() {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.closed = true
	close(u.queue)
	u.mu.Unlock()
	<-u.done
	_ = u.f.Close()
}
