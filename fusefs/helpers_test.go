package fusefs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// requireFUSE skips the test when FUSE mounts are impossible (not root, no
// /dev/fuse), unless OS2G_REQUIRE_ALL=1 makes that a failure.
func requireFUSE(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "no /dev/fuse"
	}
	if why == "" {
		return
	}
	if os.Getenv("OS2G_REQUIRE_ALL") == "1" {
		t.Fatalf("FUSE test cannot run: %s (OS2G_REQUIRE_ALL=1)", why)
	}
	t.Skipf("FUSE test skipped: %s", why)
}

// tlog is a slog handler target writing to t.Log until the test ends.
type tlog struct {
	mu   sync.Mutex // guards t and done
	t    testing.TB
	done bool
}

func (w *tlog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

// testMount mounts st with o in a fresh t.TempDir() and unmounts it at
// cleanup; it returns the mount point.
func testMount(t testing.TB, st objclient.Store, o Options) string {
	mnt, _ := testMountServer(t, st, o)
	return mnt
}

func testMountServer(t testing.TB, st objclient.Store, o Options) (string, *Server) {
	t.Helper()
	requireFUSE(t)
	mnt := t.TempDir()
	o.Store = st
	w := &tlog{t: t}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := Mount(mnt, o)
	if err != nil {
		t.Fatalf("Mount: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return mnt, srv
}

type obj struct {
	key  string
	data []byte
	ct   string
	meta map[string]string
}

// seed stores objs in st (a *objtest.Mem or an S3 store).
func seed(t testing.TB, st objclient.Store, objs ...obj) {
	t.Helper()
	for _, o := range objs {
		switch s := st.(type) {
		case *objtest.Mem:
			s.PutObject(o.key, o.data, o.ct, o.meta)
		case *objclient.S3:
			objtest.PutRaw(t, s, o.key, o.data, o.ct, o.meta)
		default:
			t.Fatalf("seed: unsupported store %T", st)
		}
	}
}

// storeKinds are the stores read tests run against: the in-memory store,
// and the in-process S3 server (real SDK encoding of keys and listings).
var storeKinds = []string{"mem", "fakes3"}

func newStore(t testing.TB, kind string) objclient.Store {
	t.Helper()
	switch kind {
	case "mem":
		return objtest.NewMem()
	case "fakes3":
		return objtest.StartFakeS3(t)
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

func eachStore(t *testing.T, f func(t *testing.T, st objclient.Store)) {
	for _, k := range storeKinds {
		t.Run(k, func(t *testing.T) {
			requireFUSE(t)
			f(t, newStore(t, k))
		})
	}
}

// names lists dir (without "." and "..") in byte order.
func names(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir %s: %v", dir, err)
	}
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func wantNames(t testing.TB, dir string, want ...string) {
	t.Helper()
	got := names(t, dir)
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("ls %s = %q, want %q", dir, got, want)
	}
}

// wantErrno checks that err is (or wraps) the errno want.
func wantErrno(t testing.TB, what string, err error, want syscall.Errno) {
	t.Helper()
	var got syscall.Errno
	if !errors.As(err, &got) || got != want {
		t.Errorf("%s: err = %v, want %v (%d)", what, err, want, int(want))
	}
}

func lstat(t testing.TB, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return &st
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return b
}

func writeFile(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

func storeData(t testing.TB, st objclient.Store, key string) ([]byte, bool) {
	t.Helper()
	info, err := st.Stat(context.Background(), key)
	if errors.Is(err, objclient.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("Stat %q: %v", key, err)
	}
	buf := make([]byte, info.Size)
	n, err := st.GetRange(context.Background(), key, 0, buf, "")
	if err != nil {
		t.Fatalf("GetRange %q: %v", key, err)
	}
	return buf[:n], true
}

func join(mnt string, p ...string) string { return filepath.Join(append([]string{mnt}, p...)...) }

var _ = io.EOF

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// seedParallel stores plain objects (no content type or metadata) through
// the Store's own Writer, 8 at a time.
func seedParallel(t testing.TB, st objclient.Store, objs []obj) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(objs))
	work := make(chan obj)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range work {
				w, err := st.Put(context.Background(), o.key, objclient.PutOptions{})
				if err == nil {
					_, err = w.Write(o.data)
				}
				if err == nil {
					_, err = w.Commit(context.Background())
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, o := range objs {
		work <- o
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("seed: %v", err)
	}
}
