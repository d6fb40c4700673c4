package prefetch

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/os2g/os2g/objclient/objtest"
)

// TestMetrics: the registered metrics read the same counters as Stats;
// Close unregisters them, so a new Manager can register again.
func TestMetrics(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(20, 5000)
	f := memFile(t, mem, "m/x", data)
	reg := prometheus.NewRegistry()
	m, err := New(Options{Getter: mem, MaxMemory: 64 * mib, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Getter: mem, MaxMemory: 64 * mib, Registerer: reg}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("second registration: %v, want an error", err)
	}
	r := m.Open(f)
	readAt(t, r, 0, 5000)
	readAt(t, r, 10, 10)
	r.Close()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	series := map[string]int{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			series[mf.GetName()]++
			if c := mt.GetCounter(); c != nil {
				got[mf.GetName()] += c.GetValue()
			}
			if g := mt.GetGauge(); g != nil {
				got[mf.GetName()] += g.GetValue()
			}
		}
	}
	st := m.Stats()
	for name, want := range map[string]float64{
		"os2g_prefetch_fetched_bytes_total":   5000,
		"os2g_prefetch_read_bytes_total":      5010,
		"os2g_prefetch_cache_hits_total":      float64(st.Hits),
		"os2g_prefetch_cache_misses_total":    1,
		"os2g_prefetch_requests_total":        1,
		"os2g_prefetch_budget_in_use_bytes":   5000,
		"os2g_prefetch_budget_max_bytes":      float64(64 * mib),
		"os2g_prefetch_epoch_hit_opens_total": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if series["os2g_prefetch_requests_total"] != 3 {
		t.Errorf("requests_total series = %d, want 3 (one per origin)", series["os2g_prefetch_requests_total"])
	}
	m.Close()
	m2, err := New(Options{Getter: mem, MaxMemory: 64 * mib, Registerer: reg})
	if err != nil {
		t.Fatalf("register after Close: %v", err)
	}
	m2.Close()
}

// TestDemandEvictsHeld: with the whole budget held by pre-read files, a
// reader's own read still proceeds.
func TestDemandEvictsHeld(t *testing.T) {
	mem := objtest.NewMem()
	files, data := epochDir(t, mem, "h/", 200, 64<<10)
	big := randBytes(21, int(3*mib))
	fb := memFile(t, mem, "other/big", big)
	m := newTestManager(t, Options{Getter: mem, MaxMemory: 2 * mib, PartSize: 1 * mib, EpochMemory: 2 * mib, EpochIdle: time.Hour})
	m.NoteDir("h/", files)
	readEpoch(t, m, files, data, 2, 20, 5)
	// Wait for the pre-reader to fill its share (it stops at the budget).
	deadline := time.Now().Add(60 * time.Second)
	for m.Stats().EpochHeld < 2*mib-64<<10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if h := m.Stats().EpochHeld; h < mib {
		t.Fatalf("pre-read held %d bytes, want the budget nearly full", h)
	}
	r := m.Open(fb)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := make([]byte, len(big))
	n, err := r.ReadAt(ctx, p, 0)
	if err != nil || n != len(big) || !bytes.Equal(p, big) {
		t.Fatalf("demand read with a full budget: %d, %v", n, err)
	}
	if st := m.Stats(); st.Peak > 2*mib {
		t.Errorf("peak %d > budget", st.Peak)
	}
}

// TestCloseDuringReads: closing a Reader while goroutines read it ends
// their reads with ErrClosed or success, never a hang or a race.
func TestCloseDuringReads(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(22, int(16*mib))
	f := memFile(t, mem, "cl/x", data)
	g := newCountGetter(mem, time.Millisecond)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 32 * mib, PartSize: 1 * mib})
	other := m.Open(f) // shares the cache; must survive the other's Close
	defer other.Close()
	r := m.Open(f)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 300*kib)
			for off := int64(w) * mib; off < f.Size; off += int64(len(p)) {
				n, err := r.ReadAt(context.Background(), p, off)
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("read: %v", err)
					}
					return
				}
				if !bytes.Equal(p[:n], data[off:off+int64(n)]) {
					t.Errorf("bytes differ at %d", off)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := make([]byte, 256*kib)
		for off := int64(0); off < f.Size; off += int64(len(p)) {
			n, err := other.ReadAt(context.Background(), p, off)
			if err != nil || !bytes.Equal(p[:n], data[off:off+int64(n)]) {
				t.Errorf("other reader at %d: %v", off, err)
				return
			}
		}
	}()
	time.Sleep(3 * time.Millisecond) // not a synchronisation: only lets reads start
	r.Close()
	wg.Wait()
}

// failOnceGetter fails the first GET at every offset.
type failOnceGetter struct {
	inner Getter
	mu    sync.Mutex // guards seen
	seen  map[int64]bool
}

func (f *failOnceGetter) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	f.mu.Lock()
	first := !f.seen[off]
	f.seen[off] = true
	f.mu.Unlock()
	if first {
		return 0, errors.New("injected failure")
	}
	return f.inner.GetRange(ctx, key, off, buf, ifMatch)
}

// TestAheadFailureRetried: a demand read that finds a failed read-ahead
// retries with its own GET instead of failing.
func TestAheadFailureRetried(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(23, int(20*mib))
	f := memFile(t, mem, "r/x", data)
	g := &failOnceGetter{inner: mem, seen: map[int64]bool{}}
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	r := m.Open(f)
	defer r.Close()
	if got := readAt(t, r, 0, 4096); !bytes.Equal(got, data[:4096]) {
		t.Fatal("wrong bytes")
	}
	if st := m.Stats(); st.FetchErrors == 0 || st.AheadRequests == 0 {
		t.Errorf("expected a failed read-ahead: %+v", st)
	}
}

// TestView: View hands out the cache's buffers in order, covering exactly
// the range, across part boundaries and past 4 GiB.
func TestView(t *testing.T) {
	size := int64(5 * gib)
	m := newTestManager(t, Options{Getter: wordGetter{size: size}, MaxMemory: 64 * mib, PartSize: 1 * mib})
	r := m.Open(File{Key: "v", Size: size, ETag: "w"})
	defer r.Close()
	off := int64(4*gib - 1500*kib)
	next := off
	chunks := 0
	n, err := r.View(context.Background(), off, 3*mib, func(at int64, b []byte) error {
		if at != next {
			t.Fatalf("chunk at %d, want %d", at, next)
		}
		for i := range b {
			if b[i] != wordByte(at+int64(i)) {
				t.Fatalf("byte at %d wrong", at+int64(i))
			}
		}
		next += int64(len(b))
		chunks++
		return nil
	})
	if err != nil || n != 3*mib || next != off+3*mib || chunks < 3 {
		t.Errorf("View = %d, %v; covered to %d in %d chunks", n, err, next, chunks)
	}
	stop := errors.New("stop")
	if _, err := r.View(context.Background(), size-10, 100, func(int64, []byte) error { return stop }); err != stop {
		t.Errorf("fn error = %v, want it returned as is", err)
	}
	if n, err := r.View(context.Background(), size-10, 100, func(int64, []byte) error { return nil }); n != 10 || err != nil {
		t.Errorf("View at tail = %d, %v; want 10, nil", n, err)
	}
}

// TestManyHandlesRandom4K follows CASES C13(c) in small: 256 handles of one
// file doing random 4 KiB reads under a small budget; all succeed and the
// budget holds.
func TestManyHandlesRandom4K(t *testing.T) {
	size := int64(1 * gib)
	al := newTrackAlloc()
	const max = 4 * mib
	m := newTestManager(t, Options{Getter: wordGetter{size: size}, MaxMemory: max, PartSize: 1 * mib, Alloc: al})
	f := File{Key: "shards/s-0000.tar", Size: size, ETag: "w"}
	var wg sync.WaitGroup
	for w := 0; w < 256; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := m.Open(f)
			defer r.Close()
			p := make([]byte, 4096)
			x := uint64(w)*0x9e3779b97f4a7c15 + 1
			for i := 0; i < 20; i++ {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				off := int64(x % uint64(size-4096))
				n, err := r.ReadAt(context.Background(), p, off)
				if err != nil || n != 4096 || p[0] != wordByte(off) || p[4095] != wordByte(off+4095) {
					t.Errorf("read at %d: %d, %v", off, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := m.Stats()
	if st.Peak > max {
		t.Errorf("peak %d > budget %d", st.Peak, max)
	}
	if _, peak, bad := al.stats(); peak > max || bad != 0 {
		t.Errorf("allocator peak %d, bad frees %d", peak, bad)
	}
	// Each read fetches its 64 KiB granule (two when it straddles one).
	if st.BytesFetched > 256*20*2*64*kib {
		t.Errorf("fetched %d bytes for 5120 random 4 KiB reads, want <= 128 KiB each", st.BytesFetched)
	}
}
