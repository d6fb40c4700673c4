package prefetch

import (
	"context"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

// patternGetter serves any object as a repeating 1 MiB pattern, fast, after
// a fixed first-byte latency per GET (a stand-in for a remote store).
type patternGetter struct {
	pat     []byte
	latency time.Duration
}

func (p *patternGetter) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
	n := 0
	for n < len(buf) {
		i := (off + int64(n)) % int64(len(p.pat))
		n += copy(buf[n:], p.pat[i:])
	}
	return n, nil
}

// BenchmarkSequentialRead reads a 1 GiB object in 1 MiB reads against a
// store with 5 ms first-byte latency per GET.
func BenchmarkSequentialRead(b *testing.B) {
	g := &patternGetter{pat: randBytes(1, int(mib)), latency: 5 * time.Millisecond}
	const size = 1 * gib
	b.SetBytes(size)
	buf := make([]byte, 1*mib)
	for b.Loop() {
		m, err := New(Options{Getter: g, MaxMemory: 1 * gib})
		if err != nil {
			b.Fatal(err)
		}
		r := m.Open(File{Key: "big", Size: size, ETag: "x"})
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := r.ReadAt(context.Background(), buf, off); err != nil {
				b.Fatal(err)
			}
		}
		r.Close()
		st := m.Stats()
		m.Close()
		b.ReportMetric(float64(st.Requests), "GETs/op")
	}
}

// BenchmarkEpoch reads a directory of 500 files of 16 KiB once, shuffled,
// with 8 workers, against a store with 2 ms latency per GET, from a cold
// cache; with and without epoch pre-reading. It reports files/s.
func BenchmarkEpoch(b *testing.B) {
	mem := objtest.NewMem()
	files, data := epochDir(b, mem, "train/c/", 500, 16<<10)
	for _, c := range []struct {
		name    string
		trigger int
		conc    int
	}{{"preread", 0, 0}, {"preread-conc64", 0, 64}, {"nopreread", -1, 0}} {
		b.Run(c.name, func(b *testing.B) {
			g := newCountGetter(mem, 2*time.Millisecond)
			var elapsed time.Duration
			var hits int64
			seed := uint64(0)
			for b.Loop() {
				m, err := New(Options{Getter: g, MaxMemory: 256 * mib, EpochTrigger: c.trigger, EpochConcurrency: c.conc})
				if err != nil {
					b.Fatal(err)
				}
				m.NoteDir("train/c/", files)
				seed++
				start := time.Now()
				readEpoch(b, m, files, data, 8, len(files), seed)
				elapsed += time.Since(start)
				hits += m.Stats().EpochHitOpens
				m.Close()
			}
			b.ReportMetric(float64(b.N*len(files))/elapsed.Seconds(), "files/s")
			b.ReportMetric(float64(hits)/float64(b.N*len(files)), "prereadhit/open")
		})
	}
}
