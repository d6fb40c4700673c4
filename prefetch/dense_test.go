package prefetch

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

// Sustained random reads of a file that fits in half the budget fetch it
// whole in part-sized read-ahead GETs; after that random reads make no
// GET, and the bytes fetched stay near the file's size.
func TestDenseRandomFetchesWholeFile(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(5, 24*int(mib)+777)
	f := memFile(t, mem, "index.lmdb", data)
	g := newCountGetter(mem, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib, PartSize: 4 * mib})
	r := m.Open(f)
	defer r.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	read := func() {
		off := rng.Int64N(f.Size - 4096)
		if got := readAt(t, r, off, 4096); !bytes.Equal(got, data[off:off+4096]) {
			t.Fatalf("random read at %d differs", off)
		}
	}
	for range denseRandomReads - 1 {
		read()
	}
	r.mu.Lock()
	early := r.denseNext
	r.mu.Unlock()
	if early != 0 {
		t.Fatalf("whole-file fetch issued up to %d after %d random reads, want none before the threshold", early, denseRandomReads-1)
	}
	// Each further read resumes the whole-file fetch until it is issued.
	deadline := time.Now().Add(10 * time.Second)
	for {
		read()
		r.mu.Lock()
		done := r.denseNext >= f.Size
		r.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the whole-file fetch was never completely issued")
		}
		time.Sleep(time.Millisecond)
	}
	// Wait for the fetches in flight, then random reads need no GET.
	waitIdle(t, m)
	calls := g.calls.Load()
	for range 200 {
		read()
	}
	if n := g.calls.Load() - calls; n != 0 {
		t.Errorf("%d GETs for 200 random reads of a file fetched whole, want 0", n)
	}
	if st := m.Stats(); st.BytesFetched > f.Size+4*mib {
		t.Errorf("fetched %d bytes for a %d-byte file, want at most its size plus the first reads' granules", st.BytesFetched, f.Size)
	}
}

// A file bigger than half the budget keeps right-sized random ranges.
func TestDenseRandomNotForBigFiles(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(6, 40*int(mib))
	f := memFile(t, mem, "big.h5", data)
	g := newCountGetter(mem, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib, PartSize: 4 * mib})
	r := m.Open(f)
	defer r.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	const reads = 100
	for range reads {
		off := rng.Int64N(f.Size - 4096)
		if got := readAt(t, r, off, 4096); !bytes.Equal(got, data[off:off+4096]) {
			t.Fatalf("random read at %d differs", off)
		}
	}
	r.mu.Lock()
	next := r.denseNext
	r.mu.Unlock()
	// (Reads that happen to land just ahead of earlier ones start small
	// read-ahead windows; that is the stream detector, not this.)
	if st := m.Stats(); next != 0 || st.BytesFetched > f.Size/2 {
		t.Errorf("whole-file fetch issued up to %d, %d bytes fetched for %d random 4 KiB reads of a %d-byte file over half the budget; want 0 and under half the file",
			next, st.BytesFetched, reads, f.Size)
	}
}

// waitIdle waits until no GET of m is in flight.
func waitIdle(t *testing.T, m *Manager) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		busy := false
		for _, byEtag := range m.files {
			for _, fs := range byEtag {
				for _, part := range fs.parts {
					for _, e := range part {
						select {
						case <-e.done:
						default:
							busy = true
						}
					}
				}
			}
		}
		m.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("GETs still in flight after 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A sequential reader whose reads cross extent boundaries is planned once
// per read: it never looks random, so it never starts a whole-file fetch.
func TestBorrowSequentialStaysSequential(t *testing.T) {
	mem := objtest.NewMem()
	data := randBytes(8, 48*int(mib))
	f := memFile(t, mem, "seq.bin", data)
	m := newTestManager(t, Options{Getter: newCountGetter(mem, 0), MaxMemory: 128 * mib, PartSize: 4 * mib})
	r := m.Open(f)
	defer r.Close()
	p := make([]byte, 1*mib)
	for off := int64(512 * kib); off < f.Size; off += int64(len(p)) {
		b, release, err := r.Borrow(context.Background(), p, off)
		if err != nil {
			t.Fatal(err)
		}
		end := min(off+int64(len(p)), f.Size)
		if !bytes.Equal(b, data[off:end]) {
			t.Fatalf("bytes at %d differ", off)
		}
		release()
	}
	r.mu.Lock()
	random, next := r.randomReads, r.denseNext
	r.mu.Unlock()
	if random > 1 || next != 0 {
		t.Errorf("sequential 1 MiB reads: %d counted random, whole-file fetch issued to %d; want at most 1 (the first) and 0", random, next)
	}
}

// Only one file is fetched whole at a time: while another Reader owns the
// whole-file fetch, a second file keeps right-sized random reads; once the
// owner closes, the second file's fetch starts.
func TestDenseOneFileAtATime(t *testing.T) {
	mem := objtest.NewMem()
	da := randBytes(9, 20*int(mib))
	db := randBytes(10, 20*int(mib))
	fa := memFile(t, mem, "a.lmdb", da)
	fb := memFile(t, mem, "b.lmdb", db)
	m := newTestManager(t, Options{Getter: newCountGetter(mem, 0), MaxMemory: 64 * mib, PartSize: 1 * mib})
	ra, rb := m.Open(fa), m.Open(fb)
	defer rb.Close()
	m.mu.Lock()
	m.denseOwner = ra // a's whole-file fetch is under way
	m.mu.Unlock()
	rng := rand.New(rand.NewPCG(5, 6))
	for range denseRandomReads + 4 {
		off := rng.Int64N(fb.Size - 4096)
		if got := readAt(t, rb, off, 4096); !bytes.Equal(got, db[off:off+4096]) {
			t.Fatal("b: bytes differ")
		}
	}
	rb.mu.Lock()
	bn := rb.denseNext
	rb.mu.Unlock()
	if bn != 0 {
		t.Errorf("b's whole-file fetch issued to %d while a owns the fetch, want 0", bn)
	}
	ra.Close()
	m.mu.Lock()
	owner := m.denseOwner
	m.mu.Unlock()
	if owner != nil {
		t.Error("the closed Reader still owns the whole-file fetch")
	}
	off := rng.Int64N(fb.Size - 4096)
	readAt(t, rb, off, 4096)
	rb.mu.Lock()
	bn = rb.denseNext
	rb.mu.Unlock()
	if bn == 0 {
		t.Error("b's whole-file fetch did not start once a's Reader closed")
	}
}
