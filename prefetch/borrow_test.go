package prefetch

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/os2g/os2g/objclient/objtest"
)

// Borrow lends the cache's buffer when the range lies in one extent, keeps
// it out of eviction until release, copies into p when the range spans
// extents, and returns nothing past the end.
func TestBorrow(t *testing.T) {
	ctx := context.Background()
	mem := objtest.NewMem()
	data := randBytes(11, 20*int(mib)+12345)
	f := memFile(t, mem, "big.bin", data)
	g := newCountGetter(mem, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	r := m.Open(f)
	defer r.Close()

	// The first read is one extent (the initial window).
	p := make([]byte, 128<<10)
	b, release, err := r.Borrow(ctx, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, data[:len(p)]) {
		t.Fatal("borrowed bytes at 0 differ")
	}
	if &b[0] == &p[0] {
		t.Error("a range inside one extent was copied into p, want the cache's buffer")
	}
	if refs := extentRefs(m, f.Key, 0); refs == 0 {
		t.Error("no extent referenced while a buffer is borrowed")
	}
	release()
	if refs := extentRefs(m, f.Key, 0); refs != 0 {
		t.Errorf("%d extent references left after release, want 0", refs)
	}

	// Read on until a read crosses an extent boundary: those come back
	// as p, filled with the right bytes.
	copied := 0
	for off := int64(len(p)); off < f.Size; off += int64(len(p)) / 2 {
		b, release, err := r.Borrow(ctx, p, off)
		if err != nil {
			t.Fatal(err)
		}
		end := min(off+int64(len(p)), f.Size)
		if !bytes.Equal(b, data[off:end]) {
			t.Fatalf("Borrow at %d: %d bytes differ from the object", off, len(b))
		}
		if len(b) > 0 && &b[0] == &p[0] {
			copied++
		}
		release()
	}
	if copied == 0 {
		t.Error("no read crossed an extent boundary; the test did not cover the copy path")
	}

	b, release, err = r.Borrow(ctx, p, f.Size)
	if err != nil || len(b) != 0 {
		t.Errorf("Borrow at EOF = %d bytes, %v; want 0, nil", len(b), err)
	}
	release()

	r.Close()
	_, release, err = r.Borrow(ctx, p, 0)
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Borrow after Close: %v, want ErrClosed", err)
	}
	release()
}

// extentRefs sums the references on key's extents holding byte x.
func extentRefs(m *Manager, key string, x int64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	refs := 0
	for _, fs := range m.files[key] {
		for _, part := range fs.parts {
			for _, e := range part {
				if e.off <= x && x < e.end {
					refs += e.refs
				}
			}
		}
	}
	return refs
}
