package prefetch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

func TestOptionsValidation(t *testing.T) {
	g := wordGetter{size: 1}
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"no getter", Options{MaxMemory: 64 * mib}},
		{"no memory", Options{Getter: g}},
		{"memory below part", Options{Getter: g, MaxMemory: 4 * mib}},
		{"negative part", Options{Getter: g, MaxMemory: 64 * mib, PartSize: -1}},
		{"initial above part", Options{Getter: g, MaxMemory: 64 * mib, InitialWindow: 16 * mib}},
		{"small above part", Options{Getter: g, MaxMemory: 64 * mib, SmallFileSize: 9 * mib}},
		{"epoch memory above max", Options{Getter: g, MaxMemory: 64 * mib, EpochMemory: 65 * mib}},
	} {
		if _, err := New(c.o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: New error = %v, want ErrInvalidOptions", c.name, err)
		}
	}
	m, err := New(Options{Getter: g, MaxMemory: 64 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.o.PartSize != DefaultPartSize || m.o.InitialWindow != DefaultInitialWindow || m.o.SmallFileSize != DefaultSmallFileSize {
		t.Errorf("defaults not applied: %+v", m.o)
	}
	if m.maxWin != 16*mib {
		t.Errorf("effective max window = %d, want MaxMemory/4 = %d", m.maxWin, 16*mib)
	}
}

// TestRandomReadsMatchSource reads random ranges (many straddling part
// boundaries) and compares them with the stored bytes.
func TestRandomReadsMatchSource(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(1, int(21*mib+12345))
	f := memFile(t, mem, "d/big.bin", data)
	small := randBytes(2, 300000)
	fs := memFile(t, mem, "d/small.bin", small)
	al := newTrackAlloc()
	m := newTestManager(t, Options{Getter: mem, MaxMemory: 12 * mib, PartSize: 2 * mib, InitialWindow: 256 * kib, Alloc: al})
	rng := rand.New(rand.NewPCG(7, 7))
	for _, tc := range []struct {
		f    File
		data []byte
	}{{f, data}, {fs, small}} {
		r := m.Open(tc.f)
		for i := 0; i < 200; i++ {
			var off int64
			switch i % 4 {
			case 0:
				off = rng.Int64N(tc.f.Size + 100)
			case 1: // near a part boundary
				off = max(0, (rng.Int64N(11)+1)*2*mib-rng.Int64N(1000))
			case 2: // sequential run
				off = int64(i) * 100000 % (tc.f.Size + 1)
			case 3: // tail
				off = max(0, tc.f.Size-rng.Int64N(70000))
			}
			n := int(rng.Int64N(3*mib) + 1)
			p := make([]byte, n)
			got, err := r.ReadAt(context.Background(), p, off)
			if err != nil {
				t.Fatalf("ReadAt(%d, %d): %v", off, n, err)
			}
			want := 0
			if off < tc.f.Size {
				want = int(min(int64(n), tc.f.Size-off))
			}
			if got != want {
				t.Fatalf("ReadAt(%d, %d) = %d bytes, want %d", off, n, got, want)
			}
			if want > 0 && !bytes.Equal(p[:got], tc.data[off:off+int64(got)]) {
				t.Fatalf("ReadAt(%d, %d): bytes differ from source", off, n)
			}
		}
		r.Close()
	}
	st := m.Stats()
	if st.Peak > 12*mib {
		t.Errorf("peak budget %d > MaxMemory", st.Peak)
	}
	if _, peak, bad := al.stats(); peak > 12*mib || bad != 0 {
		t.Errorf("allocator peak %d (max %d), bad frees %d", peak, 12*mib, bad)
	}
}

// TestHugeOffsets follows CASES C09 on a synthetic 6 GiB object.
func TestHugeOffsets(t *testing.T) {
	size := int64(6442450944)
	g := newCountGetter(wordGetter{size: size}, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	r := m.Open(File{Key: "ckpt/model.bin", Size: size, ETag: "w"})
	defer r.Close()
	word := func(off int64) uint64 {
		return binary.LittleEndian.Uint64(readAt(t, r, off, 8))
	}
	for _, c := range []struct {
		off  int64
		want uint64
	}{{2147483640, 268435455}, {4294967288, 536870911}, {5368709120, 671088640}, {6442450936, 805306367}} {
		if got := word(c.off); got != c.want {
			t.Errorf("word at %d = %d, want %d", c.off, got, c.want)
		}
	}
	got := readAt(t, r, 4294967292, 16)
	want := []byte{0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 1, 0, 0, 0x20}
	if !bytes.Equal(got, want) {
		t.Errorf("16 bytes at 4294967292 = % x, want % x", got, want)
	}
	if n, err := r.ReadAt(context.Background(), make([]byte, 8), size); n != 0 || err != nil {
		t.Errorf("read at EOF = %d, %v; want 0, nil", n, err)
	}
	if n, err := r.ReadAt(context.Background(), make([]byte, 8), size+1<<33); n != 0 || err != nil {
		t.Errorf("read past EOF = %d, %v; want 0, nil", n, err)
	}
	if n, err := r.ReadAt(context.Background(), make([]byte, 8), -1); n != 0 || !errors.Is(err, ErrInvalidOffset) {
		t.Errorf("read at -1 = %d, %v; want ErrInvalidOffset", n, err)
	}
	// Random reads fetch little: 6 reads, each at most 2 granules.
	if b := g.bytes.Load(); b > 6*2*64*kib {
		t.Errorf("fetched %d bytes for 6 small random reads", b)
	}
	// A sequential pass across the 4 GiB boundary.
	r2 := m.Open(File{Key: "ckpt/model.bin", Size: size, ETag: "w"})
	defer r2.Close()
	start := int64(4*gib - 3*mib)
	buf := make([]byte, 128*kib)
	for off := start; off < start+6*mib; off += int64(len(buf)) {
		n, err := r2.ReadAt(context.Background(), buf, off)
		if err != nil || n != len(buf) {
			t.Fatalf("seq read at %d: %d, %v", off, n, err)
		}
		for i := 0; i < n; i += 4096 {
			if buf[i] != wordByte(off+int64(i)) {
				t.Fatalf("byte at %d = %d, want %d", off+int64(i), buf[i], wordByte(off+int64(i)))
			}
		}
	}
}

// TestSmallFileOneGET: a small object costs one GET however it is read.
func TestSmallFileOneGET(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(3, 1500*1000)
	f := memFile(t, mem, "img/0001.png", data)
	g := newCountGetter(mem, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	r := m.Open(f)
	var out []byte
	for off := int64(0); off < f.Size; off += 4096 {
		out = append(out, readAt(t, r, off, 4096)...)
	}
	r.Close()
	if !bytes.Equal(out, data) {
		t.Fatal("small file bytes differ")
	}
	if n := g.calls.Load(); n != 1 {
		t.Errorf("GETs = %d, want 1", n)
	}
	// A second handle is served from the cache.
	r = m.Open(f)
	readAt(t, r, 1000, 10)
	r.Close()
	if n := g.calls.Load(); n != 1 {
		t.Errorf("GETs after reopen = %d, want 1", n)
	}
}

// TestSequentialRatio: reading a 64 MiB object front to back fetches about
// 64 MiB, in pieces that grow.
func TestSequentialRatio(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(4, int(64*mib))
	f := memFile(t, mem, "s/seq.bin", data)
	g := newCountGetter(mem, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 256 * mib})
	r := m.Open(f)
	buf := make([]byte, 128*kib)
	for off := int64(0); off < f.Size; off += int64(len(buf)) {
		n, err := r.ReadAt(context.Background(), buf, off)
		if err != nil || n != len(buf) {
			t.Fatalf("read at %d: %d, %v", off, n, err)
		}
		if !bytes.Equal(buf, data[off:off+int64(n)]) {
			t.Fatalf("bytes differ at %d", off)
		}
	}
	r.Close()
	ratio := float64(g.bytes.Load()) / float64(f.Size)
	if ratio > 1.1 || ratio < 1 {
		t.Errorf("fetched/read = %.3f, want in [1, 1.1]", ratio)
	}
	g.mu.Lock()
	ranges := append([]span(nil), g.ranges...)
	g.mu.Unlock()
	for _, s := range ranges {
		if s.off == 0 && s.len() != 1*mib {
			t.Errorf("first GET = %v, want [0, 1 MiB)", s)
		}
	}
	largest := int64(0)
	for _, s := range ranges {
		largest = max(largest, s.len())
	}
	if largest != 8*mib {
		t.Errorf("largest GET = %d, want one part (8 MiB)", largest)
	}
	if st := m.Stats(); st.DemandRequests != 0 {
		t.Errorf("demand GETs = %d: read-ahead did not stay ahead", st.DemandRequests)
	}
	slices.SortFunc(ranges, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	for i := 1; i < len(ranges); i++ {
		if ranges[i].len() < ranges[i-1].len() && ranges[i].end != f.Size {
			t.Errorf("GET sizes shrink: %v after %v; want windows growing 1, 1, 2, 4, 8, 8... MiB", ranges[i], ranges[i-1])
		}
	}
	if len(ranges) > 16 {
		t.Errorf("%d GETs for 64 MiB; want the window to grow to whole parts", len(ranges))
	}
}

// TestTailReads: footer and central-directory reads of big objects fetch
// the request plus a bounded amount, never a window (CASES C11).
func TestTailReads(t *testing.T) {
	size := int64(512 * mib)
	g := newCountGetter(wordGetter{size: 2 * gib}, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 512 * mib})
	r := m.Open(File{Key: "tab/part-0.parquet", Size: size, ETag: "w"})
	defer r.Close()
	readAt(t, r, size-8, 8)
	if b := g.bytes.Load(); b > 64*kib {
		t.Errorf("tail 8-byte read fetched %d bytes, want <= 64 KiB", b)
	}
	readAt(t, r, 536805368, 65536)
	if c := g.calls.Load(); c > 2 {
		t.Errorf("footer took %d GETs, want <= 2", c)
	}
	before := g.bytes.Load()
	for i := int64(0); i < 3; i++ { // three 4 MiB column chunks
		readAt(t, r, 100*mib+i*37*mib, int(4*mib))
	}
	if b := g.bytes.Load() - before; b > 3*(4*mib+8*mib) {
		t.Errorf("3 column chunks fetched %d bytes, want <= 3*(4 MiB + 8 MiB)", b)
	}
	// Interleaved EOCD/locator reads of a zip: same bytes, no new GET.
	z := m.Open(File{Key: "shards/data.zip", Size: 2 * gib, ETag: "w"})
	defer z.Close()
	calls := g.calls.Load()
	readAt(t, z, 2*gib-22, 22)
	readAt(t, z, 2*gib-42, 20)
	if c := g.calls.Load() - calls; c != 1 {
		t.Errorf("EOCD + locator took %d GETs, want 1", c)
	}
	if b := m.Stats().BytesFetched; b > 4*mib+3*(4*mib+8*mib) {
		t.Errorf("total fetched %d: a tail read started a large prefetch", b)
	}
}

// TestInterleavedCursors: two cursors on one handle both keep their windows.
func TestInterleavedCursors(t *testing.T) {
	size := int64(1 * gib)
	g := newCountGetter(wordGetter{size: size}, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	r := m.Open(File{Key: "h5/feat.h5", Size: size, ETag: "w"})
	defer r.Close()
	for i := int64(0); i < 48; i++ {
		for _, base := range []int64{0, 512 * mib} {
			b := readAt(t, r, base+i*mib, int(mib))
			if b[0] != wordByte(base+i*mib) {
				t.Fatalf("wrong byte at %d", base+i*mib)
			}
		}
	}
	st := m.Stats()
	// Each cursor is sequential: almost everything came from read-ahead and
	// nothing was fetched twice.
	if st.DemandRequests > 4 {
		t.Errorf("demand GETs = %d, want <= 4 (cursors reset their windows)", st.DemandRequests)
	}
	if st.BytesFetched > 2*(48*mib+16*mib) {
		t.Errorf("fetched %d for 96 MiB read", st.BytesFetched)
	}
}

// TestOneReaderManyGoroutines: concurrent ReadAt on one handle returns the
// right bytes and fetches each byte once (singleflight).
func TestOneReaderManyGoroutines(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(5, int(40*mib))
	f := memFile(t, mem, "hot.bin", data)
	g := newCountGetter(mem, 200*time.Microsecond)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 128 * mib, PartSize: 4 * mib})
	r := m.Open(f)
	defer r.Close()
	var wg sync.WaitGroup
	errc := make(chan error, 32)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			p := make([]byte, 256*kib)
			for i := 0; i < 60; i++ {
				off := rng.Int64N(f.Size)
				n, err := r.ReadAt(context.Background(), p, off)
				if err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(p[:n], data[off:off+int64(n)]) {
					errc <- errors.New("bytes differ")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	// The cache holds all 40 MiB: no byte may be fetched twice.
	if b := g.bytes.Load(); b > f.Size {
		t.Errorf("fetched %d bytes of a %d-byte object: duplicate GETs", b, f.Size)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	rs := slices.Clone(g.ranges)
	slices.SortFunc(rs, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	for i := 1; i < len(rs); i++ {
		if rs[i].off < rs[i-1].end {
			t.Fatalf("GETs %v and %v overlap", rs[i-1], rs[i])
		}
	}
}

// TestManyReadersOneFile: 16 handles read one hot file; each part is
// fetched once.
func TestManyReadersOneFile(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(6, int(32*mib))
	f := memFile(t, mem, "shards/s-0000.tar", data)
	g := newCountGetter(mem, 500*time.Microsecond)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 128 * mib})
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := m.Open(f)
			defer r.Close()
			p := make([]byte, 1*mib)
			for off := int64(0); off < f.Size; off += int64(len(p)) {
				n, err := r.ReadAt(context.Background(), p, off)
				if err != nil || n != len(p) || !bytes.Equal(p, data[off:off+mib]) {
					errc <- errors.New("bad read")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if b := g.bytes.Load(); b != f.Size {
		t.Errorf("16 readers fetched %d bytes of a %d-byte file, want each byte once", b, f.Size)
	}
}

// TestConcurrentMissSingleGET: many handles missing one small file at once
// make one GET.
func TestConcurrentMissSingleGET(t *testing.T) {
	mem := objtest.NewMem()
	f := memFile(t, mem, "a/one.bin", randBytes(7, 100000))
	g := newCountGetter(mem, 5*time.Millisecond)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := 0; w < 50; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := m.Open(f)
			defer r.Close()
			<-start
			readAt(t, r, int64(w*100), 100)
		}()
	}
	close(start)
	wg.Wait()
	if n := g.calls.Load(); n != 1 {
		t.Errorf("GETs = %d, want 1", n)
	}
}

// TestBudget: 64 concurrent readers of distinct files never hold more than
// MaxMemory, and all finish.
func TestBudget(t *testing.T) {
	mem := objtest.NewMem()
	var files []File
	var datas [][]byte
	for i := 0; i < 64; i++ {
		d := randBytes(uint64(100+i), int(2*mib+int64(i)*1000))
		datas = append(datas, d)
		files = append(files, memFile(t, mem, "b/"+string(rune('A'+i%26))+string(rune('a'+i/26)), d))
	}
	g := newCountGetter(mem, 100*time.Microsecond)
	al := newTrackAlloc()
	const max = 8 * mib
	m := newTestManager(t, Options{Getter: g, MaxMemory: max, PartSize: 1 * mib, InitialWindow: 256 * kib, SmallFileSize: 64 * kib, Alloc: al})
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := m.Open(files[i])
			defer r.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			p := make([]byte, 200*kib)
			for off := int64(0); off < files[i].Size; {
				n, err := r.ReadAt(context.Background(), p, off)
				if err != nil || !bytes.Equal(p[:n], datas[i][off:off+int64(n)]) {
					errc <- errors.New("bad read")
					return
				}
				off += int64(n)
				if rng.IntN(8) == 0 { // a random read now and then
					q := rng.Int64N(files[i].Size)
					if _, err := r.ReadAt(context.Background(), p[:1000], q); err != nil {
						errc <- err
						return
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("readers deadlocked on the budget")
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st := m.Stats()
	if st.Peak > max {
		t.Errorf("peak accounted %d > MaxMemory %d", st.Peak, max)
	}
	if _, peak, bad := al.stats(); peak > max || bad != 0 {
		t.Errorf("allocator peak %d > %d or bad frees %d", peak, max, bad)
	}
	if st.InUse > max || st.InUse != st.Cached {
		t.Errorf("after all closed: in use %d, cached %d", st.InUse, st.Cached)
	}
	m.Close()
	if out, _, _ := al.stats(); out != 0 {
		t.Errorf("after Close %d bytes still allocated", out)
		al.mu.Lock()
		for _, n := range al.live {
			t.Logf("live %d", n)
		}
		al.mu.Unlock()
		st := m.Stats()
		t.Logf("%+v", st)
	}
}

// TestErrors: Getter errors reach the reader wrapped; failed blocks are not
// cached; a failed read-ahead does not poison later demand reads.
func TestErrors(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(8, int(20*mib))
	f := memFile(t, mem, "e/x.bin", data)
	g := newCountGetter(mem, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	r := m.Open(f)
	defer r.Close()
	g.failNext(1, objclient.ErrUnavailable)
	_, err := r.ReadAt(context.Background(), make([]byte, 10), 5*mib)
	if !errors.Is(err, objclient.ErrUnavailable) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	if got := readAt(t, r, 5*mib, 10); !bytes.Equal(got, data[5*mib:5*mib+10]) {
		t.Fatal("retry after failure returned wrong bytes")
	}
	// Sequential reader whose read-ahead fails: later reads still succeed.
	r2 := m.Open(f)
	defer r2.Close()
	readAt(t, r2, 0, int(128*kib))
	g.failNext(3, objclient.ErrThrottled)
	for off := 128 * kib; off < 12*mib; off += 128 * kib {
		p := make([]byte, 128*kib)
		n, err := r2.ReadAt(context.Background(), p, off)
		if err != nil {
			if !errors.Is(err, objclient.ErrThrottled) {
				t.Fatalf("read at %d: %v", off, err)
			}
			continue // a demand read may see the injected error once
		}
		if !bytes.Equal(p[:n], data[off:off+int64(n)]) {
			t.Fatalf("bytes differ at %d", off)
		}
	}
	if got := readAt(t, r2, 128*kib, int(12*mib-128*kib)); !bytes.Equal(got, data[128*kib:12*mib]) {
		t.Fatal("re-read after read-ahead failures returned wrong bytes")
	}
	// ETag mismatch: ErrChanged is errors.Is-able.
	stale := f
	stale.ETag = `"stale"`
	r3 := m.Open(stale)
	defer r3.Close()
	if _, err := r3.ReadAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, objclient.ErrChanged) {
		t.Errorf("stale ETag error = %v, want ErrChanged", err)
	}
	if st := m.Stats(); st.FetchErrors < 2 {
		t.Errorf("fetch errors = %d", st.FetchErrors)
	}
}

// TestCancel: a cancelled ctx returns ctx.Err() without waiting for the GET.
func TestCancel(t *testing.T) {
	mem := objtest.NewMem()
	f := memFile(t, mem, "c/slow.bin", randBytes(9, int(4*mib)))
	block := make(chan struct{})
	g := &blockGetter{inner: mem, block: block}
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	r := m.Open(f)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.ReadAt(ctx, make([]byte, 10), 3*mib)
		errc <- err
	}()
	g.waitStarted(t)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
	// Close cancels the pending GET and returns; the Getter sees ctx end.
	r.Close()
	close(block)
	if _, err := r.ReadAt(context.Background(), make([]byte, 1), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("read after Close = %v, want ErrClosed", err)
	}
}

// blockGetter blocks every GET until block is closed or ctx ends.
type blockGetter struct {
	inner   Getter
	block   chan struct{}
	started sync.Once
	ch      chan struct{}
	mu      sync.Mutex
}

func (b *blockGetter) startedCh() chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *blockGetter) waitStarted(t *testing.T) {
	select {
	case <-b.startedCh():
	case <-time.After(30 * time.Second):
		t.Fatal("GET never started")
	}
}

func (b *blockGetter) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	ch := b.startedCh()
	b.started.Do(func() { close(ch) })
	select {
	case <-b.block:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return b.inner.GetRange(ctx, key, off, buf, ifMatch)
}

// TestInvalidate drops cached bytes: the next read fetches again.
func TestInvalidate(t *testing.T) {
	mem := objtest.NewMem()
	f := memFile(t, mem, "i/x.bin", randBytes(10, 1000))
	g := newCountGetter(mem, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	r := m.Open(f)
	readAt(t, r, 0, 10)
	r.Close()
	m.Invalidate(f.Key)
	if st := m.Stats(); st.InUse != 0 || st.Cached != 0 {
		t.Errorf("after Invalidate: in use %d, cached %d", st.InUse, st.Cached)
	}
	data2 := randBytes(11, 2000)
	f2 := memFile(t, mem, "i/x.bin", data2)
	r = m.Open(f2)
	defer r.Close()
	if got := readAt(t, r, 0, 2000); !bytes.Equal(got, data2) {
		t.Error("read after overwrite+Invalidate returned old bytes")
	}
	if n := g.calls.Load(); n != 2 {
		t.Errorf("GETs = %d, want 2", n)
	}
}

// TestNoGoroutineLeak: after Reader.Close and Manager.Close nothing of the
// package runs.
func TestNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	mem := objtest.NewMem()
	data := randBytes(12, int(30*mib))
	f := memFile(t, mem, "l/x.bin", data)
	var files []File
	for i := 0; i < 40; i++ {
		files = append(files, memFile(t, mem, "l/d/"+string(rune('a'+i%26))+string(rune('a'+i/26)), randBytes(uint64(i), 5000)))
	}
	g := newCountGetter(mem, time.Millisecond)
	m, err := New(Options{Getter: g, MaxMemory: 64 * mib, EpochIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m.NoteDir("l/d/", files)
	for i := 0; i < 4; i++ {
		r := m.Open(f)
		readAt(t, r, int64(i)*mib, int(2*mib)) // read-ahead left in flight
		r.Close()
	}
	for _, ff := range files[:10] { // starts the pre-reader
		r := m.Open(ff)
		readAt(t, r, 0, 5000)
		r.Close()
	}
	m.Close()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
	if st := m.Stats(); st.InUse != 0 {
		t.Errorf("in use after Close = %d", st.InUse)
	}
}
