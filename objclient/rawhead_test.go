package objclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// headObjects are written by PutRaw for the HEAD comparisons: a directory
// marker (CASES C02), an empty file, a file with a content type and
// metadata, and a key that needs escaping.
var headObjects = []struct {
	key, ctype string
	data       []byte
	meta       map[string]string
}{
	{"d/sub/", "application/x-directory", nil, nil},
	{"d/empty", "", nil, nil},
	{"d/file.txt", "text/plain", []byte("hello, world"), map[string]string{"owner": "ann", "run": "7"}},
	{"d/a b+c[1]/é%.bin", "application/octet-stream", []byte("xyz"), nil},
}

// The raw HEAD answers Stat exactly as the SDK's HeadObject does, against
// gofakes3 and versitygw: size, ETag, Last-Modified, content type,
// metadata; a missing key is ErrNotFound on both.
func TestRawHeadMatchesSDK(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(testing.TB) *objtest.Server
	}{
		{"gofakes3", objtest.StartFakeS3Server},
		{"versitygw", objtest.StartVersityServer},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := c.start(t)
			raw := objtest.NewS3(t, srv.Options())
			o := srv.Options()
			objclient.WithSDKHead(&o)
			sdk := objtest.NewS3(t, o)
			if !objclient.UsesRawHead(raw) || objclient.UsesRawHead(sdk) {
				t.Fatalf("raw HEAD set up: %v and %v, want true and false", objclient.UsesRawHead(raw), objclient.UsesRawHead(sdk))
			}
			ctx := ctxT(t)
			for _, obj := range headObjects {
				objtest.PutRaw(t, sdk, obj.key, obj.data, obj.ctype, obj.meta)
				got, err := raw.Stat(ctx, obj.key)
				if err != nil {
					t.Fatalf("raw Stat %q: %v", obj.key, err)
				}
				want, err := sdk.Stat(ctx, obj.key)
				if err != nil {
					t.Fatalf("SDK Stat %q: %v", obj.key, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("Stat %q:\n raw %+v\n SDK %+v", obj.key, got, want)
				}
				if got.Key != obj.key || got.Size != int64(len(obj.data)) || got.ETag == "" || got.LastModified.IsZero() {
					t.Errorf("raw Stat %q = %+v; want key, size %d, an ETag, a time", obj.key, got, len(obj.data))
				}
				if obj.ctype != "" && got.ContentType != obj.ctype {
					t.Errorf("raw Stat %q: content type %q, want %q", obj.key, got.ContentType, obj.ctype)
				}
				if len(obj.meta) > 0 && !reflect.DeepEqual(got.Metadata, obj.meta) {
					t.Errorf("raw Stat %q: metadata %v, want %v", obj.key, got.Metadata, obj.meta)
				}
			}
			for _, s := range []*objclient.S3{raw, sdk} {
				if _, err := s.Stat(ctx, "d/missing"); !errors.Is(err, objclient.ErrNotFound) {
					t.Errorf("Stat of a missing key (raw %v): %v, want ErrNotFound", objclient.UsesRawHead(s), err)
				}
			}
		})
	}
}

// Wrong credentials: versitygw refuses the HEAD with a bare 403, which
// both paths map to the same sentinel, ErrAccessDenied.
func TestRawHeadForbidden(t *testing.T) {
	srv := objtest.StartVersityServer(t)
	good := objtest.NewS3(t, srv.Options())
	objtest.PutRaw(t, good, "k", []byte("x"), "", nil)
	o := srv.Options()
	o.SecretAccessKey = "wrong-secret"
	o.MaxAttempts = 2
	raw := objtest.NewS3(t, o)
	objclient.WithSDKHead(&o)
	sdk := objtest.NewS3(t, o)
	ctx := ctxT(t)
	_, rerr := raw.Stat(ctx, "k")
	_, serr := sdk.Stat(ctx, "k")
	if !errors.Is(rerr, objclient.ErrAccessDenied) || !errors.Is(serr, objclient.ErrAccessDenied) {
		t.Fatalf("Stat with a wrong secret: raw %v, SDK %v; want ErrAccessDenied from both", rerr, serr)
	}
}

// headServer answers HEAD k with status (and, for 200, the headers of a
// 5-byte object) and counts the requests that came without the SDK
// (no amz-sdk-invocation-id header) and through it.
func headServer(t *testing.T, rawStatus int) (url string, raw, sdk *atomic.Int64) {
	raw, sdk = new(atomic.Int64), new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		status := http.StatusOK
		if r.Header.Get("Amz-Sdk-Invocation-Id") == "" {
			raw.Add(1)
			status = rawStatus
		} else {
			sdk.Add(1)
		}
		if status == http.StatusOK {
			w.Header().Set("Content-Length", "5")
			w.Header().Set("ETag", `"e5"`)
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Last-Modified", "Sat, 05 Dec 2026 10:00:00 GMT")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, raw, sdk
}

// Bare error statuses on a HEAD (no body to carry a code) map as the
// SDK's do; a reply the raw path does not read (a redirect) is asked
// again through the SDK, whose answer stands.
func TestRawHeadStatusMapping(t *testing.T) {
	for _, c := range []struct {
		status    int
		want      error
		fellBack  bool
		wantTries int64
	}{
		{http.StatusOK, nil, false, 1},
		{http.StatusForbidden, objclient.ErrAccessDenied, false, 1},
		{http.StatusNotFound, objclient.ErrNotFound, false, 1},
		{http.StatusServiceUnavailable, objclient.ErrThrottled, false, 3},
		{http.StatusInternalServerError, objclient.ErrUnavailable, false, 3},
		{http.StatusMovedPermanently, nil, true, 1},
		{http.StatusNoContent, nil, true, 1},
	} {
		t.Run(http.StatusText(c.status), func(t *testing.T) {
			url, raw, sdk := headServer(t, c.status)
			s := objtest.NewS3(t, objclient.Options{Bucket: "data", Region: "us-east-1", Endpoint: url, ForcePathStyle: true,
				AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", MaxAttempts: 3,
				RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond})
			if !objclient.UsesRawHead(s) {
				t.Fatal("raw HEAD not set up")
			}
			oi, err := s.Stat(ctxT(t), "k")
			if c.want != nil {
				if !errors.Is(err, c.want) {
					t.Fatalf("Stat on %d: %v, want %v", c.status, err, c.want)
				}
			} else if err != nil || oi.Size != 5 || oi.ETag != `"e5"` || oi.ContentType != "text/plain" || oi.LastModified.Year() != 2026 {
				t.Fatalf("Stat on %d = %+v, %v; want the 5-byte object", c.status, oi, err)
			}
			if raw.Load() != c.wantTries {
				t.Errorf("raw HEADs %d, want %d", raw.Load(), c.wantTries)
			}
			if want := map[bool]int64{false: 0, true: 1}[c.fellBack]; sdk.Load() != want {
				t.Errorf("SDK HEADs %d, want %d", sdk.Load(), want)
			}
		})
	}
}

// Transient faults on HEAD (SlowDown, 500, a lost reply) are retried by
// the raw path; the Stat comes back right and the requests are counted in
// the metrics as HeadObject.
func TestRawHeadFaults(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, direct, p := proxied(t, func(o *objclient.Options) { o.Registerer = reg; o.MaxAttempts = 4 })
	if !objclient.UsesRawHead(s) {
		t.Fatal("raw HEAD not set up")
	}
	objtest.PutRaw(t, direct, "m/", nil, "application/x-directory", nil)
	ctx := ctxT(t)
	for _, kind := range []objtest.FaultKind{objtest.FaultSlowDown, objtest.FaultInternalError, objtest.FaultDrop} {
		p.Clear()
		p.ResetCounts()
		p.Add(objtest.Fault{Kind: kind, Method: "HEAD", Times: 2})
		oi, err := s.Stat(ctx, "m/")
		if err != nil || oi.ContentType != "application/x-directory" || oi.Size != 0 {
			t.Fatalf("Stat with 2 %v replies = %+v, %v; want the marker", kind, oi, err)
		}
		if got := p.Requests("HEAD"); got != 3 {
			t.Errorf("%v: %d HEADs, want 3 (two faulted, one answered)", kind, got)
		}
	}
	p.Clear()
	p.Add(objtest.Fault{Kind: objtest.FaultSlowDown, Method: "HEAD"})
	if _, err := s.Stat(ctx, "m/"); !errors.Is(err, objclient.ErrThrottled) {
		t.Fatalf("Stat under constant SlowDown: %v, want ErrThrottled", err)
	}
	got := requestCounts(t, reg)
	for k, want := range map[[2]string]float64{
		{"HeadObject", "200"}: 3,
		{"HeadObject", "503"}: 2 + 4, // two retried, then four of four attempts
		{"HeadObject", "500"}: 2,
	} {
		if got[k] != want {
			t.Errorf("os2g_s3_requests_total{op=%q,status=%q} = %v, want %v (all: %v)", k[0], k[1], got[k], want, got)
		}
	}
	// A lost reply on a reused connection may be sent again by net/http
	// itself (HEAD is idempotent), unseen by the metrics.
	if n := got[[2]string{"HeadObject", "error"}]; n < 1 || n > 2 {
		t.Errorf("os2g_s3_requests_total{op=HeadObject,status=error} = %v, want 1 or 2 (two lost replies)", n)
	}
}

// A server whose clock is an hour ahead refuses a HEAD signed with ours
// with a bare 403 (no body to name RequestTimeTooSkewed); the raw HEAD
// takes the skew from the reply's Date header and signs again.
func TestRawHeadClockSkew(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		server := time.Now().Add(time.Hour).UTC()
		w.Header().Set("Date", server.Format(http.TimeFormat))
		signed, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		if r.Method != http.MethodHead || err != nil || server.Sub(signed).Abs() > 15*time.Minute {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Length", "0")
		w.Header().Set("Content-Type", "application/x-directory")
		w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	s := objtest.NewS3(t, objclient.Options{Bucket: "data", Region: "us-east-1", Endpoint: srv.URL, ForcePathStyle: true,
		AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", MaxAttempts: 3,
		RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond})
	oi, err := s.Stat(ctxT(t), "meta")
	if err != nil || oi.ContentType != "application/x-directory" || oi.Size != 0 {
		t.Fatalf("Stat = %+v, %v; want the marker", oi, err)
	}
	if got := requests.Load(); got != 2 {
		t.Errorf("%d requests, want 2 (one refused as skewed, one signed with the server's time)", got)
	}
	// A 403 from a server whose clock agrees is an answer, not a skew.
	requests.Store(0)
	if _, err := s.Stat(ctxT(t), "x"); err != nil {
		t.Fatalf("second Stat with the learned skew: %v", err)
	}
	if got := requests.Load(); got != 1 {
		t.Errorf("second Stat: %d requests, want 1", got)
	}
}
