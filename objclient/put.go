package objclient

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
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
		s: s, key: key, opts: opts, base: base,
		sem: make(chan struct{}, s.opts.UploadConcurrency),
	}
	w.ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	w.buf = make([]byte, 0, min(base, 1<<20))
	return w, nil
}

// s3Writer buffers one part at a time; full parts are uploaded by
// goroutines (at most UploadConcurrency at once) while the caller writes on.
type s3Writer struct {
	s *S3
	// ctx is the Put's context without its cancellation; cancel ends it
	// when a part fails (the other parts in flight stop at once) and when
	// the Writer is done.
	ctx    context.Context
	cancel context.CancelFunc
	key    string
	opts   PutOptions
	base   int64

	buf     []byte // the part being filled
	written int64
	nextNum int // number of the part being filled (1-based)
	done    bool
	mp      *multipart
	sem     chan struct{} // upload slots
	wg      sync.WaitGroup

	mu    sync.Mutex // guards parts, err, free, aborted
	parts []types.CompletedPart
	err   error
	free  [][]byte
	// aborted is closed when the abort of the multipart upload, started by
	// the first failed part, has ended; nil until then.
	aborted chan struct{}
}

// abortWait bounds how long Commit and Abort wait for the abort of a
// failed upload: the failure is already known and the application gets it
// at once; an abort that takes longer (a dead server) goes on in the
// background and logs its own failure.
const abortWait = 5 * time.Second

// failFast records the first failure of a part: the other parts in flight
// are cancelled and the multipart upload is aborted in the background, so
// that write, fsync and close answer at once (issue 14).
func (w *s3Writer) failFast(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	start := w.aborted == nil && w.mp != nil
	if start {
		w.aborted = make(chan struct{})
	}
	done := w.aborted
	w.mu.Unlock()
	w.cancel()
	if start {
		go func() {
			defer close(done)
			w.mp.abort(context.Background())
		}()
	}
}

// settleAbort starts the abort if no part failure has, and waits for it
// up to abortWait.
func (w *s3Writer) settleAbort() {
	w.mu.Lock()
	if w.aborted == nil {
		w.aborted = make(chan struct{})
		done := w.aborted
		go func() {
			defer close(done)
			w.mp.abort(context.Background())
		}()
	}
	done := w.aborted
	w.mu.Unlock()
	t := time.NewTimer(abortWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
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
		if err != nil {
			w.failFast(err)
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
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
	defer w.cancel()
	if w.mp == nil {
		if err := w.failed(); err != nil {
			return ObjectInfo{}, err // CreateMultipartUpload failed
		}
		return w.s.putSingle(ctx, w.key, w.buf, w.opts)
	}
	if len(w.buf) > 0 && w.failed() == nil {
		if err := w.flushPart(); err != nil {
			w.wg.Wait()
			w.settleAbort()
			return ObjectInfo{}, err
		}
	}
	w.wg.Wait()
	if err := w.failed(); err != nil {
		w.settleAbort()
		return ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		w.settleAbort()
		return ObjectInfo{}, normalise(ctx, "put", w.key, err)
	}
	sort.Slice(w.parts, func(i, j int) bool { return *w.parts[i].PartNumber < *w.parts[j].PartNumber })
	oi, err := w.mp.complete(ctx, w.parts, w.written)
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
	// The parts in flight finish before the abort, not cancelled: a part
	// the server is still storing when AbortMultipartUpload arrives "might
	// or might not succeed" (S3 API reference, AbortMultipartUpload) and
	// can leave the upload behind (seen with versitygw). Each part is
	// bounded by the op timeout.
	w.wg.Wait()
	if w.mp == nil {
		return nil
	}
	w.mu.Lock()
	started := w.aborted != nil
	w.mu.Unlock()
	if started {
		w.settleAbort() // a failed part started it
		return nil
	}
	return w.mp.abort(ctx)
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
	err := s.callSized(ctx, len(data), func(ctx context.Context) error {
		in.Body = bytes.NewReader(data)
		var err error
		out, err = s.client.PutObject(ctx, in)
		return err
	})
	if err != nil {
		err = s.norm(ctx, "put", key, err)
		sum := md5.Sum(data)
		if etag, ok := s.settle(ctx, key, err, int64(len(data)), hex.EncodeToString(sum[:])); ok {
			out = &s3.PutObjectOutput{ETag: aws.String(etag)}
		} else {
			return ObjectInfo{}, err
		}
	}
	if aws.ToString(out.ETag) == "" {
		return ObjectInfo{}, s.notS3("put", key, "its PutObject reply has no ETag")
	}
	return ObjectInfo{Key: key, Size: int64(len(data)), ETag: aws.ToString(out.ETag), LastModified: time.Now().UTC(), ContentType: opts.ContentType, Metadata: opts.Metadata}, nil
}

// settle decides an upload whose final request failed ambiguously (its
// reply lost or cut, a retry that found the upload gone or the key taken,
// a timeout): the request may have been applied. It asks the store (HEAD)
// and reports the stored ETag and true when the object under key is the
// one uploaded: size bytes and the ETag want (without quotes: the hex MD5
// of a single PUT's bytes, or for a multipart upload the hex MD5 of the
// concatenated binary part MD5s followed by "-N", as S3 computes it). An
// error that says the request was refused (access, invalid argument)
// settles nothing.
func (s *S3) settle(ctx context.Context, key string, err error, size int64, want string) (string, bool) {
	if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrThrottled) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrChanged) {
		return "", false
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.RequestTimeout)
	defer cancel()
	info, herr := s.Stat(hctx, key)
	if errors.Is(herr, ErrNotFound) {
		return "", false // not committed
	}
	if herr != nil {
		s.log.Warn("upload reply lost and the store could not be asked whether it committed", "key", key, "err", err, "stat_err", herr)
		return "", false
	}
	got := strings.Trim(info.ETag, `"`)
	if info.Size != size || !strings.EqualFold(got, want) {
		return "", false
	}
	s.log.Info("upload reply lost, but the store holds the uploaded object: committed", "key", key, "etag", info.ETag, "err", err)
	return info.ETag, true
}

// multipartETag is S3's ETag of a multipart upload of parts with the
// given ETags: hex MD5 of the concatenated binary MD5s, "-", the part
// count. ok is false when a part ETag is not a hex MD5 (SSE-KMS, some
// S3 clones): the result cannot be predicted.
func multipartETag(parts []types.CompletedPart) (string, bool) {
	h := md5.New()
	for _, p := range parts {
		b, err := hex.DecodeString(strings.Trim(aws.ToString(p.ETag), `"`))
		if err != nil || len(b) != md5.Size {
			return "", false
		}
		h.Write(b)
	}
	return fmt.Sprintf("%x-%d", h.Sum(nil), len(parts)), true
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
		return nil, s.norm(ctx, "put", key, err)
	}
	if aws.ToString(out.UploadId) == "" {
		return nil, s.notS3("put", key, "its CreateMultipartUpload reply has no UploadId")
	}
	return &multipart{s: s, key: key, uploadID: aws.ToString(out.UploadId), ifNoneMatch: opts.IfNoneMatch}, nil
}

func (m *multipart) uploadPart(ctx context.Context, num int, data []byte) (string, error) {
	var out *s3.UploadPartOutput
	err := m.s.callSized(ctx, len(data), func(ctx context.Context) error {
		var err error
		out, err = m.s.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(m.s.opts.Bucket), Key: aws.String(m.key),
			UploadId: aws.String(m.uploadID), PartNumber: aws.Int32(int32(num)),
			Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		})
		return err
	})
	if err != nil {
		return "", m.s.norm(ctx, fmt.Sprintf("upload part %d of", num), m.key, err)
	}
	if aws.ToString(out.ETag) == "" {
		return "", m.s.notS3(fmt.Sprintf("upload part %d of", num), m.key, "its UploadPart reply has no ETag")
	}
	return aws.ToString(out.ETag), nil
}

// complete finishes the upload of size bytes in parts. When the reply is
// lost or cut (a retry then finds the upload gone), the store is asked
// whether the object is the one uploaded before the answer is given; only
// a completion that did not happen aborts the upload.
func (m *multipart) complete(ctx context.Context, parts []types.CompletedPart, size int64) (ObjectInfo, error) {
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
		err = m.s.norm(ctx, "complete upload of", m.key, err)
		if want, ok := multipartETag(parts); ok {
			if etag, ok := m.s.settle(ctx, m.key, err, size, want); ok {
				return ObjectInfo{Key: m.key, ETag: etag, LastModified: time.Now().UTC()}, nil
			}
		}
		m.abort(ctx)
		return ObjectInfo{}, err
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
