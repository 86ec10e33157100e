package recording_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/recording"
	"rtgate/server/recording/s3test"
)

// recordingOf is a small finished recording of session id.
func recordingOf(id string, samples int) *recording.Recording {
	r := recording.NewRecorder(id, t0, recording.Limits{})
	r.Client(ms(0), []byte(appendEv(pcm(samples, 42))))
	r.Upstream(ms(10), []byte(`{"type":"response.done","response":{"id":"r","status":"completed"}}`))
	return r.Finish(ms(1000))
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// landed: Open finds the recording whole.
func landed(store recording.Store, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := recording.Open(ctx, store, id)
	return err == nil && rec.SessionID == id && len(rec.WAV) > 44
}

func newArchive(t *testing.T, cfg recording.ArchiveConfig) (*recording.Archive, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if cfg.RetryMin == 0 {
		cfg.RetryMin = 50 * time.Millisecond
	}
	a, err := recording.NewArchive(cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a, reg
}

// counter is a counter's or gauge's value.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestArchiveLands: a saved recording reads back whole, from a directory
// and from the S3 server.
func TestArchiveLands(t *testing.T) {
	srv := s3test.Start(t)
	for _, tc := range []struct {
		name string
		cfg  recording.ArchiveConfig
	}{
		{"dir", recording.ArchiveConfig{Dir: t.TempDir()}},
		{"s3", recording.ArchiveConfig{Dir: "ignored when a bucket is set", S3: s3Config(srv, "rec/")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, reg := newArchive(t, tc.cfg)
			want := recordingOf("sess_land", 4800)
			a.Save(want)
			waitFor(t, "the recording to land", func() bool { return landed(a.Store(), "sess_land") })
			got, err := recording.Open(context.Background(), a.Store(), "sess_land")
			if err != nil {
				t.Fatal(err)
			}
			if string(got.WAV) != string(want.WAV) || string(got.Events) != string(want.Events) || string(got.Meta) != string(want.Meta) || !got.Ended.Equal(want.Ended) {
				t.Error("the recording read back differs from the one saved")
			}
			if n := counter(t, reg, "rtgate_recordings_saved_total"); n != 1 {
				t.Errorf("saved_total = %v, want 1", n)
			}
		})
	}
}

// TestArchiveOutage: while the S3 server is down a recording waits in the
// buffer and lands once the server is back on its port; past MaxBuffer a
// recording is dropped and counted.
func TestArchiveOutage(t *testing.T) {
	srv := s3test.Start(t)
	one := recordingOf("sess_a", 24000) // ~96 KB of WAV
	a, reg := newArchive(t, recording.ArchiveConfig{S3: s3Config(srv, ""), MaxBuffer: one.Size()*2 + 100})

	srv.Stop()
	a.Save(one)
	a.Save(recordingOf("sess_b", 24000))
	a.Save(recordingOf("sess_c", 24000)) // past the buffer
	waitFor(t, "a failed write", func() bool { return counter(t, reg, "rtgate_recordings_write_failures_total") > 0 })
	if n := counter(t, reg, "rtgate_recordings_dropped_total"); n != 1 {
		t.Errorf("dropped_total = %v during the outage, want 1", n)
	}
	if g := counter(t, reg, "rtgate_recordings_buffered_bytes"); g < float64(one.Size()*2) {
		t.Errorf("buffered_bytes = %v, want the two recordings held", g)
	}

	srv.Restart()
	waitFor(t, "both buffered recordings to land", func() bool {
		return landed(a.Store(), "sess_a") && landed(a.Store(), "sess_b")
	})
	if landed(a.Store(), "sess_c") {
		t.Error("the dropped recording landed")
	}
	if n := counter(t, reg, "rtgate_recordings_saved_total"); n != 2 {
		t.Errorf("saved_total = %v, want 2", n)
	}
}

// TestArchiveCloseReportsWhatIsLost: Close with the store down gives up at
// its deadline and says what it lost.
func TestArchiveCloseReportsWhatIsLost(t *testing.T) {
	srv := s3test.Start(t)
	a, reg := newArchive(t, recording.ArchiveConfig{S3: s3Config(srv, "")})
	srv.Stop()
	a.Save(recordingOf("sess_lost", 100))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := a.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 recordings") {
		t.Errorf("Close = %v, want 1 recording not stored", err)
	}
	if n := counter(t, reg, "rtgate_recordings_dropped_total"); n != 1 {
		t.Errorf("dropped_total = %v, want 1", n)
	}
}

// TestRetention: a recording is kept while younger than the retention and
// deleted once older, by the janitor's first sweep at start and by Sweep.
func TestRetention(t *testing.T) {
	srv := s3test.Start(t)
	for _, tc := range []struct {
		name string
		cfg  recording.ArchiveConfig
	}{
		{"dir", recording.ArchiveConfig{Dir: t.TempDir()}},
		{"s3", recording.ArchiveConfig{S3: s3Config(srv, "ret/")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var skew atomic.Int64 // how far the archive's clock runs ahead
			cfg := tc.cfg
			cfg.Retention = time.Hour
			cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			a, reg := newArchive(t, cfg)
			a.Save(recordingOf("sess_old", 100))
			waitFor(t, "the recording to land", func() bool { return landed(a.Store(), "sess_old") })

			ctx := context.Background()
			if n, err := a.Sweep(ctx); err != nil || n != 0 {
				t.Fatalf("Sweep of a young recording = %d, %v; want 0", n, err)
			}
			if !landed(a.Store(), "sess_old") {
				t.Fatal("a young recording was deleted")
			}
			skew.Store(int64(2 * time.Hour))
			if n, err := a.Sweep(ctx); err != nil || n != 1 {
				t.Fatalf("Sweep of an old recording = %d, %v; want 1", n, err)
			}
			if objs, _ := a.Store().List(ctx, "sess_old/"); len(objs) != 0 {
				t.Errorf("left after the retention: %v", objs)
			}
			if n := counter(t, reg, "rtgate_recordings_deleted_total"); n != 1 {
				t.Errorf("deleted_total = %v, want 1", n)
			}

			// The janitor's sweep at start.
			if err := recording.Write(ctx, a.Store(), recordingOf("sess_old2", 100)); err != nil {
				t.Fatal(err)
			}
			cfg.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
			b, _ := newArchive(t, cfg)
			waitFor(t, "the janitor to delete the old recording", func() bool {
				objs, err := b.Store().List(ctx, "sess_old2/")
				return err == nil && len(objs) == 0
			})
		})
	}
}
