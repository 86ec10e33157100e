package recording

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotFound is what Get returns (wrapped) for a key the store does not
// hold.
var ErrNotFound = errors.New("not found")

// Store is where recordings are kept: a directory or an S3 bucket. Keys
// are slash-separated paths relative to the store's root (or prefix).
type Store interface {
	Put(ctx context.Context, key string, body []byte, contentType string) error
	Get(ctx context.Context, key string) ([]byte, error)
	// List returns the objects whose key starts with prefix.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Delete removes key; a key that is not there is no error.
	Delete(ctx context.Context, key string) error
}

// Object is one listed object.
type Object struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// DirStore is a Store in a local directory (created on the first Put):
// each key a file under dir, written to a temporary file and renamed, so
// a reader never sees half an object.
func DirStore(dir string) Store { return dirStore{dir: dir} }

type dirStore struct{ dir string }

// tmpSuffix marks a file being written; List skips them.
const tmpSuffix = ".tmp-recording"

func (d dirStore) path(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") || strings.HasSuffix(key, tmpSuffix) {
		return "", fmt.Errorf("recording: bad key %q", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("recording: bad key %q", key)
		}
	}
	return filepath.Join(d.dir, filepath.FromSlash(key)), nil
}

func (d dirStore) Put(_ context.Context, key string, body []byte, _ string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return fmt.Errorf("recording: put %s: %w", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".*"+tmpSuffix)
	if err != nil {
		return fmt.Errorf("recording: put %s: %w", key, err)
	}
	_, err = f.Write(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("recording: put %s: %w", key, err)
	}
	return nil
}

func (d dirStore) Get(_ context.Context, key string) ([]byte, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("recording: get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("recording: get %s: %w", key, err)
	}
	return b, nil
}

func (d dirStore) List(ctx context.Context, prefix string) ([]Object, error) {
	var objs []Object
	err := filepath.WalkDir(d.dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == d.dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // nothing stored yet
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() || strings.HasSuffix(p, tmpSuffix) {
			return nil
		}
		rel, err := filepath.Rel(d.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			return err
		}
		objs = append(objs, Object{Key: key, Size: info.Size(), LastModified: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recording: list %s: %w", d.dir, err)
	}
	return objs, nil
}

func (d dirStore) Delete(_ context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("recording: delete %s: %w", key, err)
	}
	// The session's directory goes with its last object (fails while not empty).
	if dir := filepath.Dir(p); dir != filepath.Clean(d.dir) {
		_ = os.Remove(dir)
	}
	return nil
}
