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

// Log appends records to a file as JSON lines. Sessions never wait on
// the disk: records go through a queue to one writer goroutine, which writes
// and fsyncs them in batches (every usageSyncEvery or usageBatch records).
// A failing disk is logged and counted; the records are lost, the sessions
// are not. Reopen (on SIGHUP) starts a new file at the same path, for
// logrotate.
type Log struct {
	path   string
	f      *os.File // the writer goroutine's
	log    *slog.Logger
	errors prometheus.Counter
	reopen chan chan error

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
	u := &Log{path: path, f: f, log: log, errors: errors, reopen: make(chan chan error),
		queue: make(chan []byte, usageQueue), done: make(chan struct{})}
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
		case reply := <-u.reopen:
			// Records queued before the rotation end the old file.
			for drained := false; !drained; {
				select {
				case b, ok := <-u.queue:
					if !ok {
						drained = true
						break
					}
					batch = append(batch, b)
				default:
					drained = true
				}
			}
			flush()
			reply <- u.swap()
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

// swap opens the path afresh and closes the old file; if the path cannot
// be opened, writing goes on to the old file.
func (u *Log) swap() error {
	f, err := os.OpenFile(u.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("reopening %s: %w", u.path, err)
	}
	_ = u.f.Close()
	u.f = f
	return nil
}

// Reopen closes the file and opens its path again, so that after logrotate
// renames it (postrotate: kill -HUP) new records go to a new file. Records
// written before Reopen are in the old file. It waits for the writer.
func (u *Log) Reopen() error {
	u.mu.RLock()
	if u.closed {
		u.mu.RUnlock()
		return nil
	}
	reply := make(chan error, 1)
	select {
	case u.reopen <- reply:
	case <-u.done:
		u.mu.RUnlock()
		return nil
	}
	u.mu.RUnlock()
	return <-reply
}
