package faults_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/fusefs"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
	"github.com/os2g/os2g/prefetch"
)

// hangGuard bounds every wait of these tests; the bounds under test are
// far below it.
const hangGuard = 2 * time.Minute

func requireFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		objtest.SkipOrFail(t, "faults: needs root to mount FUSE")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		objtest.SkipOrFail(t, "faults: /dev/fuse missing")
	}
}

// logBuf collects a mount's log lines (safe for concurrent use).
type logBuf struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// stack is versitygw, a FaultProxy in front of it, a store through the
// proxy (what the mount uses) and one straight to the server (setup and
// checks).
type stack struct {
	p      *objtest.FaultProxy
	store  *objclient.S3
	direct *objclient.S3
	logs   *logBuf
	log    *slog.Logger
}

func newStack(t *testing.T, mod func(*objclient.Options)) *stack {
	t.Helper()
	requireFUSE(t)
	return newStackOn(t, objtest.StartVersityServer(t), mod)
}

// newStackOn is newStack on a running server.
func newStackOn(t *testing.T, srv *objtest.Server, mod func(*objclient.Options)) *stack {
	t.Helper()
	s := &stack{p: objtest.StartFaultProxy(t, srv.URL), logs: &logBuf{}}
	s.log = slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := srv.Options()
	o.Endpoint = s.p.URL()
	o.Logger = s.log
	if mod != nil {
		mod(&o)
	}
	s.store = objtest.NewS3(t, o)
	d := srv.Options()
	d.Logger = slog.New(slog.DiscardHandler)
	s.direct = objtest.NewS3(t, d)
	return s
}

// mount mounts s.store with a prefetch manager of 64 MiB and unmounts it
// on t.Cleanup; it returns the mount point and an unmount function that
// may be called earlier (the later call is then a no-op).
func (s *stack) mount(t *testing.T, o fusefs.Options) (string, func()) {
	t.Helper()
	pm, err := prefetch.New(prefetch.Options{Getter: s.store, MaxMemory: 64 << 20, Logger: s.log})
	if err != nil {
		t.Fatal(err)
	}
	o.Store, o.Prefetch, o.Logger = s.store, pm, s.log
	mnt := t.TempDir()
	srv, err := fusefs.Mount(mnt, o)
	if err != nil {
		t.Fatalf("Mount: %v", err)
	}
	var once sync.Once
	unmount := func() {
		once.Do(func() {
			if err := srv.Unmount(); err != nil {
				t.Errorf("Unmount: %v", err)
			}
			pm.Close()
		})
	}
	t.Cleanup(unmount)
	return mnt, unmount
}

// content is the deterministic content of file i.
func content(i, size int) []byte {
	b := make([]byte, size)
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	for j := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[j] = byte(x)
	}
	return b
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// addReadFaults sets the integrity pass's mix: about 5% of requests
// faulted, every kind of fault the proxy has.
func addReadFaults(p *objtest.FaultProxy) {
	p.Add(objtest.Fault{Kind: objtest.FaultSlowDown, Fraction: 0.01})
	p.Add(objtest.Fault{Kind: objtest.FaultInternalError, Fraction: 0.01})
	p.Add(objtest.Fault{Kind: objtest.FaultCut, Fraction: 0.015, AfterBytes: 700})
	p.Add(objtest.Fault{Kind: objtest.FaultStall, Fraction: 0.005, AfterBytes: 700})
	p.Add(objtest.Fault{Kind: objtest.FaultDrop, Fraction: 0.005})
	p.Add(objtest.Fault{Kind: objtest.FaultHang, Fraction: 0.002})
}

var faultKinds = []objtest.FaultKind{objtest.FaultSlowDown, objtest.FaultInternalError, objtest.FaultCut, objtest.FaultStall, objtest.FaultDrop, objtest.FaultHang}

// TestIntegrityUnderFaults reads every file of a bucket, checksummed, on
// fresh mounts, in the default and the dataset mode, while about 5% of
// the requests (LIST, HEAD, GET) fail transiently: every read must return
// the right bytes and no error (issue 14). OS2G_SOAK_READS (reads per
// mode, default 1200) and OS2G_SOAK_FILES (default 600) make it the soak.
func TestIntegrityUnderFaults(t *testing.T) {
	reads := envInt(t, "OS2G_SOAK_READS", 1200)
	nfiles := envInt(t, "OS2G_SOAK_FILES", 600)
	s := newStack(t, func(o *objclient.Options) {
		o.StallTimeout = time.Second
		o.RequestTimeout = 30 * time.Second
	})
	const dirs = 10
	type file struct {
		path string
		size int
		sum  [32]byte
	}
	files := make([]file, nfiles)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range files {
		size := 1 + (i*7919)%(96<<10)
		if i%100 == 7 {
			size = 3<<20 + i // several ranged GETs
		}
		data := content(i, size)
		files[i] = file{path: fmt.Sprintf("d%02d/f%05d.bin", i%dirs, i), size: size, sum: sha256.Sum256(data)}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			objtest.PutRaw(t, s.direct, files[i].path, data, "", nil)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	type tally struct {
		reads, wrong, listings int
		errs                   map[string]int
		slowest                time.Duration
		slowestWhat            string
	}
	modes := []struct {
		name string
		o    fusefs.Options
	}{
		{"default", fusefs.Options{}},
		{"dataset", fusefs.Options{ReadOnly: true, Immutable: true}},
	}
	for _, m := range modes {
		s.p.Clear()
		s.p.ResetCounts()
		addReadFaults(s.p)
		tl := tally{errs: map[string]int{}}
		var mu sync.Mutex // guards tl
		record := func(what string, d time.Duration, err error, wrong bool) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				var errno syscall.Errno
				k := "other"
				if errors.As(err, &errno) {
					k = errno.Error()
				}
				tl.errs[k]++
				if tl.errs[k] <= 3 {
					t.Errorf("%s: %s: %v", m.name, what, err)
				}
			}
			if wrong {
				tl.wrong++
				t.Errorf("%s: %s: wrong bytes", m.name, what)
			}
			if d > tl.slowest {
				tl.slowest, tl.slowestWhat = d, what
			}
		}
		guard := 10 * hangGuard
		if os.Getenv("OS2G_SOAK_READS") != "" {
			guard = 4 * time.Hour
		}
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		for pass := 0; tl.reads < reads && ctx.Err() == nil; pass++ {
			mnt, unmount := s.mount(t, m.o)
			order := rand.New(rand.NewPCG(uint64(pass), 7)).Perm(len(files))
			if n := reads - tl.reads; n < len(order) {
				order = order[:n]
			}
			work := make(chan int)
			var rg sync.WaitGroup
			for range 8 {
				rg.Add(1)
				go func() {
					defer rg.Done()
					for i := range work {
						f := files[i]
						start := time.Now()
						if i%50 == 0 {
							// A listing now and then (LIST faults).
							dir := filepath.Dir(f.path)
							ents, err := os.ReadDir(filepath.Join(mnt, dir))
							if err == nil && len(ents) != (len(files)+dirs-1-i%dirs)/dirs {
								err = fmt.Errorf("%d entries", len(ents))
							}
							record("readdir "+dir, time.Since(start), err, false)
							mu.Lock()
							tl.listings++
							mu.Unlock()
							start = time.Now()
						}
						b, err := os.ReadFile(filepath.Join(mnt, f.path))
						wrong := err == nil && (len(b) != f.size || sha256.Sum256(b) != f.sum)
						record("read "+f.path, time.Since(start), err, wrong)
						mu.Lock()
						tl.reads++
						mu.Unlock()
					}
				}()
			}
			for _, i := range order {
				if ctx.Err() != nil {
					break
				}
				work <- i
			}
			close(work)
			rg.Wait()
			unmount()
		}
		cancel()
		var inj []string
		for _, k := range faultKinds {
			inj = append(inj, fmt.Sprintf("%v=%d", k, s.p.Injected(k)))
		}
		var errs []string
		for k, n := range tl.errs {
			errs = append(errs, fmt.Sprintf("%s=%d", k, n))
		}
		slices.Sort(errs)
		summary := fmt.Sprintf("faults %s: reads=%d listings=%d wrong=%d requests=%d injected: %s (total %d); errors: [%s]; slowest: %v (%s)",
			m.name, tl.reads, tl.listings, tl.wrong, s.p.Requests(""), strings.Join(inj, " "), s.p.Injected(0), strings.Join(errs, " "), tl.slowest.Round(time.Millisecond), tl.slowestWhat)
		t.Log(summary)
		if os.Getenv("OS2G_SOAK_READS") != "" {
			fmt.Println(summary)
		}
		if s.p.Injected(0) == 0 {
			t.Errorf("%s: no fault injected", m.name)
		}
		if tl.reads < reads {
			t.Errorf("%s: only %d of %d reads done before the hang guard", m.name, tl.reads, reads)
		}
	}
}

// storeHolds reports whether key holds exactly data on the server.
func storeHolds(t *testing.T, s *objclient.S3, key string, data []byte) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	info, err := s.Stat(ctx, key)
	if errors.Is(err, objclient.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("stat %s: %v", key, err)
	}
	if info.Size != int64(len(data)) {
		return false
	}
	buf := make([]byte, info.Size)
	if _, err := s.GetRange(ctx, key, 0, buf, ""); err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return bytes.Equal(buf, data)
}

// writeThrough writes data to path in one go and closes it; it returns
// the first error of open, write and close.
func writeThrough(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return writeClose(f, data)
}

// writeClose writes data to f in 1 MiB writes and closes it; it returns
// the first error of the writes and close.
func writeClose(f *os.File, data []byte) error {
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1<<20)
		if _, err := f.Write(rest[:n]); err != nil {
			f.Close()
			return err
		}
		rest = rest[n:]
	}
	return f.Close()
}

// TestWriteFaultMatrix writes files through the mount, over an existing
// version, with one fault on CreateMultipartUpload, UploadPart,
// CompleteMultipartUpload or PutObject, once and for good: close() must
// return 0 exactly when the server then holds the new bytes, and a
// single transient fault must be absorbed (issue 14).
func TestWriteFaultMatrix(t *testing.T) {
	s := newStack(t, func(o *objclient.Options) {
		o.MaxAttempts = 3
		o.StallTimeout = 3 * time.Second
		o.RequestTimeout = 30 * time.Second
	})
	mnt, _ := s.mount(t, fusefs.Options{PartSize: 5 << 20, WriteWindow: 2 << 20})
	cells := []struct {
		kind  objtest.FaultKind
		times int
	}{
		{objtest.FaultCut, 1},
		{objtest.FaultDrop, 1},
		{objtest.FaultDrop, 0},
		{objtest.FaultInternalError, 0},
	}
	ops := []struct {
		op   string
		size int
	}{
		{"CreateMultipartUpload", 8 << 20},
		{"UploadPart", 8 << 20},
		{"CompleteMultipartUpload", 8 << 20},
		{"PutObject", 1000},
	}
	old := []byte("the previous version")
	for _, op := range ops {
		for _, c := range cells {
			key := fmt.Sprintf("w/%s-%v-%d.bin", op.op, c.kind, c.times)
			objtest.PutRaw(t, s.direct, key, old, "", nil)
			data := content(len(key)+c.times, op.size)
			s.p.Clear()
			s.p.ResetCounts()
			s.p.Add(objtest.Fault{Kind: c.kind, Op: op.op, AfterBytes: 40, Times: c.times})
			err := writeThrough(filepath.Join(mnt, key), data)
			s.p.Clear()
			committed := storeHolds(t, s.direct, key, data)
			if !committed && !storeHolds(t, s.direct, key, old) {
				t.Errorf("%s: the server holds neither version", key)
			}
			if committed != (err == nil) {
				t.Errorf("%s: close() answered %v, but the new version committed = %v", key, err, committed)
			}
			if c.times == 1 && err != nil {
				t.Errorf("%s: a single transient fault was not absorbed: %v", key, err)
			}
			if s.p.Injected(0) == 0 {
				t.Errorf("%s: no fault injected", key)
			}
		}
	}
}

// TestServerGoneBounded: against a frozen server (accepts connections,
// never answers, like SIGSTOP) and a killed one (connection refused),
// reads, lookups, listings and writes through the mount fail with EIO
// after about one op timeout, and the log says why (issue 14). Each
// system call runs on a mount of its own: after the first, a store fails
// its calls at once until the server answers again.
func TestServerGoneBounded(t *testing.T) {
	requireFUSE(t)
	srv := objtest.StartVersityServer(t)
	direct := objtest.NewS3(t, srv.Options())
	objtest.PutRaw(t, direct, "a/known.bin", content(1, 100<<10), "", nil)
	for i := range 20 {
		objtest.PutRaw(t, direct, fmt.Sprintf("b/f%02d", i), []byte("x"), "", nil)
	}
	calls := []struct {
		name string
		// open runs before the server goes (a writer's open); call after.
		open func(mnt string) (*os.File, error)
		call func(mnt string, f *os.File) error
	}{
		{"read", nil, func(mnt string, _ *os.File) error {
			_, err := os.ReadFile(filepath.Join(mnt, "a/known.bin"))
			return err
		}},
		{"lookup", nil, func(mnt string, _ *os.File) error {
			_, err := os.Stat(filepath.Join(mnt, "a/unknown.bin"))
			return err
		}},
		{"readdir", nil, func(mnt string, _ *os.File) error {
			_, err := os.ReadDir(filepath.Join(mnt, "b"))
			return err
		}},
		{"write+close", func(mnt string) (*os.File, error) { return os.Create(filepath.Join(mnt, "a/new.bin")) },
			func(_ string, f *os.File) error { return writeClose(f, content(2, 1000)) }},
		{"write+close multipart", func(mnt string) (*os.File, error) { return os.Create(filepath.Join(mnt, "a/big.bin")) },
			func(_ string, f *os.File) error { return writeClose(f, content(3, 8<<20)) }},
	}
	for _, killed := range []bool{false, true} {
		for _, c := range calls {
			s := newStackOn(t, srv, func(o *objclient.Options) {
				o.StallTimeout = time.Second
				o.RequestTimeout = 3 * time.Second
				o.MaxAttempts = 1000 // only the op timeout can end the retries
			})
			mnt, _ := s.mount(t, fusefs.Options{PartSize: 5 << 20, WriteWindow: 2 << 20})
			if _, err := os.Stat(filepath.Join(mnt, "a/known.bin")); err != nil {
				t.Fatal(err)
			}
			var f *os.File
			if c.open != nil {
				var err error
				if f, err = c.open(mnt); err != nil {
					t.Fatal(err)
				}
			}
			if killed {
				s.p.Close()
			} else {
				s.p.Add(objtest.Fault{Kind: objtest.FaultHang})
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- c.call(mnt, f) }()
			select {
			case err := <-done:
				t.Logf("killed=%v: %s: %v after %v (op timeout 3s)", killed, c.name, err, time.Since(start).Round(time.Millisecond))
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("killed=%v: %s: %v, want EIO", killed, c.name, err)
				}
			case <-time.After(hangGuard):
				t.Fatalf("killed=%v: %s still waiting after %v (op timeout 3s)", killed, c.name, hangGuard)
			}
			if logs := s.logs.String(); !strings.Contains(logs, "op timeout") {
				t.Errorf("killed=%v: %s: the log does not say why:\n%s", killed, c.name, logs)
			}
		}
	}
}

// TestFailedPartCloseAtOnce: once a part has failed and write() has
// returned EIO, close() answers at once, although another part is still
// in flight on a server that does not answer it (issue 14: it took 42-60 s).
func TestFailedPartCloseAtOnce(t *testing.T) {
	s := newStack(t, func(o *objclient.Options) {
		o.MaxAttempts = 2
		o.StallTimeout = time.Hour
		o.RequestTimeout = time.Hour
	})
	mnt, _ := s.mount(t, fusefs.Options{PartSize: 5 << 20, WriteWindow: 2 << 20})
	s.p.Add(objtest.Fault{Kind: objtest.FaultHang, Op: "UploadPart", Times: 1})
	s.p.Add(objtest.Fault{Kind: objtest.FaultInternalError, Op: "UploadPart"})
	done := make(chan error, 1)
	go func() {
		f, err := os.Create(filepath.Join(mnt, "ckpt.pt"))
		if err != nil {
			done <- err
			return
		}
		var werr error
		chunk := content(4, 1<<20)
		for i := 0; i < 200 && werr == nil; i++ {
			_, werr = f.Write(chunk)
		}
		cerr := f.Close()
		if werr == nil {
			werr = errors.New("200 MiB written without an error")
		} else if !errors.Is(werr, syscall.EIO) {
			werr = fmt.Errorf("write: %w, want EIO", werr)
		} else {
			werr = nil
		}
		done <- errors.Join(werr, func() error {
			if !errors.Is(cerr, syscall.EIO) {
				return fmt.Errorf("close after a failed part: %v, want EIO", cerr)
			}
			return nil
		}())
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatal("close after a failed part waits for the hung part")
	}
	if storeHolds(t, s.direct, "ckpt.pt", nil) {
		t.Error("a failed upload left an object")
	}
}

// TestNotS3Refused: a web server that answers 200 with HTML to everything
// fails the mount's bucket check, and a write through a mount on it fails
// at close() with EIO: nothing is silently lost (issue 14).
func TestNotS3Refused(t *testing.T) {
	requireFUSE(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body>It works!</body></html>\n")
	}))
	t.Cleanup(web.Close)
	o := (&objtest.Server{URL: web.URL, Bucket: "data", AccessKeyID: "k", SecretAccessKey: "s"}).Options()
	logs := &logBuf{}
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o.MaxAttempts = 2
	st := objtest.NewS3(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := st.CheckBucket(ctx); !errors.Is(err, objclient.ErrNotS3) || !strings.Contains(err.Error(), web.URL) {
		t.Errorf("bucket check of a web server: %v, want ErrNotS3 naming %s", err, web.URL)
	}
	s := &stack{store: st, logs: logs, log: o.Logger}
	mnt, _ := s.mount(t, fusefs.Options{})
	err := writeThrough(filepath.Join(mnt, "f"), []byte("hi\n"))
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("echo hi > f on a web server: %v, want EIO", err)
	}
	if !strings.Contains(logs.String(), "not S3") {
		t.Errorf("the log does not say the endpoint is not S3:\n%s", logs.String())
	}
}
