package objclient

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configures an S3 store. Zero values take the defaults noted.
type Options struct {
	Bucket string // required
	// Region: "" takes the AWS config (AWS_REGION, profile), else "us-east-1".
	Region string
	// Endpoint: a custom endpoint URL ("http://127.0.0.1:7070"); "" takes
	// AWS_ENDPOINT_URL / the profile's endpoint_url, else AWS's own.
	Endpoint string
	// Profile selects a shared config/credentials profile ("" = AWS_PROFILE or default).
	Profile string
	// ForcePathStyle addresses the bucket as endpoint/bucket/key.
	ForcePathStyle bool
	// AccessKeyID, SecretAccessKey, SessionToken: static credentials that
	// replace the default credential chain when AccessKeyID is set.
	AccessKeyID, SecretAccessKey, SessionToken string

	// Registerer, if set, receives the request metrics (requests by S3
	// operation and HTTP status, time to response headers, multipart
	// parts; see metrics.go). Stores sharing a registry share them.
	Registerer prometheus.Registerer

	// MaxConnsPerHost caps idle and active connections to the endpoint (default 256).
	MaxConnsPerHost int
	// RequestTimeout is the op timeout (os2g mount --op-timeout): it
	// bounds every store call, all its retries included, default 60 s:
	// HEAD, LIST, DELETE, COPY, multipart create/complete/abort, and
	// GetRange, PutObject and UploadPart per started 64 MiB of body (a
	// large part on a slow link is not cut). Past it the call fails with
	// ErrUnavailable and a log line, so a silent or dead server gives the
	// application EIO in bounded time. A completion whose reply was lost
	// is then settled with one more HEAD under the same bound.
	RequestTimeout time.Duration
	// StallTimeout cancels an attempt whose response has made no progress
	// (no header, no body bytes) for this long, default 20 s: a GET
	// resumes on a new connection from the last byte received, any other
	// request (a LIST, a multipart completion) is sent again.
	StallTimeout time.Duration
	// MaxAttempts per operation, first try included (default 10).
	MaxAttempts int
	// RetryBaseDelay and RetryMaxDelay shape the capped exponential backoff
	// with full jitter (defaults 100 ms and 20 s).
	RetryBaseDelay, RetryMaxDelay time.Duration
	// PartSize is the default first multipart part size in bytes (default
	// 8 MiB, minimum 5 MiB).
	PartSize int64
	// UploadConcurrency is the number of parts of one Writer in flight at
	// once (default 4). Memory per Writer is at most (UploadConcurrency+1) parts.
	UploadConcurrency int
	// ChecksumWhenRequired sets the SDK's request and response checksum
	// modes to WhenRequired (needed by gofakes3 and some S3 clones).
	ChecksumWhenRequired bool

	Logger *slog.Logger // default slog.Default()

	// sdkGet sends GetRange through the SDK's GetObject instead of the
	// raw path (tests of both).
	sdkGet bool
	// sdkHead sends Stat through the SDK's HeadObject instead of the raw
	// path (tests of both).
	sdkHead bool
}

const (
	minPartSize     = 5 << 20
	maxParts        = 10000
	maxObjectSize   = 5 << 40
	maxCopyPartSize = 5 << 30
)

func (o *Options) validate() error {
	if o.Bucket == "" {
		return fmt.Errorf("objclient: bucket name is empty: %w", ErrInvalidArgument)
	}
	if o.MaxConnsPerHost < 0 || o.MaxAttempts < 0 || o.UploadConcurrency < 0 {
		return fmt.Errorf("objclient: negative MaxConnsPerHost, MaxAttempts or UploadConcurrency: %w", ErrInvalidArgument)
	}
	if o.PartSize != 0 && o.PartSize < minPartSize {
		return fmt.Errorf("objclient: PartSize %d is below the S3 minimum of 5 MiB: %w", o.PartSize, ErrInvalidArgument)
	}
	if o.RequestTimeout < 0 || o.StallTimeout < 0 || o.RetryBaseDelay < 0 || o.RetryMaxDelay < 0 {
		return fmt.Errorf("objclient: negative timeout or delay: %w", ErrInvalidArgument)
	}
	return nil
}

func (o *Options) withDefaults() Options {
	c := *o
	if c.MaxConnsPerHost == 0 {
		c.MaxConnsPerHost = 256
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 60 * time.Second
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = 20 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.RetryBaseDelay == 0 {
		c.RetryBaseDelay = 100 * time.Millisecond
	}
	if c.RetryMaxDelay == 0 {
		c.RetryMaxDelay = 20 * time.Second
	}
	if c.PartSize == 0 {
		c.PartSize = 8 << 20
	}
	if c.UploadConcurrency == 0 {
		c.UploadConcurrency = 4
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
