package objclient

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	"github.com/aws/smithy-go/encoding/httpbinding"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// rawGetter makes the data path's ranged GETs without the SDK's
// middleware stack: an http.Request signed by the SDK's own SigV4 signer
// (v4.Signer, the same credentials provider), sent on the same
// http.Client, to the URL the SDK's endpoint resolver gives for the
// bucket. Stat's HEADs take the same path (rawhead.go); every other
// operation goes through the SDK. Measured against
// versitygw on loopback, a 110 KiB GetObject costs about 210-260 us of
// client CPU through the SDK and 140 us this way; for an epoch over small
// files that is most of the daemon's cost per file.
//
// Errors are returned in the SDK's shapes (*awshttp.ResponseError around
// a smithy.GenericAPIError with the S3 error code), so normalise, apiCode
// and the credential-expiry retry treat them exactly as the SDK's. The
// SDK's retries before the response headers are replaced by getHeaders'
// loop with the same backoff and attempt limit.
type rawGetter struct {
	base    string // scheme://host[:port][/bucket] of the bucket, no trailing slash
	region  string // SigV4 signing region
	hc      aws.HTTPClient
	signer  *v4.Signer
	creds   aws.CredentialsProvider
	backoff fullJitter
	tries   int
	retries *atomic.Int64
	// skew is the server's clock minus ours (ns), learned from a
	// RequestTimeTooSkewed reply, added to the signing time as the SDK
	// does.
	skew atomic.Int64
}

// emptySHA256 is the SHA-256 of an empty payload (a GET has no body).
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// newRawGetter resolves the bucket's endpoint the way the client does
// (custom endpoint, path or virtual-host style, FIPS, dual-stack,
// accelerate). It returns nil, and GETs then go through the SDK, where
// that is not possible or signing does not apply (anonymous access).
func newRawGetter(ctx context.Context, c *s3.Client, cfg aws.Config, o Options, retries *atomic.Int64) *rawGetter {
	if cfg.Credentials == nil {
		return nil
	}
	if _, anon := cfg.Credentials.(aws.AnonymousCredentials); anon {
		return nil
	}
	so := c.Options()
	if so.EndpointResolverV2 == nil || so.HTTPClient == nil {
		return nil
	}
	fips := so.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled
	dual := so.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled
	ep, err := so.EndpointResolverV2.ResolveEndpoint(ctx, s3.EndpointParameters{
		Bucket:         aws.String(o.Bucket),
		Region:         aws.String(so.Region),
		Endpoint:       so.BaseEndpoint,
		ForcePathStyle: aws.Bool(so.UsePathStyle),
		Accelerate:     aws.Bool(so.UseAccelerate),
		UseFIPS:        aws.Bool(fips),
		UseDualStack:   aws.Bool(dual),
	})
	if err != nil || ep.URI.Host == "" || ep.URI.RawQuery != "" {
		return nil
	}
	// Only plain SigV4 for service "s3": S3 Express directory buckets,
	// multi-region access points (SigV4A) and Outposts sign otherwise and
	// stay with the SDK.
	region := so.Region
	if auths, ok := smithyauth.GetAuthOptions(&ep.Properties); ok && len(auths) > 0 {
		a := auths[0]
		// Endpoint rules name the scheme "sigv4" ("sigv4-s3express",
		// "sigv4a" otherwise); auth resolvers say "aws.auth#sigv4".
		if a.SchemeID != "sigv4" && a.SchemeID != smithyauth.SchemeIDSigV4 {
			return nil
		}
		if name, ok := smithyhttp.GetSigV4SigningName(&a.SignerProperties); ok && name != "s3" {
			return nil
		}
		if r, ok := smithyhttp.GetSigV4SigningRegion(&a.SignerProperties); ok && r != "" {
			region = r
		}
	}
	u := ep.URI
	return &rawGetter{
		base:    u.Scheme + "://" + u.Host + strings.TrimSuffix(u.EscapedPath(), "/"),
		region:  region,
		hc:      so.HTTPClient,
		signer:  v4.NewSigner(func(so *v4.SignerOptions) { so.DisableURIPathEscaping = true }),
		creds:   cfg.Credentials,
		backoff: fullJitter{base: o.RetryBaseDelay, max: o.RetryMaxDelay},
		tries:   o.MaxAttempts,
		retries: retries,
	}
}

// rawResponse is what getOnce needs of a GetObject reply.
type rawResponse struct {
	body         io.ReadCloser
	etag         string
	contentRange string
}

// getHeaders sends GET key with the Range header rng (and If-Match) and
// returns once the response headers of a 200 or 206 arrive, retrying
// throttling and transient failures before that with full-jitter backoff,
// up to the attempt limit. The caller closes body.
func (g *rawGetter) getHeaders(ctx context.Context, key, rng, ifMatch string) (*rawResponse, error) {
	var r *rawResponse
	err := g.withRetries(ctx, func() error {
		var err error
		r, err = g.getOnce(ctx, key, rng, ifMatch)
		return err
	})
	return r, err
}

// withRetries runs once (one signed request) until it succeeds, retrying
// throttling and transient failures with full-jitter backoff up to the
// attempt limit; a RequestTimeTooSkewed reply is signed again at once with
// the server's time, without counting as an attempt.
func (g *rawGetter) withRetries(ctx context.Context, once func() error) error {
	var err error
	for attempt := 0; attempt < g.tries; attempt++ {
		if attempt > 0 {
			g.retries.Add(1)
			t := time.NewTimer(g.backoff.delay(attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		err = once()
		if err != nil && g.learnSkew(err) {
			err = once() // signed again at once with the server's time
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !retryable(err) {
			return err
		}
	}
	return err
}

// learnSkew records the clock offset from a RequestTimeTooSkewed reply's
// Date header and reports whether it did. A HEAD's refusal has no body to
// name the code: a bare 403 whose Date is more than maxSkew from our
// (corrected) clock counts as one.
func (g *rawGetter) learnSkew(err error) bool {
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil {
		return false
	}
	code := Code(err)
	if code != "RequestTimeTooSkewed" && !(code == "Forbidden" && re.Response.Request != nil && re.Response.Request.Method == http.MethodHead) {
		return false
	}
	t, perr := http.ParseTime(re.Response.Header.Get("Date"))
	if perr != nil {
		return false
	}
	skew := time.Until(t)
	if code != "RequestTimeTooSkewed" && (skew-time.Duration(g.skew.Load())).Abs() <= maxSkew {
		return false // refused for another reason
	}
	g.skew.Store(int64(skew))
	return true
}

// maxSkew is how far a request's signing time may be from the server's
// clock before S3 refuses it (RequestTimeTooSkewed at 15 minutes); a
// bare 403 to a HEAD from a server further off than this is taken for one.
const maxSkew = 5 * time.Minute

// retryable reports whether a failed GET (before its body) is worth
// another attempt: throttling, 5xx, transport errors, S3's RequestTimeout.
func retryable(err error) bool {
	if errors.Is(err, errRawFallback) {
		return false // the SDK asks instead
	}
	if code, _ := apiCode(err); code == "RequestTimeout" || code == "RequestTimeoutException" {
		return true
	}
	s := sentinelOf(err)
	return errors.Is(s, ErrThrottled) || errors.Is(s, ErrUnavailable)
}

func (g *rawGetter) getOnce(ctx context.Context, key, rng, ifMatch string) (*rawResponse, error) {
	req, err := g.newRequest(ctx, http.MethodGet, key)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Range", rng)
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	resp, err := g.send(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent {
		return &rawResponse{body: resp.Body, etag: resp.Header.Get("ETag"), contentRange: resp.Header.Get("Content-Range")}, nil
	}
	return nil, responseError(resp)
}

// newRequest builds an unsigned request without a body for key.
func (g *rawGetter) newRequest(ctx context.Context, method, key string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, g.base+"/"+httpbinding.EscapePath(key, false), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "os2g")
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	return req, nil
}

// send signs req (SigV4, with the learned clock skew) and sends it.
func (g *rawGetter) send(ctx context.Context, req *http.Request) (*http.Response, error) {
	creds, err := g.creds.Retrieve(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().Add(time.Duration(g.skew.Load())).UTC()
	if err := g.signer.SignHTTP(ctx, creds, req, emptySHA256, "s3", g.region, now); err != nil {
		return nil, err
	}
	return g.hc.Do(req)
}

// responseError reads an S3 error reply (at most 64 KiB of it) into the
// SDK's error shapes and closes its body.
func responseError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	var doc struct {
		Code      string `xml:"Code"`
		Message   string `xml:"Message"`
		RequestID string `xml:"RequestId"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		_ = xml.Unmarshal(body, &doc) // a body that is not S3's XML leaves the status alone to decide
	}
	if doc.Code == "" {
		doc.Code = http.StatusText(resp.StatusCode)
		if doc.Code == "" {
			doc.Code = fmt.Sprintf("HTTP%d", resp.StatusCode)
		}
		doc.Code = strings.ReplaceAll(doc.Code, " ", "")
		if resp.StatusCode == http.StatusNotFound {
			doc.Code = "NotFound"
		}
	}
	reqID := doc.RequestID
	if reqID == "" {
		reqID = resp.Header.Get("X-Amz-Request-Id")
	}
	return &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: resp},
			Err:      &smithy.GenericAPIError{Code: doc.Code, Message: doc.Message},
		},
		RequestID: reqID,
	}
}
