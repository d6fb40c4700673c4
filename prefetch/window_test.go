package prefetch

import (
	"testing"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

func TestNextWindow(t *testing.T) {
	for _, c := range []struct{ w, max, want int64 }{
		{1 * mib, 256 * mib, 2 * mib},
		{64 * mib, 256 * mib, 128 * mib},
		{128 * mib, 256 * mib, 256 * mib},
		{200 * mib, 256 * mib, 256 * mib},
		{256 * mib, 256 * mib, 256 * mib},
		{3 * mib, 5 * mib, 5 * mib},
	} {
		if got := nextWindow(c.w, c.max); got != c.want {
			t.Errorf("nextWindow(%d, %d) = %d, want %d", c.w, c.max, got, c.want)
		}
	}
}

func TestDemandSpan(t *testing.T) {
	g := geometry{size: 512 * mib, partSize: 8 * mib, gran: 64 * kib}
	part := 8 * mib
	for _, c := range []struct {
		name             string
		g                geometry
		mode             readMode
		cur, end, piece  int64
		gapStart, gapEnd int64
		want             span
	}{
		{"tail 8 bytes", g, modeRandom, g.size - 8, g.size, 0, g.size - part, g.size, span{g.size - 64*kib, g.size}},
		{"parquet footer after tail", g, modeRandom, 536805368, 536805368 + 65536, 0, g.size - part, g.size - 64*kib,
			span{536805368 - 536805368%(64*kib), g.size - 64*kib}},
		{"random 4k mid", g, modeRandom, 100*mib + 5000, 100*mib + 5000 + 4096, 0, 96 * mib, 104 * mib, span{100 * mib, 100*mib + 64*kib}},
		{"random across part clipped", g, modeRandom, 8*mib - 100, 8*mib + 100, 0, 0, 8 * mib, span{8*mib - 64*kib, 8 * mib}},
		{"random clipped to gap", g, modeRandom, 1000, 2000, 0, 512, 30000, span{512, 30000}},
		{"seq first piece", g, modeSeq, 0, 128 * kib, 1 * mib, 0, 8 * mib, span{0, 1 * mib}},
		{"seq piece clipped to part", g, modeSeq, 7 * mib, 7*mib + 128*kib, 4 * mib, 0, 8 * mib, span{7 * mib, 8 * mib}},
		{"seq covers request", g, modeSeq, 3 * mib, 5 * mib, 1 * mib, 0, 8 * mib, span{3 * mib, 5 * mib}},
		{"whole small", geometry{size: 1000, partSize: 8 * mib, gran: 64 * kib}, modeWhole, 500, 600, 0, 0, 8 * mib, span{0, 1000}},
		{"whole gap", geometry{size: 1000, partSize: 8 * mib, gran: 64 * kib}, modeWhole, 500, 600, 0, 400, 8 * mib, span{400, 1000}},
		{"past 4 GiB", geometry{size: 6 * gib, partSize: 8 * mib, gran: 64 * kib}, modeRandom, 4*gib - 4, 4*gib + 12, 0, 4*gib - 8*mib, 4 * gib,
			span{4*gib - 64*kib, 4 * gib}},
	} {
		got := c.g.demandSpan(c.mode, c.cur, c.end, c.piece, c.gapStart, c.gapEnd)
		if got != c.want {
			t.Errorf("%s: demandSpan = [%d, %d), want [%d, %d)", c.name, got.off, got.end, c.want.off, c.want.end)
		}
	}
}

func TestAheadSpan(t *testing.T) {
	g := geometry{size: 20 * mib, partSize: 8 * mib, gran: 64 * kib}
	for _, c := range []struct {
		x, piece, gapEnd int64
		want             span
	}{
		{0, 1 * mib, 8 * mib, span{0, 1 * mib}},
		{1 * mib, 2 * mib, 8 * mib, span{1 * mib, 3 * mib}},
		{7 * mib, 4 * mib, 8 * mib, span{7 * mib, 8 * mib}},
		{8 * mib, 8 * mib, 16 * mib, span{8 * mib, 16 * mib}},
		{16 * mib, 8 * mib, 24 * mib, span{16 * mib, 20 * mib}},
		{9 * mib, 8 * mib, 10 * mib, span{9 * mib, 10 * mib}},
	} {
		if got := g.aheadSpan(c.x, c.piece, c.gapEnd); got != c.want {
			t.Errorf("aheadSpan(%d, %d, %d) = %v, want %v", c.x, c.piece, c.gapEnd, got, c.want)
		}
	}
}

func testPolicy() windowPolicy {
	return windowPolicy{initial: 1 * mib, max: 256 * mib, back: 256 * kib, forward: 512 * kib, streams: 4, promote: 64 * kib}
}

func TestStreamGrowth(t *testing.T) {
	ss := streamSet{pol: testPolicy()}
	// A sequential reader of 128 KiB reads: the window doubles each time half
	// of it has been consumed, from 1 MiB to the cap.
	type step struct{ at, window int64 }
	var got []step
	last := int64(0)
	for off := int64(0); off < 600*mib; off += 128 * kib {
		s := ss.observe(off, off+128*kib)
		if s.window != last {
			got = append(got, step{off + 128*kib, s.window})
			last = s.window
		}
	}
	want := []step{
		{128 * kib, 1 * mib}, {512 * kib, 2 * mib}, {1536 * kib, 4 * mib}, {3584 * kib, 8 * mib},
		{7680 * kib, 16 * mib}, {15872 * kib, 32 * mib}, {32256 * kib, 64 * mib}, {65024 * kib, 128 * mib},
		{130560 * kib, 256 * mib},
	}
	if len(got) != len(want) {
		t.Fatalf("growth steps = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: at %d window %d, want at %d window %d", i, got[i].at, got[i].window, want[i].at, want[i].window)
		}
	}
	if len(ss.s) != 1 {
		t.Errorf("streams = %d, want 1", len(ss.s))
	}
}

func TestStreamDetection(t *testing.T) {
	type rd struct {
		off, n      int64
		wantStream  int  // index into ss.s after the read
		wantSeq     bool // stream sequential after the read
		wantStreams int
	}
	for _, c := range []struct {
		name  string
		reads []rd
	}{
		{"kernel out of order", []rd{
			{0, 128 * kib, 0, true, 1},
			{256 * kib, 128 * kib, 0, true, 1},
			{128 * kib, 128 * kib, 0, true, 1},
			{640 * kib, 128 * kib, 0, true, 1},
			{512 * kib, 128 * kib, 0, true, 1},
			{1 * mib, 128 * kib, 0, true, 1},
		}},
		{"tail reads stay random", []rd{
			{512*mib - 8, 8, 0, false, 1},
			{512*mib - 65544, 65536, 0, false, 1}, // behind the cursor: same stream, no progress, still random
			{512*mib - 4*mib, 4 * mib, 1, false, 2},
		}},
		{"zip eocd then far member", []rd{
			{2*gib - 22, 22, 0, false, 1},
			{100 * mib, 30, 1, false, 2},
			{900 * mib, 4096, 2, false, 3},
		}},
		{"interleaved cursors", []rd{
			{0, 1 * mib, 0, true, 1},
			{512 * mib, 1 * mib, 1, false, 2},
			{1 * mib, 1 * mib, 0, true, 2},
			{513 * mib, 1 * mib, 1, true, 2},
			{2 * mib, 1 * mib, 0, true, 2},
			{514 * mib, 1 * mib, 1, true, 2},
		}},
		{"tiny forward steps stay random", []rd{
			{4294967288, 8, 0, false, 1},
			{4294967292, 16, 0, false, 1},
			{4294967308, 100, 0, false, 1},
			{4294967408, 64 * kib, 0, true, 1},
		}},
		{"far forward jump is a new stream", []rd{
			{0, 128 * kib, 0, true, 1},
			{128*kib + 600*kib, 128 * kib, 1, false, 2},
		}},
		{"replacement of the oldest", []rd{
			{10 * mib, 1, 0, false, 1},
			{20 * mib, 1, 1, false, 2},
			{30 * mib, 1, 2, false, 3},
			{40 * mib, 1, 3, false, 4},
			{50 * mib, 1, 0, false, 4},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ss := streamSet{pol: testPolicy()}
			for i, r := range c.reads {
				s := ss.observe(r.off, r.off+r.n)
				idx := -1
				for j := range ss.s {
					if &ss.s[j] == s {
						idx = j
					}
				}
				if idx != r.wantStream || (s.window > 0) != r.wantSeq || len(ss.s) != r.wantStreams {
					t.Errorf("read %d [%d,+%d): stream %d seq %v streams %d, want %d %v %d",
						i, r.off, r.n, idx, s.window > 0, len(ss.s), r.wantStream, r.wantSeq, r.wantStreams)
				}
			}
		})
	}
}
