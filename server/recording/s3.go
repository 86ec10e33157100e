package recording

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config names an S3-compatible bucket.
type S3Config struct {
	// Endpoint is the server's URL: http://127.0.0.1:9000, https://s3.amazonaws.com.
	Endpoint  string
	Region    string // "" = us-east-1
	Bucket    string
	AccessKey string
	SecretKey string
	// Prefix is put before every key: "recordings/" stores
	// recordings/<session_id>/audio.wav.
	Prefix string
	// PathStyle addresses the bucket as /bucket/key rather than
	// bucket.host/key (what most S3-compatible servers want).
	PathStyle bool
}

// NewS3Store is a Store in an S3 bucket, through minio-go (the client
// library only). It does not check the bucket: a wrong one shows in the
// first Put.
func NewS3Store(cfg S3Config) (Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("recording: S3 bucket not set")
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("recording: S3 endpoint %q is not an http:// or https:// URL", cfg.Endpoint)
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 30 * time.Second
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       region,
		BucketLookup: lookup,
		Transport:    tr,
		// The archive retries on its own schedule: a down store should
		// fail a write at once rather than hold it for minio-go's 10.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("recording: S3 client: %w", err)
	}
	return s3Store{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix}, nil
}

type s3Store struct {
	c      *minio.Client
	bucket string
	prefix string
}

func (s s3Store) Put(ctx context.Context, key string, body []byte, contentType string) error {
	_, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(body), int64(len(body)),
		// minio-go signs a plain-http PUT as an aws-chunked stream, which
		// not every S3-compatible server decodes (s3rver stores the chunk
		// framing): sign it as over https, the body's MD5 checked by the
		// server instead.
		minio.PutObjectOptions{ContentType: contentType, DisableMultipart: true, DisableContentSha256: true, SendContentMd5: true})
	if err != nil {
		return fmt.Errorf("recording: S3 put %s: %w", key, err)
	}
	return nil
}

func (s s3Store) Get(ctx context.Context, key string) ([]byte, error) {
	o, err := s.c.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("recording: S3 get %s: %w", key, err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("recording: S3 get %s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("recording: S3 get %s: %w", key, err)
	}
	return b, nil
}

func (s s3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	var objs []Object
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("recording: S3 list %s: %w", prefix, o.Err)
		}
		key, ok := strings.CutPrefix(o.Key, s.prefix)
		if !ok {
			continue
		}
		objs = append(objs, Object{Key: key, Size: o.Size, LastModified: o.LastModified})
	}
	return objs, nil
}

func (s s3Store) Delete(ctx context.Context, key string) error {
	if err := s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil
		}
		return fmt.Errorf("recording: S3 delete %s: %w", key, err)
	}
	return nil
}
