package prefetch

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/os2g/os2g/diskcache"
	"github.com/os2g/os2g/objclient/objtest"
)

var _ DiskCache = (*diskcache.Cache)(nil)

// hangGuard bounds waits for background work; it is never reached in a
// passing run.
const hangGuard = 60 * time.Second

// diskPut is one call of fakeDisk.Put.
type diskPut struct {
	key, etag string
	size      int64
	data      []byte
	err       error
}

// fakeDisk is a DiskCache that records Puts and Removes. A Put reads r
// whole (first: bytes, then waits on hold if set), records the call and
// sends it on done.
type fakeDisk struct {
	first   int           // with hold: bytes read before waiting (0: all)
	read    chan struct{} // with hold: closed when first bytes were read
	hold    chan struct{} // nil: do not wait
	done    chan diskPut  // every finished Put (buffered)
	mu      sync.Mutex    // guards puts, removes
	puts    []diskPut
	removes []string
}

func newFakeDisk() *fakeDisk {
	return &fakeDisk{done: make(chan diskPut, 16), read: make(chan struct{})}
}

func (d *fakeDisk) Put(key, etag string, size int64, r io.Reader) error {
	var buf bytes.Buffer
	var err error
	if d.hold != nil {
		n := int64(d.first)
		if n == 0 {
			n = size + 1
		}
		_, err = io.CopyN(&buf, r, n)
		if errors.Is(err, io.EOF) {
			err = nil
		}
		close(d.read)
		<-d.hold
	}
	if err == nil {
		_, err = io.Copy(&buf, r)
	}
	if err == nil && int64(buf.Len()) != size {
		err = errors.New("size mismatch")
	}
	p := diskPut{key, etag, size, buf.Bytes(), err}
	d.mu.Lock()
	d.puts = append(d.puts, p)
	d.mu.Unlock()
	d.done <- p
	return err
}

func (d *fakeDisk) Remove(key string) {
	d.mu.Lock()
	d.removes = append(d.removes, key)
	d.mu.Unlock()
}

func (d *fakeDisk) counts() (puts int, removes []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.puts), append([]string(nil), d.removes...)
}

func waitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatal("DiskCache.Put never read")
	}
}

func waitPut(t *testing.T, ch <-chan diskPut) diskPut {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(hangGuard):
		t.Fatal("no DiskCache.Put")
		return diskPut{}
	}
}

// readSeq reads f through a new handle in chunks of n bytes, up to end.
func readSeq(t *testing.T, m *Manager, f File, end int64, n int) []byte {
	t.Helper()
	r := m.Open(f)
	defer r.Close()
	var out []byte
	for off := int64(0); off < end; off += int64(n) {
		out = append(out, readAt(t, r, off, int(min(int64(n), end-off)))...)
	}
	return out
}

// TestDiskFillWholeRead: a file read whole (several parts, and a small one
// fetched in one GET) is handed to the DiskCache once, with its exact
// bytes; a partial read hands over nothing.
func TestDiskFillWholeRead(t *testing.T) {
	mem := objtest.NewMem()
	big := randBytes(31, 5*int(mib)+123)
	small := randBytes(32, 5000)
	fb := memFile(t, mem, "d/big", big)
	fs := memFile(t, mem, "d/small", small)
	fp := memFile(t, mem, "d/part", randBytes(33, 3*int(mib)))
	fsp := memFile(t, mem, "d/smallpart", randBytes(34, 5000))
	disk := newFakeDisk()
	m, err := New(Options{Getter: mem, MaxMemory: 64 * mib, PartSize: 2 * mib, DiskCache: disk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	readSeq(t, m, fp, fp.Size/2, 128*int(kib)) // partial: no Put
	readSeq(t, m, fsp, 100, 100)               // small, fetched whole, read in part: no Put
	if got := readSeq(t, m, fb, fb.Size, 128*int(kib)); !bytes.Equal(got, big) {
		t.Fatal("read bytes differ")
	}
	p := waitPut(t, disk.done)
	if p.err != nil || p.key != fb.Key || p.etag != fb.ETag || p.size != fb.Size || !bytes.Equal(p.data, big) {
		t.Fatalf("Put %q %q %d (err %v), bytes equal %v; want %q %q %d", p.key, p.etag, p.size, p.err, bytes.Equal(p.data, big), fb.Key, fb.ETag, fb.Size)
	}
	readSeq(t, m, fs, fs.Size, 4096)
	p = waitPut(t, disk.done)
	if p.err != nil || p.key != fs.Key || !bytes.Equal(p.data, small) {
		t.Fatalf("small Put %q (err %v), bytes equal %v", p.key, p.err, bytes.Equal(p.data, small))
	}
	m.Close() // waits for every copy
	if n, _ := disk.counts(); n != 2 {
		t.Errorf("%d Puts, want 2 (the two files read whole)", n)
	}
	if st := m.Stats(); st.DiskPuts != 2 || st.DiskPutErrors != 0 {
		t.Errorf("stats: %d puts, %d errors; want 2, 0", st.DiskPuts, st.DiskPutErrors)
	}
}

// TestDiskFillSkips: no copy of a file over DiskCacheMaxFile, of one whose
// bytes were evicted before the read ended, or while DiskCacheConcurrency
// copies run.
func TestDiskFillSkips(t *testing.T) {
	mem := objtest.NewMem()
	f1 := memFile(t, mem, "s/one", randBytes(41, 3*int(mib)))
	f2 := memFile(t, mem, "s/two", randBytes(42, 1*int(mib)))
	f3 := memFile(t, mem, "s/three", randBytes(43, 20*int(mib)))
	disk := newFakeDisk()
	disk.hold = make(chan struct{})
	m, err := New(Options{Getter: mem, MaxMemory: 8 * mib, PartSize: 2 * mib, DiskCache: disk,
		DiskCacheMaxFile: 4 * mib, DiskCacheConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	readSeq(t, m, f3, f3.Size, int(mib)) // over DiskCacheMaxFile
	readSeq(t, m, f1, f1.Size, int(mib)) // copied; the Put holds
	waitClosed(t, disk.read)
	readSeq(t, m, f2, f2.Size, int(mib)) // one copy runs: skipped
	close(disk.hold)
	if p := waitPut(t, disk.done); p.key != f1.Key || p.err != nil {
		t.Fatalf("Put %q err %v, want %q", p.key, p.err, f1.Key)
	}
	m.Close()
	if n, _ := disk.counts(); n != 1 {
		t.Errorf("%d Puts, want 1", n)
	}
	if st := m.Stats(); st.DiskSkipped != 1 || st.DiskPuts != 1 {
		t.Errorf("stats: %d skipped, %d puts; want 1, 1", st.DiskSkipped, st.DiskPuts)
	}

	// A file larger than the budget: its first parts are evicted by the
	// time the read ends.
	disk2 := newFakeDisk()
	m2 := newTestManager(t, Options{Getter: mem, MaxMemory: 8 * mib, PartSize: 2 * mib, DiskCache: disk2})
	readSeq(t, m2, f3, f3.Size, int(mib))
	m2.Close()
	if n, _ := disk2.counts(); n != 0 || m2.Stats().DiskSkipped != 1 {
		t.Errorf("evicted file: %d Puts, %d skipped; want 0, 1", n, m2.Stats().DiskSkipped)
	}
}

// TestDiskFillInvalidate: Invalidate removes the key from the DiskCache,
// also after a copy in progress publishes; a copy whose bytes are dropped
// midway fails and leaves nothing.
func TestDiskFillInvalidate(t *testing.T) {
	mem := objtest.NewMem()
	f := memFile(t, mem, "i/x", randBytes(51, 3*int(mib)))

	// Invalidated after the copy read everything, before Put returned.
	disk := newFakeDisk()
	disk.hold = make(chan struct{})
	m := newTestManager(t, Options{Getter: mem, MaxMemory: 16 * mib, PartSize: 2 * mib, DiskCache: disk})
	readSeq(t, m, f, f.Size, int(mib))
	waitClosed(t, disk.read)
	m.Invalidate(f.Key)
	close(disk.hold)
	if p := waitPut(t, disk.done); p.err != nil {
		t.Fatalf("Put: %v", p.err)
	}
	m.Close()
	if _, rm := disk.counts(); len(rm) != 2 || rm[0] != f.Key || rm[1] != f.Key {
		t.Errorf("removes %q, want %q twice (Invalidate, then after the racing Put)", rm, f.Key)
	}
	if st := m.Stats(); st.DiskPuts != 0 {
		t.Errorf("DiskPuts %d, want 0", st.DiskPuts)
	}

	// Invalidated midway: the copy's next Read finds its bytes gone.
	disk2 := newFakeDisk()
	disk2.hold = make(chan struct{})
	disk2.first = 1
	m2 := newTestManager(t, Options{Getter: mem, MaxMemory: 16 * mib, PartSize: 2 * mib, DiskCache: disk2})
	readSeq(t, m2, f, f.Size, int(mib))
	waitClosed(t, disk2.read)
	m2.Invalidate(f.Key)
	close(disk2.hold)
	if p := waitPut(t, disk2.done); !errors.Is(p.err, errEvicted) {
		t.Fatalf("Put err %v, want errEvicted", p.err)
	}
	m2.Close()
	if st := m2.Stats(); st.DiskPutErrors != 1 || st.DiskPuts != 0 {
		t.Errorf("stats: %d errors, %d puts; want 1, 0", st.DiskPutErrors, st.DiskPuts)
	}
}

// notifyDisk wraps a diskcache.Cache and reports each finished Put.
type notifyDisk struct {
	*diskcache.Cache
	done chan error
}

func (d notifyDisk) Put(key, etag string, size int64, r io.Reader) error {
	err := d.Cache.Put(key, etag, size, r)
	d.done <- err
	return err
}

// TestDiskFillRealCache: with the real diskcache, a file read whole is
// on disk with identical bytes, and Invalidate removes it.
func TestDiskFillRealCache(t *testing.T) {
	dc, err := diskcache.New(diskcache.Options{Dir: t.TempDir(), MaxBytes: 64 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	mem := objtest.NewMem()
	data := randBytes(61, 5*int(mib)+7)
	f := memFile(t, mem, "r/x", data)
	disk := notifyDisk{dc, make(chan error, 4)}
	m := newTestManager(t, Options{Getter: mem, MaxMemory: 64 * mib, PartSize: 2 * mib, DiskCache: disk})
	readSeq(t, m, f, f.Size, 256*int(kib))
	select {
	case err := <-disk.done:
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("no Put")
	}
	fd, size, ok := dc.Open(f.Key, f.ETag)
	if !ok {
		t.Fatal("not in the disk cache after a whole read")
	}
	got := make([]byte, size)
	_, err = fd.ReadAt(got, 0)
	fd.Close()
	if err != nil || size != f.Size || !bytes.Equal(got, data) {
		t.Fatalf("disk copy: size %d (want %d), err %v, equal %v", size, f.Size, err, bytes.Equal(got, data))
	}
	m.Invalidate(f.Key)
	if _, _, ok := dc.Open(f.Key, f.ETag); ok {
		t.Error("still in the disk cache after Invalidate")
	}
}
