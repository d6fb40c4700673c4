package objtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FaultKind is what a FaultProxy does to a request it picks.
type FaultKind int

const (
	// FaultSlowDown answers 503 with an S3 "SlowDown" XML error body.
	FaultSlowDown FaultKind = iota + 1
	// FaultInternalError answers 500 with an S3 "InternalError" XML error body.
	FaultInternalError
	// FaultStall forwards the request, sends AfterBytes bytes of the
	// response body, then sends nothing more and keeps the connection open
	// (no FIN) until the client gives up or the proxy is closed.
	FaultStall
	// FaultCut forwards the request, sends AfterBytes bytes of the response
	// body, then closes the connection: the client sees a truncated body.
	FaultCut
	// FaultHang never answers: no status line, no headers, until the client
	// gives up or the proxy is closed (CASES C18: a LIST that never returns).
	FaultHang
	// FaultDrop forwards the request, lets the server apply it, then drops
	// the reply: the client connection is closed before any byte of it (a
	// lost response; the client cannot tell whether the request took
	// effect).
	FaultDrop
)

func (k FaultKind) String() string {
	switch k {
	case FaultSlowDown:
		return "SlowDown"
	case FaultInternalError:
		return "InternalError"
	case FaultStall:
		return "Stall"
	case FaultCut:
		return "Cut"
	case FaultHang:
		return "Hang"
	case FaultDrop:
		return "Drop"
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// Fault is one rule of a FaultProxy. Rules are tried in the order they were
// added; the first that picks a request applies and the others are skipped.
type Fault struct {
	Kind FaultKind
	// Method limits the rule to one HTTP method ("GET", "HEAD", "PUT",
	// ...); "" matches every method. ListObjectsV2 is a GET without a key.
	Method string
	// Op limits the rule to one S3 operation as OpOf names it
	// ("ListObjectsV2", "PutObject", "UploadPart", ...); "" matches all.
	Op string
	// Times is how many requests the rule faults before it retires; 0 means
	// no limit.
	Times int
	// Fraction is the share of matching requests faulted, in (0, 1], drawn
	// from the proxy's seeded PRNG; 0 means every matching request.
	Fraction float64
	// AfterBytes is the number of response-body bytes FaultStall and
	// FaultCut let through first.
	AfterBytes int64
	// Notify, if set, receives one value (sent without blocking; give it a
	// buffer) when the fault takes effect: at once for error replies, when
	// the body stops for FaultStall and FaultCut. Tests wait on it instead
	// of sleeping.
	Notify chan<- struct{}
}

type faultRule struct {
	Fault
	applied int
}

// FaultProxy is an HTTP reverse proxy on 127.0.0.1 in front of an S3
// endpoint that injects per-request faults, for testing the real client's
// retries, stall timeout and body resumption against a real server. The
// Host header is passed through unchanged, so SigV4 signatures made for the
// proxy's address stay valid. Safe for concurrent use.
type FaultProxy struct {
	srv    *httptest.Server
	tr     *http.Transport // to the target; this proxy's own connections
	target *url.URL
	done   chan struct{} // closed by Close; releases stalled bodies
	once   sync.Once

	mu       sync.Mutex // guards rules, rng, requests, injected
	rules    []*faultRule
	rng      *rand.Rand
	requests map[string]int64 // by HTTP method
	injected map[FaultKind]int64
}

// StartFaultProxy starts a proxy in front of target ("http://host:port")
// and closes it on t.Cleanup.
func StartFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		t.Fatalf("objtest: bad proxy target %q: %v", target, err)
	}
	p := &FaultProxy{
		target:   u,
		done:     make(chan struct{}),
		rng:      rand.New(rand.NewPCG(1, 2)),
		requests: map[string]int64{},
		injected: map[FaultKind]int64{},
	}
	p.tr = http.DefaultTransport.(*http.Transport).Clone()
	p.tr.Proxy = nil
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // keep the signed Host
		},
		Transport:     &faultTransport{p: p, next: p.tr},
		FlushInterval: -1, // pass body bytes on at once, so AfterBytes is exact
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, errDrop) {
				// Close the connection without a reply.
				if hj, ok := w.(http.Hijacker); ok {
					if c, _, herr := hj.Hijack(); herr == nil {
						c.Close()
						return
					}
				}
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.Close)
	return p
}

// URL is the proxy's endpoint, "http://127.0.0.1:PORT".
func (p *FaultProxy) URL() string { return p.srv.URL }

// Add appends a fault rule.
func (p *FaultProxy) Add(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &faultRule{Fault: f})
}

// Clear removes all fault rules; requests pass through untouched.
func (p *FaultProxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Requests returns the number of requests received with the HTTP method
// ("" for all), faulted or not.
func (p *FaultProxy) Requests(method string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if method != "" {
		return p.requests[method]
	}
	var n int64
	for _, c := range p.requests {
		n += c
	}
	return n
}

// Injected returns the number of faults of kind applied so far (0 for all kinds).
func (p *FaultProxy) Injected(kind FaultKind) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if kind != 0 {
		return p.injected[kind]
	}
	var n int64
	for _, c := range p.injected {
		n += c
	}
	return n
}

// ResetCounts zeroes the request and fault counters.
func (p *FaultProxy) ResetCounts() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = map[string]int64{}
	p.injected = map[FaultKind]int64{}
}

// Close releases stalled responses, closes client connections and stops
// the proxy; it returns once every handler has returned. Idempotent.
func (p *FaultProxy) Close() {
	p.once.Do(func() {
		close(p.done)
		p.srv.CloseClientConnections()
		p.srv.Close()
		p.tr.CloseIdleConnections()
	})
}

// pick counts r and returns the rule that applies to it, or nil.
func (p *FaultProxy) pick(r *http.Request) *Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests[r.Method]++
	for _, rule := range p.rules {
		if rule.Method != "" && rule.Method != r.Method {
			continue
		}
		if rule.Op != "" && rule.Op != OpOf(r) {
			continue
		}
		if rule.Times > 0 && rule.applied >= rule.Times {
			continue
		}
		if rule.Fraction > 0 && p.rng.Float64() >= rule.Fraction {
			continue
		}
		rule.applied++
		p.injected[rule.Kind]++
		f := rule.Fault
		return &f
	}
	return nil
}

type faultTransport struct {
	p    *FaultProxy
	next http.RoundTripper
}

func (t *faultTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f := t.p.pick(r)
	if f == nil {
		return t.next.RoundTrip(r)
	}
	if f.Kind == FaultSlowDown || f.Kind == FaultInternalError {
		// Read the request body first, as S3 does: answering before it is
		// sent makes the client see a connection reset instead of the
		// error reply, which would turn these tests into races.
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
		}
	}
	switch f.Kind {
	case FaultSlowDown:
		notify(f.Notify)
		return errorResponse(r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate."), nil
	case FaultInternalError:
		notify(f.Notify)
		return errorResponse(r, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again."), nil
	case FaultHang:
		notify(f.Notify)
		select {
		case <-r.Context().Done():
			return nil, r.Context().Err()
		case <-t.p.done:
			return nil, errCut
		}
	case FaultDrop:
		resp, err := t.next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		notify(f.Notify)
		return nil, errDrop
	case FaultStall, FaultCut:
		resp, err := t.next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		resp.Body = &faultBody{rc: resp.Body, left: f.AfterBytes, stall: f.Kind == FaultStall, ctx: r.Context(), done: t.p.done, notify: f.Notify}
		return resp, nil
	}
	return nil, fmt.Errorf("objtest: unknown fault kind %v", f.Kind)
}

// errorResponse builds an S3 error reply (no body for HEAD, like S3).
func errorResponse(r *http.Request, status int, code, msg string) *http.Response {
	var body []byte
	if r.Method != http.MethodHead {
		body = fmt.Appendf(nil, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
			`<Error><Code>%s</Code><Message>%s</Message><RequestId>os2g-fault</RequestId><HostId>os2g</HostId></Error>`, code, msg)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amz-Request-Id", "os2g-fault")
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
		Request: r,
	}
}

var (
	errCut  = errors.New("objtest: connection cut by fault proxy")
	errDrop = errors.New("objtest: reply dropped by fault proxy")
)

// OpOf names the S3 operation of request r as the API does
// ("ListObjectsV2", "GetObject", "HeadObject", "PutObject", "UploadPart",
// "CreateMultipartUpload", "CompleteMultipartUpload",
// "AbortMultipartUpload", "DeleteObject", "CopyObject", "HeadBucket"), for
// path-style requests; "" for anything else.
func OpOf(r *http.Request) string {
	q := r.URL.Query()
	path := strings.TrimPrefix(r.URL.Path, "/")
	i := strings.IndexByte(path, '/')
	hasKey := i >= 0 && i < len(path)-1 // "bucket/key", not "bucket" or "bucket/"
	switch r.Method {
	case http.MethodGet:
		switch {
		case !hasKey && q.Has("list-type"):
			return "ListObjectsV2"
		case !hasKey && q.Has("uploads"):
			return "ListMultipartUploads"
		case hasKey:
			return "GetObject"
		}
	case http.MethodHead:
		if hasKey {
			return "HeadObject"
		}
		return "HeadBucket"
	case http.MethodPut:
		switch {
		case q.Has("partNumber") && r.Header.Get("X-Amz-Copy-Source") != "":
			return "UploadPartCopy"
		case q.Has("partNumber"):
			return "UploadPart"
		case r.Header.Get("X-Amz-Copy-Source") != "":
			return "CopyObject"
		case hasKey:
			return "PutObject"
		}
	case http.MethodPost:
		switch {
		case q.Has("uploads"):
			return "CreateMultipartUpload"
		case q.Has("uploadId"):
			return "CompleteMultipartUpload"
		case q.Has("delete"):
			return "DeleteObjects"
		}
	case http.MethodDelete:
		if q.Has("uploadId") {
			return "AbortMultipartUpload"
		}
		if hasKey {
			return "DeleteObject"
		}
	}
	return ""
}

// faultBody lets left bytes through, then stalls or fails.
type faultBody struct {
	rc     io.ReadCloser
	left   int64
	stall  bool
	ctx    context.Context
	done   <-chan struct{}
	notify chan<- struct{}
}

func notify(c chan<- struct{}) {
	if c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (b *faultBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		notify(b.notify)
		b.notify = nil
		if b.stall {
			select {
			case <-b.ctx.Done():
				return 0, b.ctx.Err()
			case <-b.done:
				return 0, errCut
			}
		}
		// An error while copying the body makes ReverseProxy abort the
		// handler, which closes the client connection mid-body.
		return 0, errCut
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *faultBody) Close() error { return b.rc.Close() }
