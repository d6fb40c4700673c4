package prefetch

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
)

// Int sizes for Alloc.
const (
	imib = int(mib)
	ikib = int(kib)
)

func newMmap(t *testing.T, o MmapOptions) *MmapAllocator {
	t.Helper()
	a, err := NewMmapAllocator(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func TestMmapOptionsValidation(t *testing.T) {
	for _, o := range []MmapOptions{{MaxIdle: -2}, {MinSize: -1}, {MinSize: 1}} {
		if _, err := NewMmapAllocator(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
}

// TestMmapAllocatorReuseAndRelease: freed buffers are kept up to MaxIdle
// and reused by class; beyond it they are unmapped at once; a reused
// buffer's pages past the new length are dropped; Close unmaps the idle
// ones.
func TestMmapAllocatorReuseAndRelease(t *testing.T) {
	if !mmapSupported {
		t.Skip("no mmap on " + runtime.GOOS)
	}
	a := newMmap(t, MmapOptions{MaxIdle: 3 * mib})
	b1 := a.Alloc(2 * imib)
	b2 := a.Alloc(2 * imib)
	if len(b1) != 2*imib || len(b2) != 2*imib {
		t.Fatalf("lengths %d, %d", len(b1), len(b2))
	}
	for i := range b1 {
		b1[i], b2[i] = 1, 2
	}
	if st := a.Stats(); st.Maps != 2 || st.Mapped != 4*mib || st.Out != 4*mib {
		t.Fatalf("after 2 allocs: %+v", st)
	}
	a.Free(b1) // kept: 2 MiB idle <= 3 MiB
	a.Free(b2) // would make 4 MiB idle: unmapped
	if st := a.Stats(); st.Unmaps != 1 || st.Idle != 2*mib || st.Mapped != 2*mib || st.Out != 0 {
		t.Fatalf("after frees: %+v", st)
	}
	// 1.5 MiB is in the 2 MiB class: reuses b1's mapping, dropping its
	// last half MiB of pages.
	b3 := a.Alloc(3 * imib / 2)
	if st := a.Stats(); st.Reuses != 1 || st.Trims != 1 || st.Maps != 2 || st.Idle != 0 {
		t.Fatalf("after reuse: %+v", st)
	}
	if len(b3) != 3*imib/2 || b3[0] != 1 || b3[len(b3)-1] != 1 {
		t.Fatalf("reused buffer: len %d, bytes %d..%d, want b1's bytes", len(b3), b3[0], b3[len(b3)-1])
	}
	if tail := b3[:cap(b3)]; len(tail) != len(b3) {
		t.Fatalf("cap %d, want %d", cap(b3), len(b3))
	}
	a.Free(b3)
	a.Close()
	if st := a.Stats(); st.Mapped != 0 || st.Idle != 0 {
		t.Fatalf("after Close: %+v", st)
	}
	b4 := a.Alloc(imib)
	a.Free(b4) // closed: unmapped at once
	if st := a.Stats(); st.Mapped != 0 || st.Out != 0 {
		t.Fatalf("free after Close: %+v", st)
	}
}

// TestMmapAllocatorSmallAndForeign: requests under MinSize come from the
// heap; freeing a slice it did not hand out, or twice, panics rather than
// unmapping foreign memory.
func TestMmapAllocatorSmallAndForeign(t *testing.T) {
	a := newMmap(t, MmapOptions{MaxIdle: -1})
	s := a.Alloc(100)
	if len(s) != 100 || a.Stats().Maps != 0 || a.Stats().Out != 100 {
		t.Fatalf("small alloc: len %d, %+v", len(s), a.Stats())
	}
	a.Free(s)
	if got := len(a.Alloc(0)); got != 0 {
		t.Fatalf("Alloc(0) len %d", got)
	}
	b := a.Alloc(256 * ikib)
	a.Free(b)
	if st := a.Stats(); mmapSupported && (st.Maps != 1 || st.Unmaps != 1 || st.Mapped != 0 || st.Out != 0) {
		t.Fatalf("MaxIdle -1: %+v", st)
	}
	mustPanic := func(name string, b []byte) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		a.Free(b)
	}
	mustPanic("double free", b)
	mustPanic("foreign", make([]byte, 256*ikib))
}

// TestViewBufferOutlivesDrop: a buffer passed to a View callback stays
// mapped and intact while the callback runs, even when its extent is
// invalidated and the Manager closed meanwhile; it is freed (unmapped,
// the allocator being closed) when the callback returns.
func TestViewBufferOutlivesDrop(t *testing.T) {
	const size = 4 * mib
	m, err := New(Options{Getter: wordGetter{size: size}, MaxMemory: 16 * mib, PartSize: 4 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a := m.ownAlloc
	if a == nil {
		t.Fatal("default Manager has no own MmapAllocator")
	}
	r := m.Open(File{Key: "v", Size: size, ETag: "w"})
	defer r.Close()
	want := make([]byte, size)
	if _, err := (wordGetter{size: size}).GetRange(context.Background(), "v", 0, want, ""); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err = r.View(context.Background(), 2*mib, mib, func(at int64, b []byte) error {
		calls++
		out := a.Stats().Out
		m.Invalidate("v")
		m.Close()
		if st := a.Stats(); st.Out != out {
			t.Errorf("buffer freed while in a View callback: out %d -> %d", out, st.Out)
		}
		if !bytes.Equal(b, want[at:at+int64(len(b))]) {
			t.Error("bytes changed while in a View callback")
		}
		return nil
	})
	if err != nil || calls == 0 {
		t.Fatalf("View: %v, %d calls", err, calls)
	}
	if st := a.Stats(); st.Out != 0 || (mmapSupported && st.Mapped != 0) {
		t.Errorf("after View and Close: %+v, want nothing out or mapped", st)
	}
}
