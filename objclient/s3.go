package objclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// S3 is a Store over one bucket of an S3-compatible server, built on
// aws-sdk-go-v2. Create it with New.
type S3 struct {
	opts   Options
	client *s3.Client
	creds  *aws.CredentialsCache // nil when the provider is not cached
	log    *slog.Logger
	// raw makes GetRange's requests without the SDK's middleware (see
	// rawget.go); nil: through the SDK.
	raw *rawGetter
	// rawHead makes Stat's HEADs without the SDK (see rawhead.go); nil:
	// through the SDK.
	rawHead *rawGetter
	// brk fails calls at once while the store is not answering.
	brk breaker
	// retries counts requests sent again after a throttling reply or a
	// transient failure (the SDK's retries and raw's).
	retries atomic.Int64
}

var _ Store = (*S3)(nil)

// New builds an S3 store from the standard AWS configuration (environment,
// shared config and credentials files, profiles, web identity, IMDS) with
// the overrides in o. It does not contact the server; call CheckBucket for
// that. Errors wrap ErrInvalidArgument for bad options.
func New(ctx context.Context, o Options) (*S3, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()

	hc := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) {
			d.Timeout = 10 * time.Second
			d.KeepAlive = 30 * time.Second
		}).
		WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = o.MaxConnsPerHost
			tr.MaxIdleConnsPerHost = o.MaxConnsPerHost
			tr.IdleConnTimeout = 90 * time.Second
			tr.ResponseHeaderTimeout = o.StallTimeout
			tr.DisableCompression = true // bytes as stored (CASES C12)
			// A small read buffer: what it holds past the headers is
			// copied once more, while body reads at least its size go
			// straight into the caller's (the cache's) buffer.
			tr.ReadBufferSize = 4 << 10
			tr.WriteBufferSize = 64 << 10
		})

	backoff := fullJitter{base: o.RetryBaseDelay, max: o.RetryMaxDelay}
	retryer := func() aws.Retryer {
		return retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = o.MaxAttempts
			so.MaxBackoff = o.RetryMaxDelay
			so.Backoff = backoff
			// The SDK's default token bucket gives up after a burst of
			// retries; a training job under SlowDown must keep backing off
			// instead (CASES C17).
			so.RateLimiter = ratelimit.None
			so.Retryables = append([]retry.IsErrorRetryable{retryTruncated{}}, so.Retryables...)
		})
	}

	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(hc),
		config.WithRetryer(retryer),
		config.WithCredentialsCacheOptions(func(co *aws.CredentialsCacheOptions) {
			// Refresh temporary credentials well before they expire (C19).
			co.ExpiryWindow = 5 * time.Minute
			co.ExpiryWindowJitterFrac = 0.2
		}),
	}
	if o.Profile != "" {
		loadOpts = append(loadOpts, config.WithSharedConfigProfile(o.Profile))
	}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("objclient: loading AWS configuration: %w: %w", ErrInvalidArgument, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	s := &S3{opts: o, log: o.Logger}
	if cc, ok := cfg.Credentials.(*aws.CredentialsCache); ok {
		s.creds = cc
	}
	s.client = s3.NewFromConfig(cfg, func(so *s3.Options) {
		so.Retryer = countRetries{so.Retryer, &s.retries}
		so.UsePathStyle = o.ForcePathStyle
		// Wrapped here, after the config has set up the CA bundle on hc.
		so.HTTPClient = stallClient{next: so.HTTPClient, stall: o.StallTimeout, log: o.Logger, brk: &s.brk}
		if o.Registerer != nil {
			// Here, not in the config: the config needs the
			// BuildableClient itself (AWS_CA_BUNDLE).
			so.HTTPClient = instrumentedClient{inner: so.HTTPClient, m: newRequestMetrics(o.Registerer)}
		}
		// Ranged GETs never carry a whole-object checksum; do not log each one.
		so.DisableLogOutputChecksumValidationSkipped = true
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		if o.ChecksumWhenRequired {
			so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	if !o.sdkGet || !o.sdkHead {
		raw := newRawGetter(ctx, s.client, cfg, o, &s.retries)
		if raw != nil && !o.sdkGet {
			s.raw = raw
		}
		if raw != nil && !o.sdkHead {
			s.rawHead = raw
		}
	}
	return s, nil
}

// Retries returns how many requests were sent again after a throttling
// reply or a transient failure, since New.
func (s *S3) Retries() int64 { return s.retries.Load() }

// countRetries counts the retries an aws.Retryer decides on.
type countRetries struct {
	aws.Retryer
	n *atomic.Int64
}

func (c countRetries) RetryDelay(attempt int, err error) (time.Duration, error) {
	c.n.Add(1)
	return c.Retryer.RetryDelay(attempt, err)
}

// Client returns the underlying SDK client (for tests and tools).
func (s *S3) Client() *s3.Client { return s.client }

// Bucket returns the bucket name.
func (s *S3) Bucket() string { return s.opts.Bucket }

// fullJitter is capped exponential backoff with full jitter: the delay
// before retry k is uniform in [0, min(max, base*2^k)). Source: Marc
// Brooker, "Exponential Backoff and Jitter", AWS Architecture Blog, 2015.
type fullJitter struct{ base, max time.Duration }

func (f fullJitter) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	return f.delay(attempt), nil
}

func (f fullJitter) delay(attempt int) time.Duration {
	d := f.max
	if attempt < 30 {
		if c := f.base << uint(attempt); c > 0 && c < f.max {
			d = c
		}
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}

// call runs fn, and once more after forcing a credential refresh when the
// server rejects the session token as expired (CASES C19: the server's
// clock may run ahead of the advertised expiry).
// The call, retries included, is bounded by RequestTimeout (the op
// timeout).
func (s *S3) call(ctx context.Context, fn func(context.Context) error) error {
	return s.callSized(ctx, 0, fn)
}

// callSized is call for a request that sends or receives n body bytes
// (PutObject, UploadPart): its bound is opTimeout(n).
func (s *S3) callSized(ctx context.Context, n int, fn func(context.Context) error) error {
	d := s.opTimeout(n)
	if err := s.brk.allow(s.endpointName(), d); err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return s.timedOut(ctx, octx, d, s.callExpiry(octx, isExpiredToken, fn))
}

// callBody is call without a deadline of its own, for GetObject: GetRange
// bounds the whole call and getOnce times headers and body.
func (s *S3) callBody(ctx context.Context, fn func(context.Context) error) error {
	return s.callExpiry(ctx, isExpiredToken, fn)
}

// callHead is call for HEAD requests: S3 answers a HEAD with no body, so an
// expired token shows only as a bare 400.
func (s *S3) callHead(ctx context.Context, fn func(context.Context) error) error {
	d := s.opTimeout(0)
	if err := s.brk.allow(s.endpointName(), d); err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return s.timedOut(ctx, octx, d, s.callExpiry(octx, func(err error) bool {
		code, status := apiCode(err)
		return isExpiredToken(err) || status == http.StatusBadRequest && (code == "" || code == "BadRequest")
	}, fn))
}

func (s *S3) callExpiry(ctx context.Context, expired func(error) bool, fn func(context.Context) error) error {
	err := fn(ctx)
	if err != nil && expired(err) && s.creds != nil && ctx.Err() == nil {
		s.log.Info("credentials rejected as expired; refreshing and retrying once")
		s.creds.Invalidate()
		err = fn(ctx)
	}
	return err
}

// CheckBucket verifies that the bucket exists and the credentials may list
// it, with one ListObjectsV2 of one key. Errors wrap ErrNoSuchBucket,
// ErrAccessDenied, ErrInvalidCredentials or ErrUnavailable.
//
// The reply must be S3's ListBucketResult naming the bucket: a web server
// that answers 200 with HTML to everything is refused with ErrNotS3, and
// the message names the endpoint.
func (s *S3) CheckBucket(ctx context.Context) error {
	var out *s3.ListObjectsV2Output
	err := s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
			Bucket:  aws.String(s.opts.Bucket),
			MaxKeys: aws.Int32(1),
		})
		return err
	})
	if err != nil {
		return s.norm(ctx, "check bucket", s.opts.Bucket, err)
	}
	if aws.ToString(out.Name) == "" && out.MaxKeys == nil && out.KeyCount == nil {
		return s.notS3("check bucket", s.opts.Bucket, "its reply to ListObjectsV2 is not an S3 ListBucketResult")
	}
	return nil
}

// Stat implements Store with HeadObject: a raw signed HEAD (rawhead.go)
// where the bucket allows raw requests, else, or when the raw reply is
// unusual, the SDK's HeadObject. Both share the op timeout, the breaker,
// the credential-expiry retry, the request metrics and the error mapping.
func (s *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	var oi ObjectInfo
	err := s.callHead(ctx, func(ctx context.Context) error {
		if s.rawHead != nil {
			var err error
			oi, err = s.rawHead.head(ctx, key)
			if !errors.Is(err, errRawFallback) {
				return err
			}
			s.log.Debug("raw HEAD reply unusual; asking through the SDK", "key", key, "err", err)
		}
		out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(key)})
		if err == nil {
			oi = headOutputInfo(key, out)
		}
		return err
	})
	if err != nil {
		return ObjectInfo{}, normalise(ctx, "stat", key, err)
	}
	return oi, nil
}

// headOutputInfo converts the SDK's HeadObject reply.
func headOutputInfo(key string, out *s3.HeadObjectOutput) ObjectInfo {
	oi := ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
		ContentType:  aws.ToString(out.ContentType),
	}
	if len(out.Metadata) > 0 {
		oi.Metadata = make(map[string]string, len(out.Metadata))
		for k, v := range out.Metadata {
			oi.Metadata[strings.ToLower(k)] = v
		}
	}
	return oi
}

// List implements Store with ListObjectsV2.
func (s *S3) List(ctx context.Context, req ListRequest) (ListPage, error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.opts.Bucket)}
	if req.Prefix != "" {
		in.Prefix = aws.String(req.Prefix)
	}
	if req.Delimiter != "" {
		in.Delimiter = aws.String(req.Delimiter)
	}
	if req.ContinuationToken != "" {
		in.ContinuationToken = aws.String(req.ContinuationToken)
	}
	if req.StartAfter != "" {
		in.StartAfter = aws.String(req.StartAfter)
	}
	if req.MaxKeys > 0 {
		in.MaxKeys = aws.Int32(req.MaxKeys)
	}
	var out *s3.ListObjectsV2Output
	err := s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.client.ListObjectsV2(ctx, in)
		return err
	})
	if err != nil {
		return ListPage{}, normalise(ctx, "list", req.Prefix, err)
	}
	page := ListPage{
		Objects:     make([]ObjectInfo, 0, len(out.Contents)),
		IsTruncated: aws.ToBool(out.IsTruncated),
	}
	for _, c := range out.Contents {
		page.Objects = append(page.Objects, ObjectInfo{
			Key:          aws.ToString(c.Key),
			Size:         aws.ToInt64(c.Size),
			ETag:         aws.ToString(c.ETag),
			LastModified: aws.ToTime(c.LastModified),
		})
	}
	for _, p := range out.CommonPrefixes {
		page.CommonPrefixes = append(page.CommonPrefixes, aws.ToString(p.Prefix))
	}
	if page.IsTruncated {
		page.NextContinuationToken = aws.ToString(out.NextContinuationToken)
		if page.NextContinuationToken == "" {
			// A truncated page without a token would loop or cut the
			// listing silently; refuse it (CASES C17).
			return ListPage{}, fmt.Errorf("objclient: list %q: truncated page without a continuation token: %w", req.Prefix, ErrUnavailable)
		}
	}
	return page, nil
}

// Delete implements Store with DeleteObject.
func (s *S3) Delete(ctx context.Context, key string) error {
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(key)})
		return err
	})
	err = normalise(ctx, "delete", key, err)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// ListUploads returns the keys under prefix that have multipart uploads in
// progress (for tests and cleanup tools).
func (s *S3) ListUploads(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.opts.Bucket), Prefix: aws.String(prefix)}
	for {
		var out *s3.ListMultipartUploadsOutput
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			out, err = s.client.ListMultipartUploads(ctx, in)
			return err
		})
		if err != nil {
			return nil, normalise(ctx, "list uploads", prefix, err)
		}
		for _, u := range out.Uploads {
			keys = append(keys, aws.ToString(u.Key))
		}
		if !aws.ToBool(out.IsTruncated) {
			return keys, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// copySource escapes bucket/key for x-amz-copy-source: every byte but the
// unreserved set and "/" is percent-encoded, so keys like "run[1]/a b+c"
// survive (CASES C24).
func (s *S3) copySource(key string) string {
	return escapeCopyPath(s.opts.Bucket) + "/" + escapeCopyPath(key)
}

// escapeCopyPath percent-encodes every byte outside RFC 3986's unreserved
// set, keeping "/". url.PathEscape keeps "+", which servers read as a space.
func escapeCopyPath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-._~/", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// Copy implements Store: CopyObject up to 5 GiB, UploadPartCopy above.
func (s *S3) Copy(ctx context.Context, src, dst, ifMatch string) (ObjectInfo, error) {
	info, err := s.Stat(ctx, src)
	if err != nil {
		return ObjectInfo{}, err
	}
	if ifMatch != "" && info.ETag != ifMatch {
		return ObjectInfo{}, fmt.Errorf("objclient: copy %q: %w", src, ErrChanged)
	}
	if info.Size > maxCopyPartSize {
		return s.copyMultipart(ctx, info, dst)
	}
	in := &s3.CopyObjectInput{
		Bucket:            aws.String(s.opts.Bucket),
		Key:               aws.String(dst),
		CopySource:        aws.String(s.copySource(src)),
		CopySourceIfMatch: aws.String(info.ETag),
	}
	var out *s3.CopyObjectOutput
	err = s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.client.CopyObject(ctx, in)
		return err
	})
	if err != nil {
		return ObjectInfo{}, normalise(ctx, "copy", src, err)
	}
	res := info
	res.Key = dst
	if out.CopyObjectResult != nil {
		if e := aws.ToString(out.CopyObjectResult.ETag); e != "" {
			res.ETag = e
		}
		if t := out.CopyObjectResult.LastModified; t != nil {
			res.LastModified = *t
		}
	}
	return res, nil
}

func (s *S3) copyMultipart(ctx context.Context, info ObjectInfo, dst string) (ObjectInfo, error) {
	partSize := int64(512 << 20)
	if need := (info.Size + maxParts - 1) / maxParts; need > partSize {
		partSize = need
	}
	mu, err := s.createMultipart(ctx, dst, PutOptions{ContentType: info.ContentType, Metadata: info.Metadata})
	if err != nil {
		return ObjectInfo{}, err
	}
	var parts []types.CompletedPart
	for off, n := int64(0), int32(1); off < info.Size; off, n = off+partSize, n+1 {
		end := min(off+partSize, info.Size) - 1
		var out *s3.UploadPartCopyOutput
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			out, err = s.client.UploadPartCopy(ctx, &s3.UploadPartCopyInput{
				Bucket: aws.String(s.opts.Bucket), Key: aws.String(dst),
				UploadId: aws.String(mu.uploadID), PartNumber: aws.Int32(n),
				CopySource:        aws.String(s.copySource(info.Key)),
				CopySourceIfMatch: aws.String(info.ETag),
				CopySourceRange:   aws.String(fmt.Sprintf("bytes=%d-%d", off, end)),
			})
			return err
		})
		if err != nil {
			mu.abort(ctx)
			return ObjectInfo{}, normalise(ctx, "copy", info.Key, err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.CopyPartResult.ETag})
	}
	oi, err := mu.complete(ctx, parts, info.Size)
	if err != nil {
		return ObjectInfo{}, err
	}
	oi.Size = info.Size
	return oi, nil
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

// GetRange implements Store with ranged GetObject. The body is read
// straight into buf. A response that stalls (no bytes for StallTimeout) or
// breaks mid-body is resumed from the last byte received on a new request,
// pinned to the ETag of the first response so the bytes stay consistent.
// A server that ignores Range and answers 200 with the whole object is
// handled by skipping to off (CASES C12).
func (s *S3) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("objclient: get %q at %d: %w", key, off, ErrInvalidArgument)
	}
	if len(buf) == 0 {
		return 0, nil
	}
	parent := ctx
	d := s.opTimeout(len(buf))
	if err := s.brk.allow(s.endpointName(), d); err != nil {
		return 0, fmt.Errorf("objclient: get %q: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n, err := s.getRange(ctx, key, off, buf, ifMatch)
	err = s.timedOut(parent, ctx, d, err)
	if err != nil && parent.Err() == nil && ctx.Err() != nil && !errors.Is(err, ErrUnavailable) {
		err = fmt.Errorf("objclient: get %q: %w: %w", key, ErrUnavailable, err)
	}
	return n, err
}

// getRange is GetRange under the op timeout.
func (s *S3) getRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	got := 0
	etag := ifMatch
	var lastErr error
	backoff := fullJitter{base: s.opts.RetryBaseDelay, max: s.opts.RetryMaxDelay}
	for attempt := 0; attempt < s.opts.MaxAttempts; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(backoff.delay(attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return got, normalise(ctx, "get", key, ctx.Err())
			case <-t.C:
			}
		}
		n, done, tag, err := s.getOnce(ctx, key, off+int64(got), buf[got:], etag)
		got += n
		if etag == "" {
			etag = tag
		}
		if err == nil {
			return got, nil
		}
		if done || ctx.Err() != nil {
			return got, err
		}
		lastErr = err
		s.log.Debug("range GET interrupted; resuming", "key", key, "offset", off+int64(got), "attempt", attempt+1, "err", err)
	}
	return got, lastErr
}

// getOnce makes one ranged GET for buf at off. done reports that err is
// final (not worth a retry of the body).
func (s *S3) getOnce(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (n int, done bool, etag string, err error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()

	rng := fmt.Sprintf("bytes=%d-%d", off, off+int64(len(buf))-1)
	in := &s3.GetObjectInput{
		Bucket: aws.String(s.opts.Bucket),
		Key:    aws.String(key),
		Range:  aws.String(rng),
	}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	}
	var out *rawResponse
	// Headers must come within the op deadline of GetRange (ctx), across
	// retries; the body is then timed by the stall timer below.
	err = s.callBody(actx, func(c context.Context) error {
		var err error
		// Until headers arrive, failures are retried (the transport's
		// ResponseHeaderTimeout catches a silent server); the body is
		// ours to time.
		if s.raw != nil {
			out, err = s.raw.getHeaders(c, key, rng, ifMatch)
			return err
		}
		o, err := s.client.GetObject(c, in)
		if err == nil {
			out = &rawResponse{body: o.Body, etag: aws.ToString(o.ETag), contentRange: aws.ToString(o.ContentRange)}
		}
		return err
	})
	if err != nil {
		code, status := apiCode(err)
		if code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable {
			return 0, true, "", nil // at or past EOF
		}
		return 0, true, "", normalise(ctx, "get", key, err)
	}
	defer out.body.Close()
	stall := time.AfterFunc(s.opts.StallTimeout, cancel)
	defer stall.Stop()
	etag = out.etag
	if out.contentRange == "" {
		// 200 with the whole object: skip to off.
		if off > 0 {
			if _, err := io.CopyN(io.Discard, out.body, off); err != nil {
				if err == io.EOF {
					return 0, true, etag, nil
				}
				return 0, false, etag, normalise(ctx, "get", key, err)
			}
		}
	}
	for n < len(buf) {
		m, rerr := out.body.Read(buf[n:])
		if m > 0 {
			n += m
			stall.Reset(s.opts.StallTimeout)
		}
		if rerr == io.EOF {
			return n, true, etag, nil
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return n, true, etag, normalise(ctx, "get", key, ctx.Err())
			}
			if actx.Err() != nil {
				// Cut by the stall timer: not the caller's cancellation.
				return n, false, etag, fmt.Errorf("objclient: get %q: body: %w: %w: nothing for %v", key, ErrUnavailable, errStalled, s.opts.StallTimeout)
			}
			return n, false, etag, fmt.Errorf("objclient: get %q: body: %w: %w", key, ErrUnavailable, rerr)
		}
	}
	return n, true, etag, nil
}
