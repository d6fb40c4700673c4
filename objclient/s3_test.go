package objclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

func TestConformanceMem(t *testing.T) {
	objtest.RunConformance(t, func(t *testing.T) objclient.Store { return objtest.NewMem() })
}

// s3Bugs are subtests of the suite skipped for known bugs in objclient's
// S3 code (none at present; add an entry with the reason to skip one).
var s3Bugs = map[string]string{}

func TestConformanceFakeS3(t *testing.T) {
	objtest.Conformance{Skip: s3Bugs}.Run(t, func(t *testing.T) objclient.Store { return objtest.StartFakeS3(t) })
}

// TestConformanceFakeS3SDKGet runs the suite with GetRange through the
// SDK's GetObject (the path taken where the raw one cannot be set up).
func TestConformanceFakeS3SDKGet(t *testing.T) {
	objtest.Conformance{Skip: s3Bugs}.Run(t, func(t *testing.T) objclient.Store {
		o := objtest.StartFakeS3Server(t).Options()
		objclient.WithSDKGet(&o)
		s := objtest.NewS3(t, o)
		if objclient.UsesRawGet(s) {
			t.Fatal("WithSDKGet store still uses the raw GET path")
		}
		return s
	})
}

// The suites above run the raw GET path: it must be the one set up.
func TestRawGetInUse(t *testing.T) {
	if !objclient.UsesRawGet(objtest.StartFakeS3(t)) {
		t.Error("gofakes3 store: ranged GETs do not take the raw path")
	}
	if !objclient.UsesRawGet(objtest.StartVersity(t)) {
		t.Error("versitygw store: ranged GETs do not take the raw path")
	}
	o := objtest.StartFakeS3Server(t).Options()
	o.ForcePathStyle = false
	if !objclient.UsesRawGet(objtest.NewS3(t, o)) {
		t.Error("virtual-host style store: ranged GETs do not take the raw path")
	}
}

func TestConformanceVersity(t *testing.T) {
	objtest.Conformance{NoVerbatimKeys: true, Skip: s3Bugs}.Run(t, func(t *testing.T) objclient.Store { return objtest.StartVersity(t) })
}

// TestConformanceDecorators runs the suite through Counting and a Faulty
// that injects nothing but delays a little: decorators must be transparent.
func TestConformanceDecorators(t *testing.T) {
	objtest.RunConformance(t, func(t *testing.T) objclient.Store {
		return objtest.NewCounting(objtest.NewFaulty(objtest.NewMem(), objtest.FaultOptions{Latency: time.Microsecond}))
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// proxied starts gofakes3 with a FaultProxy in front and returns a store
// that talks through the proxy (with opts applied) and one that talks to
// the server directly (for setup).
func proxied(t *testing.T, mod func(*objclient.Options)) (viaProxy, direct *objclient.S3, p *objtest.FaultProxy) {
	t.Helper()
	srv := objtest.StartFakeS3Server(t)
	p = objtest.StartFaultProxy(t, srv.URL)
	o := srv.Options()
	o.Endpoint = p.URL()
	if mod != nil {
		mod(&o)
	}
	return objtest.NewS3(t, o), objtest.NewS3(t, srv.Options()), p
}

func putBytes(t *testing.T, s objclient.Store, key string, data []byte) objclient.ObjectInfo {
	t.Helper()
	ctx := ctxT(t)
	w, err := s.Put(ctx, key, objclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	info, err := w.Commit(ctx)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return info
}

func pattern(n int) []byte {
	b := make([]byte, n)
	x := uint32(12345)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// TestSlowDownRetried: 503 SlowDown on the first 3 requests of each call is
// retried away; a throttled HEAD is never "not found" (CASES C17).
func TestSlowDownRetried(t *testing.T) {
	s, direct, p := proxied(t, nil)
	data := pattern(1000)
	putBytes(t, direct, "train/s_0001.jpg", data)
	ctx := ctxT(t)

	calls := []struct {
		name   string
		method string
		run    func() error
	}{
		{"Stat", "HEAD", func() error {
			info, err := s.Stat(ctx, "train/s_0001.jpg")
			if err == nil && info.Size != 1000 {
				t.Errorf("Stat size %d", info.Size)
			}
			return err
		}},
		{"List", "GET", func() error {
			page, err := s.List(ctx, objclient.ListRequest{Prefix: "train/"})
			if err == nil && (len(page.Objects) != 1 || page.Objects[0].Key != "train/s_0001.jpg") {
				t.Errorf("List = %+v", page)
			}
			return err
		}},
		{"GetRange", "GET", func() error {
			buf := make([]byte, 600)
			n, err := s.GetRange(ctx, "train/s_0001.jpg", 500, buf, "")
			if err == nil && (n != 500 || !bytes.Equal(buf[:n], data[500:])) {
				t.Errorf("GetRange = %d bytes, want the last 500", n)
			}
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			p.Clear()
			p.ResetCounts()
			p.Add(objtest.Fault{Kind: objtest.FaultSlowDown, Times: 3})
			retries0 := s.Retries()
			err := c.run()
			if errors.Is(err, objclient.ErrNotFound) {
				t.Fatalf("throttled %s reported as not found: %v", c.name, err)
			}
			if err != nil {
				t.Fatalf("%s after 3 SlowDowns: %v", c.name, err)
			}
			if got := p.Injected(objtest.FaultSlowDown); got != 3 {
				t.Errorf("SlowDowns injected = %d, want 3", got)
			}
			if got := p.Requests(c.method); got != 4 {
				t.Errorf("%s requests = %d, want 4 (3 throttled + 1)", c.method, got)
			}
			if got := s.Retries() - retries0; got != 3 {
				t.Errorf("Retries() grew by %d, want 3", got)
			}
		})
	}
}

// TestSlowDownForever: when every attempt is throttled the error wraps
// ErrThrottled after exactly MaxAttempts requests; 500s wrap ErrUnavailable.
func TestSlowDownForever(t *testing.T) {
	const attempts = 3
	s, direct, p := proxied(t, func(o *objclient.Options) { o.MaxAttempts = attempts })
	putBytes(t, direct, "k", []byte("data"))
	ctx := ctxT(t)
	ops := []struct {
		name   string
		method string
		run    func() error
	}{
		{"Stat", "HEAD", func() error { _, err := s.Stat(ctx, "k"); return err }},
		{"List", "GET", func() error { _, err := s.List(ctx, objclient.ListRequest{}); return err }},
		{"GetRange", "GET", func() error { _, err := s.GetRange(ctx, "k", 0, make([]byte, 4), ""); return err }},
	}
	for _, f := range []struct {
		kind objtest.FaultKind
		want error
	}{{objtest.FaultSlowDown, objclient.ErrThrottled}, {objtest.FaultInternalError, objclient.ErrUnavailable}} {
		for _, op := range ops {
			t.Run(f.kind.String()+"/"+op.name, func(t *testing.T) {
				p.Clear()
				p.ResetCounts()
				p.Add(objtest.Fault{Kind: f.kind})
				err := op.run()
				if !errors.Is(err, f.want) {
					t.Fatalf("%s under endless %v: %v, want an error wrapping %v", op.name, f.kind, err, f.want)
				}
				if errors.Is(err, objclient.ErrNotFound) {
					t.Errorf("error also wraps ErrNotFound: %v", err)
				}
				if got := p.Requests(""); got != attempts {
					t.Errorf("requests = %d, want MaxAttempts = %d", got, attempts)
				}
			})
		}
	}
}

// TestStalledBodyResumes: a GET body that stops after 1 MiB (connection
// kept open) is cancelled after StallTimeout and resumed, and GetRange
// returns every byte (CASES C18).
func TestStalledBodyResumes(t *testing.T) {
	s, direct, p := proxied(t, func(o *objclient.Options) { o.StallTimeout = 300 * time.Millisecond })
	data := pattern(3<<20 + 17)
	putBytes(t, direct, "shards/s-0000.tar", data)
	p.Add(objtest.Fault{Kind: objtest.FaultStall, Method: "GET", Times: 1, AfterBytes: 1 << 20})
	buf := make([]byte, len(data))
	n, err := s.GetRange(ctxT(t), "shards/s-0000.tar", 0, buf, "")
	if err != nil || n != len(data) {
		t.Fatalf("GetRange through a stalled body = %d, %v; want %d, nil", n, err, len(data))
	}
	if !bytes.Equal(buf, data) {
		t.Fatal("bytes differ after resuming a stalled body")
	}
	if p.Injected(objtest.FaultStall) != 1 || p.Requests("GET") < 2 {
		t.Errorf("stalls %d, GETs %d; want 1 stall and a second GET", p.Injected(objtest.FaultStall), p.Requests("GET"))
	}
}

// TestCutBodyResumes: a connection closed mid-body is resumed from the last
// byte received.
func TestCutBodyResumes(t *testing.T) {
	s, direct, p := proxied(t, nil)
	data := pattern(2<<20 + 5)
	putBytes(t, direct, "cut.bin", data)
	p.Add(objtest.Fault{Kind: objtest.FaultCut, Method: "GET", Times: 2, AfterBytes: 700_001})
	buf := make([]byte, len(data)-100)
	n, err := s.GetRange(ctxT(t), "cut.bin", 100, buf, "")
	if err != nil || n != len(buf) {
		t.Fatalf("GetRange through cut connections = %d, %v; want %d, nil", n, err, len(buf))
	}
	if !bytes.Equal(buf, data[100:]) {
		t.Fatal("bytes differ after resuming cut bodies")
	}
	if p.Injected(objtest.FaultCut) != 2 || p.Requests("GET") != 3 {
		t.Errorf("cuts %d, GETs %d; want 2 cuts and 3 GETs", p.Injected(objtest.FaultCut), p.Requests("GET"))
	}
}

// TestCheckBucketErrors: the errors a mount reports at start-up.
func TestCheckBucketErrors(t *testing.T) {
	t.Run("MissingBucket", func(t *testing.T) {
		srv := objtest.StartFakeS3Server(t)
		o := srv.Options()
		o.Bucket = "no-such-bucket"
		err := objtest.NewS3(t, o).CheckBucket(ctxT(t))
		if !errors.Is(err, objclient.ErrNoSuchBucket) {
			t.Fatalf("CheckBucket of a missing bucket: %v, want ErrNoSuchBucket", err)
		}
	})
	t.Run("OK", func(t *testing.T) {
		if err := objtest.StartFakeS3(t).CheckBucket(ctxT(t)); err != nil {
			t.Fatalf("CheckBucket: %v", err)
		}
	})
	t.Run("NothingListening", func(t *testing.T) {
		o := (&objtest.Server{URL: "http://" + objtest.FreePort(t), Bucket: "b", AccessKeyID: "k", SecretAccessKey: "s"}).Options()
		o.MaxAttempts = 2
		err := objtest.NewS3(t, o).CheckBucket(ctxT(t))
		if !errors.Is(err, objclient.ErrUnavailable) {
			t.Fatalf("CheckBucket with nothing listening: %v, want ErrUnavailable", err)
		}
	})
	t.Run("VersityWrongSecret", func(t *testing.T) {
		srv := objtest.StartVersityServer(t)
		o := srv.Options()
		o.SecretAccessKey = "wrong-" + o.SecretAccessKey
		o.MaxAttempts = 2
		err := objtest.NewS3(t, o).CheckBucket(ctxT(t))
		if !errors.Is(err, objclient.ErrInvalidCredentials) && !errors.Is(err, objclient.ErrAccessDenied) {
			t.Fatalf("CheckBucket with a wrong secret: %v, want ErrInvalidCredentials or ErrAccessDenied", err)
		}
	})
	t.Run("VersityUnknownKey", func(t *testing.T) {
		srv := objtest.StartVersityServer(t)
		o := srv.Options()
		o.AccessKeyID = "nobody"
		o.MaxAttempts = 2
		err := objtest.NewS3(t, o).CheckBucket(ctxT(t))
		if !errors.Is(err, objclient.ErrInvalidCredentials) && !errors.Is(err, objclient.ErrAccessDenied) {
			t.Fatalf("CheckBucket with an unknown key: %v, want ErrInvalidCredentials or ErrAccessDenied", err)
		}
	})
	t.Run("VersityMissingBucket", func(t *testing.T) {
		srv := objtest.StartVersityServer(t)
		o := srv.Options()
		o.Bucket = "os2g-no-such-bucket"
		err := objtest.NewS3(t, o).CheckBucket(ctxT(t))
		if !errors.Is(err, objclient.ErrNoSuchBucket) {
			t.Fatalf("CheckBucket of a missing bucket: %v, want ErrNoSuchBucket", err)
		}
	})
}

// TestVersityFaults repeats the stall and SlowDown cases against versitygw.
func TestVersityFaults(t *testing.T) {
	srv := objtest.StartVersityServer(t)
	direct := objtest.NewS3(t, srv.Options())
	p := objtest.StartFaultProxy(t, srv.URL)
	o := srv.Options()
	o.Endpoint = p.URL()
	o.StallTimeout = 300 * time.Millisecond
	s := objtest.NewS3(t, o)
	data := pattern(2<<20 + 1)
	putBytes(t, direct, "f/a b+c.bin", data)
	p.Add(objtest.Fault{Kind: objtest.FaultSlowDown, Times: 2})
	p.Add(objtest.Fault{Kind: objtest.FaultStall, Method: "GET", Times: 1, AfterBytes: 1 << 20})
	info, err := s.Stat(ctxT(t), "f/a b+c.bin")
	if err != nil || info.Size != int64(len(data)) {
		t.Fatalf("Stat through SlowDowns = %+v, %v", info, err)
	}
	buf := make([]byte, len(data))
	n, err := s.GetRange(ctxT(t), "f/a b+c.bin", 0, buf, info.ETag)
	if err != nil || n != len(data) || !bytes.Equal(buf, data) {
		t.Fatalf("GetRange through a stall = %d, %v (equal %v)", n, err, bytes.Equal(buf[:n], data[:n]))
	}
}

// TestListUnderThrottling: 30% of requests answered 503 while paging
// through 1,100 keys: every key exactly once, in order (CASES C17).
func TestListUnderThrottling(t *testing.T) {
	s, direct, p := proxied(t, nil)
	var want []string
	for i := range 1100 {
		want = append(want, fmt.Sprintf("train/s %04d.jpg", i))
	}
	ctx := ctxT(t)
	var wg sync.WaitGroup
	next := make(chan string)
	for range 8 {
		wg.Go(func() {
			for k := range next {
				objtest.PutRaw(t, direct, k, []byte("x"), "", nil)
			}
		})
	}
	for _, k := range want {
		next <- k
	}
	close(next)
	wg.Wait()
	p.Add(objtest.Fault{Kind: objtest.FaultSlowDown, Fraction: 0.3})
	var got []string
	req := objclient.ListRequest{Prefix: "train/", MaxKeys: 100}
	for {
		page, err := s.List(ctx, req)
		if err != nil {
			t.Fatalf("List under 30%% SlowDown: %v", err)
		}
		for _, o := range page.Objects {
			got = append(got, o.Key)
		}
		if !page.IsTruncated {
			break
		}
		req.ContinuationToken = page.NextContinuationToken
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %d keys, want %d in order", len(got), len(want))
	}
	if p.Injected(objtest.FaultSlowDown) == 0 {
		t.Error("no SlowDown was injected")
	}
	// Stats of existing keys under throttling: never ErrNotFound.
	for _, k := range want[:50] {
		if _, err := s.Stat(ctx, k); err != nil {
			t.Fatalf("Stat(%q) under SlowDown: %v", k, err)
		}
	}
}

// TestPutRetriesParts: throttled part uploads are retried; the object is
// complete and identical.
func TestPutRetriesParts(t *testing.T) {
	s, direct, p := proxied(t, nil)
	data := pattern(11<<20 + 3)
	p.Add(objtest.Fault{Kind: objtest.FaultSlowDown, Method: "PUT", Times: 3})
	ctx := ctxT(t)
	w, err := s.Put(ctx, "ckpt/model.pt", objclient.PutOptions{PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1<<20+7)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatalf("Write: %v", err)
		}
		rest = rest[n:]
	}
	info, err := w.Commit(ctx)
	if err != nil {
		t.Fatalf("Commit with throttled parts: %v", err)
	}
	if p.Injected(objtest.FaultSlowDown) != 3 {
		t.Errorf("SlowDowns injected = %d, want 3", p.Injected(objtest.FaultSlowDown))
	}
	buf := make([]byte, len(data)+10)
	n, err := direct.GetRange(ctx, "ckpt/model.pt", 0, buf, info.ETag)
	if err != nil || n != len(data) || !bytes.Equal(buf[:n], data) {
		t.Fatalf("read back = %d, %v", n, err)
	}
}

// TestPutThrottledForever: a Commit that cannot get through fails with
// ErrThrottled, leaves no object and no multipart upload behind (CASES C21).
func TestPutThrottledForever(t *testing.T) {
	s, direct, p := proxied(t, func(o *objclient.Options) { o.MaxAttempts = 2 })
	ctx := ctxT(t)
	for _, size := range []int{100, 6 << 20} {
		p.Clear()
		w, err := s.Put(ctx, "ckpt/fail.pt", objclient.PutOptions{PartSize: 5 << 20})
		if err != nil {
			t.Fatal(err)
		}
		p.Add(objtest.Fault{Kind: objtest.FaultSlowDown, Method: "PUT"})
		_, werr := w.Write(pattern(size))
		var cerr error
		if werr == nil {
			_, cerr = w.Commit(ctx)
		} else {
			_ = w.Abort(ctx)
		}
		if err := errors.Join(werr, cerr); !errors.Is(err, objclient.ErrThrottled) {
			t.Errorf("%d-byte Put under endless SlowDown: %v, want ErrThrottled", size, err)
		}
		if _, err := direct.Stat(ctx, "ckpt/fail.pt"); !errors.Is(err, objclient.ErrNotFound) {
			t.Errorf("%d-byte failed Put left an object (Stat: %v)", size, err)
		}
		if ups, err := direct.ListUploads(ctx, "ckpt/"); err != nil || len(ups) != 0 {
			t.Errorf("%d-byte failed Put left uploads %v (%v)", size, ups, err)
		}
	}
}

// TestCancelDuringStall: cancelling the caller's context while a body is
// stalled returns context.Canceled at once, well before StallTimeout
// (CASES C18: SIGINT to a reader -> EINTR).
func TestCancelDuringStall(t *testing.T) {
	s, direct, p := proxied(t, func(o *objclient.Options) { o.StallTimeout = time.Hour })
	data := pattern(2 << 20)
	putBytes(t, direct, "s.bin", data)
	stalled := make(chan struct{}, 1)
	p.Add(objtest.Fault{Kind: objtest.FaultStall, Method: "GET", AfterBytes: 1 << 20, Notify: stalled})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
	defer cancel()
	go func() {
		<-stalled
		cancel()
	}()
	buf := make([]byte, len(data))
	_, err := s.GetRange(ctx, "s.bin", 0, buf, "")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("GetRange cancelled during a stall: %v, want context.Canceled", err)
	}
}

// TestHungRequestRetried: a request that never gets a response (no
// headers) is abandoned after StallTimeout and retried (CASES C18).
func TestHungRequestRetried(t *testing.T) {
	s, direct, p := proxied(t, func(o *objclient.Options) { o.StallTimeout = 300 * time.Millisecond })
	data := pattern(5000)
	putBytes(t, direct, "small.txt", data)
	ctx := ctxT(t)
	for _, method := range []string{"GET", "HEAD"} {
		p.Clear()
		p.ResetCounts()
		p.Add(objtest.Fault{Kind: objtest.FaultHang, Method: method, Times: 1})
		switch method {
		case "GET": // LIST, then GetRange
			page, err := s.List(ctx, objclient.ListRequest{})
			if err != nil || len(page.Objects) != 1 {
				t.Fatalf("List after one hung request = %+v, %v", page, err)
			}
			p.Add(objtest.Fault{Kind: objtest.FaultHang, Method: method, Times: 1})
			buf := make([]byte, len(data))
			n, err := s.GetRange(ctx, "small.txt", 0, buf, "")
			if err != nil || n != len(data) || !bytes.Equal(buf, data) {
				t.Fatalf("GetRange after one hung request = %d, %v", n, err)
			}
			if got := p.Injected(objtest.FaultHang); got != 2 {
				t.Errorf("hangs injected = %d, want 2", got)
			}
		case "HEAD":
			info, err := s.Stat(ctx, "small.txt")
			if err != nil || info.Size != int64(len(data)) {
				t.Fatalf("Stat after one hung request = %+v, %v", info, err)
			}
		}
	}
}

// TestSilentServerBounded: a server that never answers (every request
// hangs) fails each operation with ErrUnavailable once RequestTimeout has
// passed, across the SDK's retries, instead of retrying for minutes: the
// application gets EIO in bounded time (QA: a SIGSTOPped server).
func TestSilentServerBounded(t *testing.T) {
	s, direct, p := proxied(t, func(o *objclient.Options) {
		o.StallTimeout = 200 * time.Millisecond
		o.RequestTimeout = time.Second
		o.MaxAttempts = 1000 // only the deadline can end the retries
	})
	putBytes(t, direct, "small.txt", pattern(100))
	p.Add(objtest.Fault{Kind: objtest.FaultHang, Method: "GET"})
	p.Add(objtest.Fault{Kind: objtest.FaultHang, Method: "HEAD"})
	ctx := ctxT(t) // hang guard
	if _, err := s.List(ctx, objclient.ListRequest{}); !errors.Is(err, objclient.ErrUnavailable) {
		t.Errorf("List against a silent server: %v, want ErrUnavailable", err)
	}
	if _, err := s.Stat(ctx, "small.txt"); !errors.Is(err, objclient.ErrUnavailable) {
		t.Errorf("Stat against a silent server: %v, want ErrUnavailable", err)
	}
	buf := make([]byte, 100)
	if _, err := s.GetRange(ctx, "small.txt", 0, buf, ""); !errors.Is(err, objclient.ErrUnavailable) {
		t.Errorf("GetRange against a silent server: %v, want ErrUnavailable", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the hang guard fired: an operation did not end at RequestTimeout")
	}
}
