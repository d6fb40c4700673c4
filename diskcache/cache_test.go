package diskcache_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/os2g/os2g/diskcache"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newCache(t *testing.T, dir string, max int64, verify bool) *diskcache.Cache {
	t.Helper()
	c, err := diskcache.New(diskcache.Options{Dir: dir, MaxBytes: max, VerifyOnStart: verify, Logger: quiet()})
	if err != nil {
		t.Fatalf("New(%s, %d): %v", dir, max, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// data returns n bytes determined by seed.
func data(seed string, n int) []byte {
	h := sha256.Sum256([]byte(seed))
	r := rand.New(rand.NewChaCha8(h))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// paths returns the content and sidecar files of (key, etag), per the
// layout in the package doc.
func paths(dir, key, etag string) (content, sidecar string) {
	h := sha256.Sum256([]byte(key + "\x00" + etag))
	id := hex.EncodeToString(h[:])
	content = filepath.Join(dir, id[:2], id)
	return content, content + ".meta"
}

func put(t *testing.T, c *diskcache.Cache, key, etag string, b []byte) {
	t.Helper()
	if err := c.Put(key, etag, int64(len(b)), bytes.NewReader(b)); err != nil {
		t.Fatalf("Put(%q, %q, %d bytes): %v", key, etag, len(b), err)
	}
}

// mustOpen opens (key, etag) and checks its content is want, from offset 0.
func mustOpen(t *testing.T, c *diskcache.Cache, key, etag string, want []byte) {
	t.Helper()
	f, size, ok := c.Open(key, etag)
	if !ok {
		t.Fatalf("Open(%q, %q) missed", key, etag)
	}
	defer f.Close()
	if size != int64(len(want)) {
		t.Fatalf("Open(%q) size = %d, want %d", key, size, len(want))
	}
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("content of %q from offset 0: %d bytes (err %v), want the %d put", key, len(got), err, len(want))
	}
}

func mustMiss(t *testing.T, c *diskcache.Cache, key, etag string) {
	t.Helper()
	if f, _, ok := c.Open(key, etag); ok {
		f.Close()
		t.Fatalf("Open(%q, %q) hit, want a miss", key, etag)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// entryFiles lists the files under dir other than the lock and tmp/.
func entryFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() || rel == "lock" {
			return nil
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOptionsValidated(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []diskcache.Options{
		{Dir: "", MaxBytes: 1 << 20},
		{Dir: dir, MaxBytes: 0},
		{Dir: dir, MaxBytes: -1},
	} {
		if _, err := diskcache.New(o); !errors.Is(err, diskcache.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
	sub := filepath.Join(dir, "a", "cache")
	c := newCache(t, sub, 1<<20, false)
	fi, err := os.Stat(sub)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir mode = %v, %v; want 0700", fi.Mode(), err)
	}
	for _, tc := range []struct {
		key, etag string
		size      int64
		want      error
	}{
		{"", "e", 1, diskcache.ErrInvalidArgument},
		{"k", "", 1, diskcache.ErrInvalidArgument},
		{"k", "e", -1, diskcache.ErrInvalidArgument},
		{"k", "e", 1<<20 + 1, diskcache.ErrTooLarge},
	} {
		if err := c.Put(tc.key, tc.etag, tc.size, strings.NewReader("x")); !errors.Is(err, tc.want) {
			t.Errorf("Put(%q, %q, %d) = %v, want %v", tc.key, tc.etag, tc.size, err, tc.want)
		}
	}
	if _, err := diskcache.New(diskcache.Options{Dir: sub, MaxBytes: 1 << 20}); !errors.Is(err, diskcache.ErrLocked) {
		t.Errorf("second New on a directory in use = %v, want ErrLocked", err)
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	c := newCache(t, dir, 10<<20, false)
	objs := map[string][]byte{
		"train/a.jpg":    data("a", 1000),
		"train/b.bin":    data("b", 3<<20+7),
		"train/empty":    {},
		"run[1]/a b+c é": data("odd", 4097),
	}
	var total int64
	for k, b := range objs {
		put(t, c, k, `"etag-`+k+`"`, b)
		total += int64(len(b))
	}
	for k, b := range objs {
		mustOpen(t, c, k, `"etag-`+k+`"`, b)
		// The content file is the object's bytes and nothing else, so a
		// descriptor can back a FUSE passthrough file.
		content, sidecar := paths(dir, k, `"etag-`+k+`"`)
		raw, err := os.ReadFile(content)
		if err != nil || !bytes.Equal(raw, b) {
			t.Fatalf("content file of %q is not exactly the object: %d bytes, %v", k, len(raw), err)
		}
		if fi, err := os.Stat(content); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("content file mode %v, %v: readable by others", fi.Mode(), err)
		}
		if !exists(sidecar) {
			t.Errorf("no sidecar for %q", k)
		}
	}
	f, _, ok := c.Open("train/b.bin", `"etag-train/b.bin"`)
	if !ok {
		t.Fatal("miss")
	}
	buf := make([]byte, 100)
	if n, err := f.ReadAt(buf, 2<<20); n != 100 || err != nil || !bytes.Equal(buf, objs["train/b.bin"][2<<20:2<<20+100]) {
		t.Fatalf("ReadAt at 2 MiB = %d, %v", n, err)
	}
	if _, err := f.Write([]byte("x")); err == nil {
		t.Error("descriptor from Open is writable")
	}
	f.Close()
	mustMiss(t, c, "train/a.jpg", `"other"`)
	mustMiss(t, c, "train/none", `"etag"`)
	st := c.Stats()
	want := diskcache.Stats{Hits: 5, Misses: 2, Entries: 4, Bytes: total}
	if st != want {
		t.Fatalf("Stats = %+v, want %+v", st, want)
	}
	if !c.Verify("train/b.bin", `"etag-train/b.bin"`) || c.Verify("train/none", "x") {
		t.Error("Verify of a good entry false, or of an absent one true")
	}
}

// failingReader gives n good bytes, then err.
type failingReader struct {
	r   io.Reader
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	m, err := f.r.Read(p)
	f.n -= m
	return m, err
}

func TestPutAtomic(t *testing.T) {
	dir := t.TempDir()
	c := newCache(t, dir, 10<<20, false)
	old := data("old", 5000)
	put(t, c, "k", "e1", old)
	b := data("new", 2<<20)
	boom := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		size int64
		r    func() io.Reader
		want error
	}{
		{"reader fails midway", int64(len(b)), func() io.Reader { return &failingReader{r: bytes.NewReader(b), n: 1 << 20, err: boom} }, boom},
		{"short data", int64(len(b)), func() io.Reader { return bytes.NewReader(b[:len(b)-1]) }, diskcache.ErrSizeMismatch},
		{"long data", int64(len(b)) - 1, func() io.Reader { return bytes.NewReader(b) }, diskcache.ErrSizeMismatch},
		{"fails after the last byte", int64(len(b)), func() io.Reader { return &failingReader{r: bytes.NewReader(b), n: len(b), err: boom} }, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, etag := range []string{"e1", "e2"} { // replacing, and new
				if err := c.Put("k", etag, tc.size, tc.r()); !errors.Is(err, tc.want) {
					t.Fatalf("Put(%s) = %v, want %v", etag, err, tc.want)
				}
			}
			mustMiss(t, c, "k", "e2")
			mustOpen(t, c, "k", "e1", old) // the failed replacement left the old entry
			if st := c.Stats(); st.Entries != 1 || st.Bytes != int64(len(old)) || st.Reserved != 0 {
				t.Fatalf("Stats after failed Puts = %+v, want 1 entry of %d bytes, nothing reserved", st, len(old))
			}
			oc, os_ := paths(dir, "k", "e1")
			if files := entryFiles(t, dir); len(files) != 2 || !exists(oc) || !exists(os_) {
				t.Fatalf("files left = %v, want only the old entry's two", files)
			}
		})
	}
}

func TestCorruptionDetected(t *testing.T) {
	flip := func(t *testing.T, p string, off int64) {
		t.Helper()
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x10
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	b := data("c", 100_000)

	t.Run("Verify", func(t *testing.T) {
		dir := t.TempDir()
		c := newCache(t, dir, 1<<20, false)
		put(t, c, "k", "e", b)
		if !c.Verify("k", "e") {
			t.Fatal("Verify of an intact entry = false")
		}
		content, sidecar := paths(dir, "k", "e")
		flip(t, content, 54_321)
		if c.Verify("k", "e") {
			t.Fatal("Verify after a flipped byte = true")
		}
		mustMiss(t, c, "k", "e")
		if exists(content) || exists(sidecar) {
			t.Error("corrupt entry's files left on disk")
		}
		if st := c.Stats(); st.Corrupt != 1 || st.Entries != 0 || st.Bytes != 0 {
			t.Errorf("Stats = %+v, want 1 corrupt, empty", st)
		}
	})

	for _, verify := range []bool{true, false} {
		t.Run(fmt.Sprintf("restart VerifyOnStart=%v", verify), func(t *testing.T) {
			dir := t.TempDir()
			c := newCache(t, dir, 1<<20, false)
			put(t, c, "k", "e", b)
			put(t, c, "good", "e", b[:500])
			content, sidecar := paths(dir, "k", "e")
			flip(t, content, 99_999)
			c.Close()
			c2 := newCache(t, dir, 1<<20, verify)
			if verify {
				if st := c2.Stats(); st.Entries != 1 || st.Corrupt != 1 || st.Bytes != 500 {
					t.Fatalf("Stats after a verifying restart = %+v, want the corrupt entry dropped", st)
				}
				if exists(content) || exists(sidecar) {
					t.Error("corrupt entry's files left on disk")
				}
			}
			// Without VerifyOnStart the check happens on the first Open.
			mustMiss(t, c2, "k", "e")
			mustOpen(t, c2, "good", "e", b[:500])
			if st := c2.Stats(); st.Entries != 1 || st.Corrupt != 1 || st.Bytes != 500 {
				t.Fatalf("Stats = %+v, want 1 entry of 500 bytes and 1 corrupt", st)
			}
			if exists(content) || exists(sidecar) {
				t.Error("corrupt entry's files left on disk")
			}
		})
	}

	t.Run("restart drops partial and malformed entries", func(t *testing.T) {
		dir := t.TempDir()
		c := newCache(t, dir, 1<<20, false)
		for _, k := range []string{"truncated", "nosidecar", "nocontent", "badsidecar", "renamed", "good"} {
			put(t, c, k, "e", b[:1000])
		}
		c.Close()
		tc, _ := paths(dir, "truncated", "e")
		if err := os.Truncate(tc, 999); err != nil {
			t.Fatal(err)
		}
		_, ns := paths(dir, "nosidecar", "e")
		os.Remove(ns)
		nc, _ := paths(dir, "nocontent", "e")
		os.Remove(nc)
		_, bs := paths(dir, "badsidecar", "e")
		flip(t, bs, 12)
		// A sidecar moved under another entry's name.
		rc, rs := paths(dir, "renamed", "e")
		oc, os_ := paths(dir, "other", "e")
		os.MkdirAll(filepath.Dir(oc), 0o700)
		os.Rename(rc, oc)
		os.Rename(rs, os_)
		// A temporary file of a Put cut short.
		os.WriteFile(filepath.Join(dir, "tmp", "c-123"), b[:10], 0o600)

		c2 := newCache(t, dir, 1<<20, false)
		st := c2.Stats()
		if st.Entries != 1 || st.Bytes != 1000 {
			t.Fatalf("Stats after restart = %+v, want only \"good\"", st)
		}
		mustOpen(t, c2, "good", "e", b[:1000])
		gc, gs := paths(dir, "good", "e")
		files := entryFiles(t, dir)
		want := []string{rel(dir, gc), rel(dir, gs)}
		if len(files) != 2 || !sameSet(files, want) {
			t.Fatalf("files after restart = %v, want %v", files, want)
		}
	})
}

func rel(dir, p string) string { r, _ := filepath.Rel(dir, p); return r }

func sameSet(a, b []string) bool {
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

func TestLRUEviction(t *testing.T) {
	dir := t.TempDir()
	c := newCache(t, dir, 300, false)
	for _, k := range []string{"a", "b", "c"} {
		put(t, c, k, "e", data(k, 100))
	}
	mustOpen(t, c, "a", "e", data("a", 100)) // a is now the most recent; b the least
	put(t, c, "d", "e", data("d", 100))      // evicts b
	mustMiss(t, c, "b", "e")
	if bc, bs := paths(dir, "b", "e"); exists(bc) || exists(bs) {
		t.Error("evicted entry's files left on disk")
	}
	put(t, c, "e", "e", data("e", 150)) // needs 150: evicts c, then a
	for _, k := range []string{"a", "c"} {
		mustMiss(t, c, k, "e")
	}
	mustOpen(t, c, "d", "e", data("d", 100))
	mustOpen(t, c, "e", "e", data("e", 150))
	if st := c.Stats(); st.Evictions != 3 || st.Bytes != 250 || st.Entries != 2 {
		t.Fatalf("Stats = %+v, want 3 evictions, 2 entries, 250 bytes", st)
	}
	put(t, c, "full", "e", data("f", 300)) // exactly MaxBytes: evicts all
	if st := c.Stats(); st.Entries != 1 || st.Bytes != 300 {
		t.Fatalf("Stats = %+v after a MaxBytes-sized Put", st)
	}
	if err := c.Put("big", "e", 301, bytes.NewReader(data("g", 301))); !errors.Is(err, diskcache.ErrTooLarge) {
		t.Fatalf("Put of 301 bytes in a 300-byte cache = %v, want ErrTooLarge", err)
	}
	mustOpen(t, c, "full", "e", data("f", 300)) // a refused Put evicts nothing
}

func TestRestartPersistence(t *testing.T) {
	dir := t.TempDir()
	c := newCache(t, dir, 1000, false)
	keys := []string{"k0", "k1", "k2", "k3"}
	for _, k := range keys {
		put(t, c, k, "e-"+k, data(k, 200))
	}
	c.Close()
	if err := c.Put("late", "e", 1, strings.NewReader("x")); !errors.Is(err, diskcache.ErrClosed) {
		t.Errorf("Put after Close = %v, want ErrClosed", err)
	}
	// The recency order after a restart is the sidecars' write order;
	// set it explicitly: k2 oldest, then k0, k3, k1.
	base := time.Now().Add(-time.Hour)
	for i, k := range []string{"k2", "k0", "k3", "k1"} {
		_, s := paths(dir, k, "e-"+k)
		ts := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(s, ts, ts); err != nil {
			t.Fatal(err)
		}
	}
	c2 := newCache(t, dir, 1000, true)
	if st := c2.Stats(); st.Entries != 4 || st.Bytes != 800 || st.Corrupt != 0 {
		t.Fatalf("Stats after restart = %+v, want the 4 entries", st)
	}
	for _, k := range keys {
		mustOpen(t, c2, k, "e-"+k, data(k, 200))
	}
	c2.Close()
	for i, k := range []string{"k2", "k0", "k3", "k1"} {
		_, s := paths(dir, k, "e-"+k)
		ts := base.Add(time.Duration(i) * time.Minute)
		os.Chtimes(s, ts, ts)
	}
	// A smaller cache on restart keeps the most recent entries.
	c3 := newCache(t, dir, 450, false)
	if st := c3.Stats(); st.Entries != 2 || st.Bytes != 400 || st.Evictions != 2 {
		t.Fatalf("Stats after restart with MaxBytes 450 = %+v, want k3 and k1 kept", st)
	}
	mustMiss(t, c3, "k2", "e-k2")
	mustMiss(t, c3, "k0", "e-k0")
	mustOpen(t, c3, "k1", "e-k1", data("k1", 200))
	mustOpen(t, c3, "k3", "e-k3", data("k3", 200))
	// Then LRU as usual: k1 was opened before k3, so k1 goes first.
	put(t, c3, "n", "e", data("n", 200))
	mustMiss(t, c3, "k1", "e-k1")
	mustOpen(t, c3, "k3", "e-k3", data("k3", 200))
}

func TestETagsAndRemove(t *testing.T) {
	dir := t.TempDir()
	c := newCache(t, dir, 1<<20, false)
	v1, v2 := data("v1", 3000), data("v2", 4000)
	put(t, c, "k", "e1", v1)
	f, _, ok := c.Open("k", "e1")
	if !ok {
		t.Fatal("miss")
	}
	defer f.Close()
	put(t, c, "k", "e2", v2) // a new version drops the old one
	mustMiss(t, c, "k", "e1")
	mustOpen(t, c, "k", "e2", v2)
	if c1, s1 := paths(dir, "k", "e1"); exists(c1) || exists(s1) {
		t.Error("old version's files left")
	}
	// The descriptor of the dropped version still reads its bytes.
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, v1) {
		t.Fatalf("descriptor of an evicted entry read %d bytes, %v", len(got), err)
	}
	put(t, c, "k", "e2", v1[:10]) // same version again replaces it
	mustOpen(t, c, "k", "e2", v1[:10])
	put(t, c, "other", "e", v2)
	c.Remove("k")
	mustMiss(t, c, "k", "e2")
	mustOpen(t, c, "other", "e", v2)
	if st := c.Stats(); st.Entries != 1 || st.Bytes != 4000 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestConcurrent runs Puts, Opens and Removes of a few keys from many
// goroutines (run with -race). Every hit must read exactly the bytes of
// its (key, ETag), and the totals must stay within MaxBytes.
func TestConcurrent(t *testing.T) {
	dir := t.TempDir()
	const max = 64 << 10
	c := newCache(t, dir, max, false)
	content := func(k, e string) []byte {
		n := 1000 + int(sha256.Sum256([]byte(k + e))[0])*40
		return data(k+"/"+e, n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("k%d", r.IntN(12))
				e := fmt.Sprintf("e%d", r.IntN(2))
				switch r.IntN(10) {
				case 0:
					c.Remove(k)
				case 1, 2, 3:
					b := content(k, e)
					if err := c.Put(k, e, int64(len(b)), bytes.NewReader(b)); err != nil && !errors.Is(err, diskcache.ErrFull) {
						errs <- fmt.Errorf("Put(%s, %s): %w", k, e, err)
						return
					}
				default:
					f, size, ok := c.Open(k, e)
					if !ok {
						continue
					}
					got, err := io.ReadAll(f)
					f.Close()
					if want := content(k, e); err != nil || size != int64(len(want)) || !bytes.Equal(got, want) {
						errs <- fmt.Errorf("Open(%s, %s): %d bytes (size %d), %v: not the content put", k, e, len(got), size, err)
						return
					}
				}
				if st := c.Stats(); st.Bytes+st.Reserved > max {
					errs <- fmt.Errorf("Stats %+v over MaxBytes %d", st, max)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := c.Stats()
	if st.Reserved != 0 || st.Corrupt != 0 || st.Hits == 0 {
		t.Errorf("final Stats = %+v", st)
	}
	// The disk holds exactly the indexed entries, and a restart agrees.
	files := entryFiles(t, dir)
	if len(files) != 2*st.Entries {
		t.Errorf("%d files on disk for %d entries: %v", len(files), st.Entries, files)
	}
	c.Close()
	c2 := newCache(t, dir, max, true)
	if st2 := c2.Stats(); st2.Entries != st.Entries || st2.Bytes != st.Bytes || st2.Corrupt != 0 {
		t.Errorf("after restart Stats = %+v, before %+v", st2, st)
	}
}
