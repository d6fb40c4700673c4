package prefetch

import (
	"context"
	"testing"
)

// FuzzSpans checks the invariants of the range/block arithmetic: a demand
// span holds the byte asked for, stays in its gap, its part and the object;
// a read-ahead span starts where asked and obeys the same bounds.
func FuzzSpans(f *testing.F) {
	f.Add(int64(6442450944), int64(4294967292), int64(16), uint8(23), uint8(16), int64(0), int64(1<<20), uint8(0))
	f.Add(int64(536870912), int64(536870904), int64(8), uint8(23), uint8(16), int64(0), int64(0), uint8(1))
	f.Add(int64(1000), int64(999), int64(5000), uint8(20), uint8(10), int64(10), int64(100), uint8(2))
	f.Fuzz(func(t *testing.T, size, cur, n int64, partExp, granExp uint8, a, b int64, mode uint8) {
		if size <= 0 || size > 1<<50 || cur < 0 || n <= 0 {
			return
		}
		cur %= size
		end := min(size, cur+n)
		partSize := int64(1) << (10 + partExp%20)
		gran := int64(1) << (granExp % 30)
		gran = min(gran, partSize)
		g := geometry{size: size, partSize: partSize, gran: gran}
		// A gap around cur inside its part, shaped by a and b.
		ps := alignDown(cur, partSize)
		gapStart := ps + abs64(a)%(cur-ps+1)
		gapEnd := min(cur+1+abs64(b)%partSize, ps+partSize)
		piece := 1 + abs64(a^b)%partSize
		m := readMode(mode % 3)
		sp := g.demandSpan(m, cur, end, piece, gapStart, gapEnd)
		if sp.off > cur || sp.end <= cur {
			t.Fatalf("demandSpan %v does not hold cur %d", sp, cur)
		}
		if sp.off < gapStart || sp.end > gapEnd || sp.end > size || sp.off < 0 {
			t.Fatalf("demandSpan %v outside gap [%d,%d) or object %d", sp, gapStart, gapEnd, size)
		}
		if partOf(sp.off, partSize) != partOf(sp.end-1, partSize) {
			t.Fatalf("demandSpan %v crosses a part boundary (part %d)", sp, partSize)
		}
		if m == modeRandom && sp.end < min(end, gapEnd, partEnd(cur, partSize)) {
			t.Fatalf("random demandSpan %v ends before the request %d", sp, end)
		}
		as := g.aheadSpan(cur, piece, gapEnd)
		if as.off != cur || as.end <= cur || as.end > gapEnd || as.end > size || as.len() > piece ||
			partOf(as.off, partSize) != partOf(as.end-1, partSize) {
			t.Fatalf("aheadSpan(%d, %d, %d) = %v", cur, piece, gapEnd, as)
		}
	})
}

func abs64(x int64) int64 {
	if x < 0 {
		if x == -x { // MinInt64
			return 0
		}
		return -x
	}
	return x
}

// FuzzReadAt reads arbitrary ranges of a synthetic object through a
// Manager with small parts and compares every byte.
func FuzzReadAt(f *testing.F) {
	f.Add(int64(5<<20+3), int64(0), uint32(1<<20), int64(4<<20), uint32(100))
	f.Add(int64(1<<33), int64(1<<32-4), uint32(16), int64(1<<32-8), uint32(8))
	m, err := New(Options{Getter: wordGetter{size: 1 << 40}, MaxMemory: 4 << 20, PartSize: 256 << 10,
		InitialWindow: 64 << 10, SmallFileSize: 4 << 10, RandomGranularity: 4 << 10})
	if err != nil {
		f.Fatal(err)
	}
	defer m.Close()
	f.Fuzz(func(t *testing.T, size, off1 int64, n1 uint32, off2 int64, n2 uint32) {
		if size <= 0 || size > 1<<40 {
			return
		}
		r := m.Open(File{Key: "f", Size: size, ETag: "w"})
		defer r.Close()
		for _, rd := range []struct {
			off int64
			n   uint32
		}{{off1, n1}, {off2, n2}, {off1 + int64(n1), n2}} {
			if rd.off < 0 {
				continue
			}
			p := make([]byte, rd.n%(3<<20))
			got, err := r.ReadAt(context.Background(), p, rd.off)
			if err != nil {
				t.Fatalf("ReadAt(%d, %d): %v", rd.off, len(p), err)
			}
			want := 0
			if rd.off < size {
				want = int(min(int64(len(p)), size-rd.off))
			}
			if got != want {
				t.Fatalf("ReadAt(%d, %d) on %d = %d, want %d", rd.off, len(p), size, got, want)
			}
			for i := 0; i < got; i++ {
				if p[i] != wordByte(rd.off+int64(i)) {
					t.Fatalf("byte %d of ReadAt(%d) wrong", i, rd.off)
				}
			}
		}
	})
}
