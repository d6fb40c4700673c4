package gdd

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/os2g/os2g/objclient"
)

// StoreUpload starts the upload of key to store for a save. On an S3 store
// (*objclient.S3) the parts go straight to a multipart upload (created on
// the first part) in the order the save sends them, part 1 last, and an
// object of one part is one PutObject; errors are the SDK's, wrapped with
// the operation and key. On another store (fakes, tests) they go through
// store.Put in order (SequentialUpload), held in memory until part 1 is in.
func StoreUpload(ctx context.Context, store objclient.Store, key string) (Upload, error) {
	if s3s, ok := store.(*objclient.S3); ok {
		return &s3Upload{c: s3s.Client(), bucket: s3s.Bucket(), key: key, etags: map[int]string{}}, nil
	}
	w, err := store.Put(ctx, key, objclient.PutOptions{})
	if err != nil {
		return nil, err
	}
	return SequentialUpload(w, S3PartSize), nil
}

// S3PartSize is the size of a save's parts on S3, bytes, up to 10,000
// parts (80 GiB); larger objects get larger parts (s3PartSize).
const S3PartSize = 8 << 20

// s3PartSize returns the part size for an object of size bytes: 8 MiB, or
// the smallest multiple of 1 MiB that keeps it within S3's 10,000 parts.
func s3PartSize(size int64) int64 {
	const maxParts = 10000
	p := int64(S3PartSize)
	if size > p*maxParts {
		p = ((size+maxParts-1)/maxParts + 1<<20 - 1) &^ (1<<20 - 1)
	}
	return p
}

// s3Upload is a Upload onto an S3 multipart upload, created on the
// first part; parts are sent in whatever order they come.
type s3Upload struct {
	c           *s3.Client
	bucket, key string

	mu    sync.Mutex
	id    string         // GUARDED_BY(mu): the upload's id, "" before the first part
	etags map[int]string // GUARDED_BY(mu): part number -> ETag
}

var _ Upload = (*s3Upload)(nil)

func (u *s3Upload) PartSize(size int64) int64 { return s3PartSize(size) }

// start creates the multipart upload once.
func (u *s3Upload) start(ctx context.Context) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.id != "" {
		return u.id, nil
	}
	out, err := u.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(u.bucket), Key: aws.String(u.key)})
	if err != nil {
		return "", fmt.Errorf("create multipart upload of %s: %w", u.key, err)
	}
	if aws.ToString(out.UploadId) == "" {
		return "", fmt.Errorf("%w: create multipart upload of %s: no UploadId in the reply", objclient.ErrNotS3, u.key)
	}
	u.id = aws.ToString(out.UploadId)
	return u.id, nil
}

func (u *s3Upload) WritePart(ctx context.Context, num int, p []byte) error {
	if num < 1 || num > 10000 {
		return fmt.Errorf("%w: part number %d outside 1..10000", ErrInvalid, num)
	}
	id, err := u.start(ctx)
	if err != nil {
		return err
	}
	out, err := u.c.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: aws.String(id),
		PartNumber: aws.Int32(int32(num)), Body: bytes.NewReader(p), ContentLength: aws.Int64(int64(len(p))),
	})
	if err != nil {
		return fmt.Errorf("upload part %d of %s: %w", num, u.key, err)
	}
	if aws.ToString(out.ETag) == "" {
		return fmt.Errorf("%w: upload part %d of %s: no ETag in the reply", objclient.ErrNotS3, num, u.key)
	}
	u.mu.Lock()
	u.etags[num] = aws.ToString(out.ETag)
	u.mu.Unlock()
	return nil
}

func (u *s3Upload) Complete(ctx context.Context, n int, size int64) (objclient.ObjectInfo, error) {
	u.mu.Lock()
	id := u.id
	parts := make([]types.CompletedPart, 0, n)
	for k := 1; k <= n; k++ {
		etag, ok := u.etags[k]
		if !ok {
			u.mu.Unlock()
			_ = u.Abort(ctx)
			return objclient.ObjectInfo{}, fmt.Errorf("%w: complete of %s: part %d of %d was not uploaded", ErrInvalid, u.key, k, n)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(k)), ETag: aws.String(etag)})
	}
	u.mu.Unlock()
	out, err := u.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: aws.String(id),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		_ = u.Abort(ctx)
		return objclient.ObjectInfo{}, fmt.Errorf("complete multipart upload of %s: %w", u.key, err)
	}
	return objclient.ObjectInfo{Key: u.key, Size: size, ETag: aws.ToString(out.ETag), LastModified: time.Now().UTC()}, nil
}

func (u *s3Upload) Put(ctx context.Context, p []byte) (objclient.ObjectInfo, error) {
	out, err := u.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), Body: bytes.NewReader(p), ContentLength: aws.Int64(int64(len(p))),
	})
	if err != nil {
		return objclient.ObjectInfo{}, fmt.Errorf("put %s: %w", u.key, err)
	}
	return objclient.ObjectInfo{Key: u.key, Size: int64(len(p)), ETag: aws.ToString(out.ETag), LastModified: time.Now().UTC()}, nil
}

// Abort discards the multipart upload, if one was created; it runs even
// when ctx is cancelled, so no parts are left behind.
func (u *s3Upload) Abort(ctx context.Context) error {
	u.mu.Lock()
	id := u.id
	u.mu.Unlock()
	if id == "" {
		return nil
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := u.c.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: aws.String(id)}); err != nil {
		return fmt.Errorf("abort multipart upload of %s: %w", u.key, err)
	}
	return nil
}
