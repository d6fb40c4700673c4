package objclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// errStalled is the error a response body returns once it has sent
// nothing for StallTimeout and was cut; the SDK retries the request.
var errStalled = errors.New("response body stalled")

// stallClient watches every response body of the SDK's requests (LIST,
// HEAD, multipart create/complete, PUT replies): a body that sends nothing
// for stall is cut (its request's context cancelled) and its reads fail
// with errStalled, which retryTruncated makes the SDK retry. Without it a
// stalled LIST body blocks until the operation's deadline. GetRange's
// bodies are watched by getOnce as well; the two timers agree.
type stallClient struct {
	next  aws.HTTPClient
	stall time.Duration
	log   *slog.Logger
	brk   *breaker // told of every reply
}

// Do implements aws.HTTPClient.
func (c stallClient) Do(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	resp, err := c.next.Do(req.WithContext(ctx))
	if err == nil {
		c.brk.answered(c.log)
	}
	if err != nil {
		cancel()
		if req.Context().Err() == nil {
			return nil, err
		}
		if errors.Is(req.Context().Err(), context.DeadlineExceeded) {
			c.log.Warn("object store gave no answer within the op timeout", "method", req.Method, "path", req.URL.Path, "err", err)
		}
		return nil, err
	}
	if req.Method == http.MethodHead || resp.ContentLength == 0 {
		// No body to watch.
		resp.Body = cancelOnClose{resp.Body, cancel}
		return resp, nil
	}
	b := &stallBody{rc: resp.Body}
	b.timer = time.AfterFunc(c.stall, func() {
		if b.closed.Load() {
			return
		}
		b.stalled.Store(true)
		c.log.Warn("response body stalled; cut, the request is retried", "method", req.Method, "path", req.URL.Path, "stall_timeout", c.stall)
		cancel()
	})
	b.cancel = cancel
	b.stall = c.stall
	resp.Body = b
	return resp, nil
}

// stallBody is a response body with a progress timer.
type stallBody struct {
	rc      io.ReadCloser
	timer   *time.Timer
	stall   time.Duration
	cancel  context.CancelFunc
	stalled atomic.Bool
	closed  atomic.Bool
	once    sync.Once
}

func (b *stallBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && !b.stalled.Load() {
		b.timer.Reset(b.stall)
	}
	if err != nil && err != io.EOF && b.stalled.Load() {
		// Not wrapping err: it is our own cancellation (context.Canceled),
		// which callers would take for theirs (EINTR).
		return n, fmt.Errorf("%w: nothing for %v (%v)", errStalled, b.stall, err)
	}
	if err == io.EOF {
		b.timer.Stop()
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.once.Do(func() {
		b.closed.Store(true)
		b.timer.Stop()
	})
	err := b.rc.Close()
	b.cancel()
	return err
}

// cancelOnClose ends a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// retryTruncated is an SDK retry rule: a response whose body broke off
// (truncated by a cut connection, io.ErrUnexpectedEOF), stalled
// (errStalled) is worth another attempt, like a connection reset. (S3
// replies carry a Content-Length or are chunked, so a cut shows as
// io.ErrUnexpectedEOF; a reply that is not XML at all is not retried.) The SDK's default rules leave such
// deserialization errors final, so a truncated LIST or
// CreateMultipartUpload reply failed at once (issue 14).
type retryTruncated struct{}

// IsErrorRetryable implements retry.IsErrorRetryable.
func (retryTruncated) IsErrorRetryable(err error) aws.Ternary {
	if errors.Is(err, errStalled) || errors.Is(err, io.ErrUnexpectedEOF) {
		return aws.TrueTernary
	}
	return aws.UnknownTernary
}

// opTimeout is the bound of one store call that moves n body bytes:
// RequestTimeout per started 64 MiB (at least one), so a large part on a
// slow link is not cut while an 8 MiB part or a metadata call gets
// RequestTimeout.
func (s *S3) opTimeout(n int) time.Duration {
	units := 1 + (max(n, 1)-1)/(64<<20)
	return s.opts.RequestTimeout * time.Duration(units)
}

// breaker fails store calls at once while the store is not answering, so
// that a system call that makes several calls one after the other (a read
// the kernel retries page by page, a lookup, a close that settles its
// upload) waits about one op timeout, not one per call. It opens when a
// call has gone a whole op timeout without an answer, and closes at the
// store's next reply of any kind (an error status included). While it is
// open, one call per second is let through to try (the circuit breaker's
// half-open state; Michael Nygard, "Release It!", 2007).
type breaker struct {
	open    atomic.Bool
	since   atomic.Int64 // unix ns when it opened
	lastTry atomic.Int64 // unix ns of the last call let through while open
}

// allow reports whether a call may go to the store now; if not, the error
// (wrapping ErrUnavailable) says why.
func (b *breaker) allow(endpoint string, d time.Duration) error {
	if !b.open.Load() {
		return nil
	}
	now := time.Now().UnixNano()
	last := b.lastTry.Load()
	if now-last >= int64(time.Second) && b.lastTry.CompareAndSwap(last, now) {
		return nil
	}
	return fmt.Errorf("the object store at %s has not answered since %s (op timeout %v); failing at once until it answers again: %w",
		endpoint, time.Unix(0, b.since.Load()).UTC().Format(time.RFC3339), d, ErrUnavailable)
}

// trip opens the breaker after a call went a whole op timeout unanswered.
func (b *breaker) trip(log *slog.Logger, endpoint string) {
	now := time.Now().UnixNano()
	b.lastTry.Store(now)
	if b.open.CompareAndSwap(false, true) {
		b.since.Store(now)
		log.Error("object store not answering: store calls fail at once (EIO) until it answers again", "endpoint", endpoint)
	}
}

// answered closes the breaker: a reply came.
func (b *breaker) answered(log *slog.Logger) {
	if b.open.Load() && b.open.CompareAndSwap(true, false) {
		log.Warn("object store answers again", "down_for", time.Since(time.Unix(0, b.since.Load())).Round(time.Millisecond))
	}
}

// timedOut turns err from a call run under octx (parent plus the op
// timeout d) into one that says the op timeout ended it, and logs that,
// when it did; otherwise it returns err unchanged.
func (s *S3) timedOut(parent, octx context.Context, d time.Duration, err error) error {
	if err == nil || parent.Err() != nil || !errors.Is(octx.Err(), context.DeadlineExceeded) {
		return err
	}
	s.log.Warn("store call gave up at the op timeout", "op_timeout", d, "err", err)
	s.brk.trip(s.log, s.endpointName())
	return fmt.Errorf("no complete answer within the op timeout of %v: %w", d, err)
}

// endpointName names the endpoint in messages: the custom URL, else "AWS S3".
func (s *S3) endpointName() string {
	if s.opts.Endpoint != "" {
		return s.opts.Endpoint
	}
	if s.raw != nil {
		return s.raw.base
	}
	return "AWS S3"
}

// norm is normalise, naming the endpoint when the reply was not S3's.
func (s *S3) norm(ctx context.Context, op, key string, err error) error {
	err = normalise(ctx, op, key, err)
	if errors.Is(err, ErrNotS3) {
		return fmt.Errorf("objclient: the endpoint %s is not S3: %w", s.endpointName(), err)
	}
	return err
}

// notS3 is the error for a reply that an S3 server never gives.
func (s *S3) notS3(op, key, what string) error {
	return fmt.Errorf("objclient: %s %q: the endpoint %s is not S3 (%s): %w", op, key, s.endpointName(), what, ErrNotS3)
}
