package objclient

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// partSizeFor returns the size of part number n (1-based) for a first part
// size base: parts double every 1,000 parts, so 10,000 parts of a growing
// size cover the 5 TiB maximum object size (8 MiB base: 8 MiB x 1000,
// 16 MiB x 1000, ... = 8 TiB), each capped at the 5 GiB part maximum.
func partSizeFor(base int64, n int) int64 {
	p := base << uint((n-1)/1000)
	if p > maxCopyPartSize || p <= 0 {
		p = maxCopyPartSize
	}
	return p
}

// Put implements Store. See Writer.
func (s *S3) Put(ctx context.Context, key string, opts PutOptions) (Writer, error) {
	if key == "" {
		return nil, fmt.Errorf("objclient: put: empty key: %w", ErrInvalidArgument)
	}
	base := opts.PartSize
	if base == 0 {
		base = s.opts.PartSize
	}
	if base < minPartSize {
		return nil, fmt.Errorf("objclient: put %q: part size %d below 5 MiB: %w", key, base, ErrInvalidArgument)
	}
	w := &s3Writer{
		s: s, ctx: context.WithoutCancel(ctx), key: key, opts: opts, base: base,
		sem: make(chan struct{}, s.opts.UploadConcurrency),
	}
	w.buf = make([]byte, 0, min(base, 1<<20))
	return w, nil
}

// s3Writer buffers one part at a time; full parts are uploaded by
// goroutines (at most UploadConcurrency at once) while the caller writes on.
type s3Writer struct {
	s    *S3
	ctx  context.Context // the Put's context without its cancellation
	key  string
	opts PutOptions
	base int64

	buf     []byte // the part being filled
	written int64
	nextNum int // number of the part being filled (1-based)
	done    bool
	mp      *multipart
	sem     chan struct{} // upload slots
	wg      sync.WaitGroup

	mu    sync.Mutex // guards parts, err, free
	parts []types.CompletedPart
	err   error
	free  [][]byte
}

func (w *s3Writer) Written() int64 { return w.written }

func (w *s3Writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *s3Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("objclient: write %q after commit or abort: %w", w.key, ErrInvalidArgument)
	}
	if err := w.failed(); err != nil {
		return 0, err
	}
	if w.nextNum == 0 {
		w.nextNum = 1
	}
	total := 0
	for len(p) > 0 {
		size := partSizeFor(w.base, w.nextNum)
		if w.written+int64(len(p)) > maxObjectSize {
			return total, fmt.Errorf("objclient: write %q: over the 5 TiB object limit: %w", w.key, ErrTooLarge)
		}
		room := int(size) - len(w.buf)
		n := min(room, len(p))
		if cap(w.buf) < len(w.buf)+n {
			nb := make([]byte, len(w.buf), min(int(size), max(2*cap(w.buf), len(w.buf)+n)))
			copy(nb, w.buf)
			w.buf = nb
		}
		w.buf = append(w.buf, p[:n]...)
		p = p[n:]
		total += n
		w.written += int64(n)
		if int64(len(w.buf)) == size {
			if err := w.flushPart(); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// flushPart sends the full buffer as the next part.
func (w *s3Writer) flushPart() error {
	if w.mp == nil {
		mp, err := w.s.createMultipart(w.ctx, w.key, w.opts)
		if err != nil {
			w.setErr(err)
			return err
		}
		w.mp = mp
	}
	data := w.buf
	num := w.nextNum
	w.nextNum++
	w.mu.Lock()
	if n := len(w.free); n > 0 {
		w.buf = w.free[n-1][:0]
		w.free = w.free[:n-1]
	} else {
		w.buf = nil
	}
	w.mu.Unlock()
	if next := partSizeFor(w.base, w.nextNum); w.buf == nil || int64(cap(w.buf)) < next {
		w.buf = make([]byte, 0, next)
	}
	w.sem <- struct{}{}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.sem }()
		etag, err := w.mp.uploadPart(w.ctx, num, data)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			if w.err == nil {
				w.err = err
			}
			return
		}
		w.parts = append(w.parts, types.CompletedPart{PartNumber: aws.Int32(int32(num)), ETag: aws.String(etag)})
		if len(w.free) < 2 {
			w.free = append(w.free, data[:0])
		}
	}()
	return nil
}

func (w *s3Writer) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

func (w *s3Writer) Commit(ctx context.Context) (ObjectInfo, error) {
	if w.done {
		return ObjectInfo{}, fmt.Errorf("objclient: commit %q twice: %w", w.key, ErrInvalidArgument)
	}
	w.done = true
	if w.mp == nil {
		return w.s.putSingle(ctx, w.key, w.buf, w.opts)
	}
	if len(w.buf) > 0 {
		if err := w.flushPart(); err != nil {
			w.wg.Wait()
			w.mp.abort(ctx)
			return ObjectInfo{}, err
		}
	}
	w.wg.Wait()
	if err := w.failed(); err != nil {
		w.mp.abort(ctx)
		return ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		w.mp.abort(ctx)
		return ObjectInfo{}, normalise(ctx, "put", w.key, err)
	}
	sort.Slice(w.parts, func(i, j int) bool { return *w.parts[i].PartNumber < *w.parts[j].PartNumber })
	oi, err := w.mp.complete(ctx, w.parts)
	if err != nil {
		return ObjectInfo{}, err
	}
	oi.Size = w.written
	return oi, nil
}

func (w *s3Writer) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.wg.Wait()
	if w.mp != nil {
		return w.mp.abort(ctx)
	}
	return nil
}

func (s *S3) putSingle(ctx context.Context, key string, data []byte, opts PutOptions) (ObjectInfo, error) {
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.opts.Bucket),
		Key:           aws.String(key),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   nilIfEmpty(opts.ContentType),
		Metadata:      opts.Metadata,
	}
	if opts.IfNoneMatch != "" {
		in.IfNoneMatch = aws.String(opts.IfNoneMatch)
	}
	var out *s3.PutObjectOutput
	err := s.callBody(ctx, func(ctx context.Context) error {
		in.Body = bytes.NewReader(data)
		var err error
		out, err = s.client.PutObject(ctx, in)
		return err
	})
	if err != nil {
		return ObjectInfo{}, normalise(ctx, "put", key, err)
	}
	return ObjectInfo{Key: key, Size: int64(len(data)), ETag: aws.ToString(out.ETag), LastModified: time.Now().UTC(), ContentType: opts.ContentType, Metadata: opts.Metadata}, nil
}

// multipart is one multipart upload in progress. The upload ID is not tied
// to the credentials that started it, so parts keep going across a
// credential refresh (CASES C19).
type multipart struct {
	s           *S3
	key         string
	uploadID    string
	ifNoneMatch string // passed to CompleteMultipartUpload
}

func (s *S3) createMultipart(ctx context.Context, key string, opts PutOptions) (*multipart, error) {
	var out *s3.CreateMultipartUploadOutput
	err := s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
			Bucket: aws.String(s.opts.Bucket), Key: aws.String(key),
			ContentType: nilIfEmpty(opts.ContentType), Metadata: opts.Metadata,
		})
		return err
	})
	if err != nil {
		return nil, normalise(ctx, "put", key, err)
	}
	return &multipart{s: s, key: key, uploadID: aws.ToString(out.UploadId), ifNoneMatch: opts.IfNoneMatch}, nil
}

func (m *multipart) uploadPart(ctx context.Context, num int, data []byte) (string, error) {
	var out *s3.UploadPartOutput
	err := m.s.callBody(ctx, func(ctx context.Context) error {
		var err error
		out, err = m.s.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(m.s.opts.Bucket), Key: aws.String(m.key),
			UploadId: aws.String(m.uploadID), PartNumber: aws.Int32(int32(num)),
			Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		})
		return err
	})
	if err != nil {
		return "", normalise(ctx, fmt.Sprintf("upload part %d of", num), m.key, err)
	}
	return aws.ToString(out.ETag), nil
}

func (m *multipart) complete(ctx context.Context, parts []types.CompletedPart) (ObjectInfo, error) {
	var out *s3.CompleteMultipartUploadOutput
	err := m.s.call(ctx, func(ctx context.Context) error {
		var err error
		in := &s3.CompleteMultipartUploadInput{
			Bucket: aws.String(m.s.opts.Bucket), Key: aws.String(m.key), UploadId: aws.String(m.uploadID),
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		}
		if m.ifNoneMatch != "" {
			in.IfNoneMatch = aws.String(m.ifNoneMatch)
		}
		out, err = m.s.client.CompleteMultipartUpload(ctx, in)
		return err
	})
	if err != nil {
		m.abort(ctx)
		return ObjectInfo{}, normalise(ctx, "complete upload of", m.key, err)
	}
	return ObjectInfo{Key: m.key, ETag: aws.ToString(out.ETag), LastModified: time.Now().UTC()}, nil
}

// abort discards the upload; it runs even when ctx is already cancelled,
// so no orphaned parts are left behind (CASES C21).
func (m *multipart) abort(ctx context.Context) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := m.s.call(actx, func(ctx context.Context) error {
		_, err := m.s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(m.s.opts.Bucket), Key: aws.String(m.key), UploadId: aws.String(m.uploadID),
		})
		return err
	})
	if err != nil {
		m.s.log.Warn("abort multipart upload failed; parts may remain until a lifecycle rule removes them", "key", m.key, "upload_id", m.uploadID, "err", err)
		return normalise(actx, "abort upload of", m.key, err)
	}
	return nil
}
