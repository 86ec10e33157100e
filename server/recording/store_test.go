package recording_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"rtgate/server/recording"
	"rtgate/server/recording/s3test"
)

func s3Config(srv *s3test.Server, prefix string) recording.S3Config {
	return recording.S3Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Prefix: prefix, PathStyle: true}
}

// TestStores: both stores put, get, list (by prefix), and delete the same
// way, and a missing key is ErrNotFound.
func TestStores(t *testing.T) {
	srv := s3test.Start(t)
	stores := []struct {
		name string
		open func(t *testing.T) recording.Store
	}{
		{"dir", func(t *testing.T) recording.Store { return recording.DirStore(t.TempDir()) }},
		// First: it lists the whole bucket, which the prefixed store then shares.
		{"s3 without prefix", func(t *testing.T) recording.Store {
			s, err := recording.NewS3Store(s3Config(srv, ""))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"s3", func(t *testing.T) recording.Store {
			s, err := recording.NewS3Store(s3Config(srv, "stores/"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	for _, tc := range stores {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s := tc.open(t)
			objs := map[string][]byte{
				"sess-a/audio.wav":    bytes.Repeat([]byte{1, 2, 3}, 1000),
				"sess-a/meta.json":    []byte(`{"session_id":"sess-a"}`),
				"sess-b/events.jsonl": []byte("{}\n"),
			}
			for k, v := range objs {
				if err := s.Put(ctx, k, v, "application/octet-stream"); err != nil {
					t.Fatalf("Put %s: %v", k, err)
				}
			}
			for k, v := range objs {
				got, err := s.Get(ctx, k)
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("Get %s = %d bytes, %v; want %d bytes", k, len(got), err, len(v))
				}
			}
			if _, err := s.Get(ctx, "sess-a/none"); !errors.Is(err, recording.ErrNotFound) {
				t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
			}
			list, err := s.List(ctx, "sess-a/")
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, o := range list {
				keys = append(keys, o.Key)
				if o.Size != int64(len(objs[o.Key])) || o.LastModified.IsZero() {
					t.Errorf("listed %+v: want size %d and a time", o, len(objs[o.Key]))
				}
			}
			slices.Sort(keys)
			if want := []string{"sess-a/audio.wav", "sess-a/meta.json"}; !slices.Equal(keys, want) {
				t.Errorf("List(sess-a/) = %v, want %v", keys, want)
			}
			if err := s.Delete(ctx, "sess-a/audio.wav"); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, "sess-a/audio.wav"); err != nil {
				t.Errorf("deleting a missing key: %v, want nil", err)
			}
			if _, err := s.Get(ctx, "sess-a/audio.wav"); !errors.Is(err, recording.ErrNotFound) {
				t.Errorf("Get after Delete: %v, want ErrNotFound", err)
			}
			list, err = s.List(ctx, "")
			if err != nil || len(list) != 2 {
				t.Errorf("List() after a delete = %v, %v; want 2 objects", list, err)
			}
		})
	}
}

// TestDirStoreRefusesEscapes: a key cannot leave the directory.
func TestDirStoreRefusesEscapes(t *testing.T) {
	s := recording.DirStore(t.TempDir())
	for _, k := range []string{"../x", "a/../../x", "/etc/x", "", "a//b", `a\b`} {
		if err := s.Put(context.Background(), k, []byte("x"), ""); err == nil {
			t.Errorf("Put(%q) succeeded", k)
		}
	}
}
