// Package objclient is os2g's only door to object storage.
//
// It defines [Store], a small context-first interface over an S3-compatible
// bucket, and [S3], its implementation on aws-sdk-go-v2. Every SDK error is
// normalised once, here, into the sentinels below ([ErrNotFound],
// [ErrChanged], [ErrThrottled], ...), wrapped with %w so callers use
// errors.Is and never match on text. Retries (capped exponential backoff with
// full jitter, after the AWS Architecture Blog's "Exponential Backoff and
// Jitter"), per-request timeouts and a stall timeout on response bodies live
// here too, so no layer above can hang forever on a silent server.
//
// objclient imports no other package of the project.
package objclient

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Every error returned by a Store wraps at most one of them.
var (
	// ErrNotFound: the key (or the bucket's object) does not exist (404 NoSuchKey).
	ErrNotFound = errors.New("object not found")
	// ErrNoSuchBucket: the bucket does not exist (404 NoSuchBucket).
	ErrNoSuchBucket = errors.New("no such bucket")
	// ErrChanged: an If-Match precondition failed (412); the object was
	// replaced since its ETag was read.
	ErrChanged = errors.New("object changed (ETag mismatch)")
	// ErrThrottled: the server kept answering 503 SlowDown / 429 after all retries.
	ErrThrottled = errors.New("throttled by server")
	// ErrAccessDenied: 403 AccessDenied, or credentials the server rejects.
	ErrAccessDenied = errors.New("access denied")
	// ErrInvalidCredentials: the access key is unknown or the signature does not match.
	ErrInvalidCredentials = errors.New("invalid credentials")
	// ErrUnavailable: the server could not be reached or kept failing (5xx,
	// connection refused/reset, stalled bodies) after all retries.
	ErrUnavailable = errors.New("object store unavailable")
	// ErrTooLarge: the object would exceed the store's maximum size (5 TiB for S3).
	ErrTooLarge = errors.New("object too large")
	// ErrInvalidArgument: the request itself is malformed (bad key, bad range).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotS3: the endpoint answered with something no S3 server sends
	// (a bucket listing that is not a ListBucketResult, a PUT or part
	// reply without an ETag): it is not an S3 server.
	ErrNotS3 = errors.New("endpoint is not S3")
)

// ObjectInfo describes one object.
type ObjectInfo struct {
	Key          string
	Size         int64 // bytes
	ETag         string
	LastModified time.Time
	// ContentType and Metadata (x-amz-meta-*, keys lower-case without the
	// prefix) are filled by Stat only; List leaves them empty.
	ContentType string
	Metadata    map[string]string
}

// ListRequest is one page request of ListObjectsV2.
type ListRequest struct {
	Prefix            string
	Delimiter         string // "" for a flat listing, "/" for one directory level
	ContinuationToken string // "" for the first page
	StartAfter        string // optional
	MaxKeys           int32  // page size; 0 means the server default (1000)
}

// ListPage is one page of results, in the server's (UTF-8 binary) key order.
type ListPage struct {
	Objects        []ObjectInfo
	CommonPrefixes []string // each ends with the delimiter
	// NextContinuationToken is set when IsTruncated; pass it back for the next page.
	NextContinuationToken string
	IsTruncated           bool
}

// PutOptions configures a streaming upload.
type PutOptions struct {
	ContentType string
	Metadata    map[string]string
	// PartSize is the first multipart part size in bytes (0: the store's
	// default). Parts grow as the object grows so that 10,000 parts reach the
	// 5 TiB maximum object size.
	PartSize int64
	// IfNoneMatch "*" makes the upload fail with ErrChanged if the key exists.
	IfNoneMatch string
}

// Writer streams one object. Bytes are buffered into parts; objects smaller
// than one part go up in a single PutObject at Commit, larger ones as a
// multipart upload whose parts are sent while the caller keeps writing.
//
// Nothing is visible under the key before Commit returns nil, and Commit
// returns nil exactly when the object is committed (S3: a lost or cut
// completion reply is settled by asking the store). Commit or Abort must be
// called exactly once; after a failed Commit the multipart upload has been
// aborted (S3: or is being aborted in the background, when that takes
// over 5 s). A failed part fails the upload at once: Write, then Commit,
// return its error without waiting for the other parts. A Writer is not
// safe for concurrent use.
type Writer interface {
	Write(p []byte) (int, error)
	// Written is the number of bytes accepted so far.
	Written() int64
	// Commit finishes the upload and returns the new object's info.
	Commit(ctx context.Context) (ObjectInfo, error)
	// Abort discards the upload (AbortMultipartUpload if one was started).
	Abort(ctx context.Context) error
}

// Store is an S3-compatible bucket. All methods are safe for concurrent use.
type Store interface {
	// Stat returns the object's info (HeadObject). ErrNotFound if absent.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// List returns one page of ListObjectsV2.
	List(ctx context.Context, req ListRequest) (ListPage, error)
	// GetRange reads object bytes [off, off+len(buf)) into buf and returns the
	// count. The count is short only at the end of the object; at or past the
	// end it is 0 with a nil error. With ifMatch != "" the read fails with
	// ErrChanged when the object's ETag differs. The body lands in buf
	// directly, with no intermediate copy.
	GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error)
	// Put starts a streaming upload of key.
	Put(ctx context.Context, key string, opts PutOptions) (Writer, error)
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Copy copies src to dst server-side (multipart UploadPartCopy above
	// 5 GiB). ErrNotFound if src is absent; with ifMatch != "" ErrChanged if
	// src's ETag differs.
	Copy(ctx context.Context, src, dst, ifMatch string) (ObjectInfo, error)
}
