package prefetch

// This file holds the pure arithmetic of the package: spans, part
// boundaries, the read-ahead window and the per-Reader stream table. Nothing
// here locks or does I/O, so it is table-tested and fuzzed directly.

// span is the half-open byte range [off, end).
type span struct{ off, end int64 }

func (s span) len() int64 { return s.end - s.off }

// alignDown rounds x (>= 0) down to a multiple of a (> 0).
func alignDown(x, a int64) int64 { return x - x%a }

// alignUp rounds x (>= 0) up to a multiple of a (> 0).
func alignUp(x, a int64) int64 {
	if r := x % a; r != 0 {
		return x + a - r
	}
	return x
}

// partOf is the index of the part holding byte x.
func partOf(x, partSize int64) int64 { return x / partSize }

// partEnd is the end of the part holding byte x.
func partEnd(x, partSize int64) int64 { return alignDown(x, partSize) + partSize }

// readMode says how a demand miss is sized.
type readMode int

const (
	modeRandom readMode = iota // the request rounded out to the granularity
	modeSeq                    // one read-ahead piece from the cursor
	modeWhole                  // the whole gap (small objects: the whole object)
)

// geometry is the fixed arithmetic of one object version.
type geometry struct {
	size, partSize, gran int64
}

// demandSpan sizes the fetch for a miss at cur of a request [cur, end),
// where [gapStart, gapEnd) is the hole of the cache around cur. piece is the
// sequential piece size (used by modeSeq). The result contains cur, lies in
// the gap, in cur's part and in [0, size).
//
// Preconditions: 0 <= gapStart <= cur < gapEnd, cur < end <= size.
func (g geometry) demandSpan(m readMode, cur, end, piece, gapStart, gapEnd int64) span {
	lo := gapStart
	hi := min(gapEnd, partEnd(cur, g.partSize), g.size)
	var a, b int64
	switch m {
	case modeWhole:
		a, b = lo, hi
	case modeSeq:
		a = max(lo, alignDown(cur, g.gran))
		b = min(hi, max(a+piece, alignUp(end, g.gran)))
	default:
		a = max(lo, alignDown(cur, g.gran))
		b = min(hi, alignUp(end, g.gran))
	}
	return span{a, b}
}

// aheadSpan is the next read-ahead piece starting at x (not cached), where
// the cache hole around x ends at gapEnd: at most piece bytes, clipped to
// the part and the object.
func (g geometry) aheadSpan(x, piece, gapEnd int64) span {
	return span{x, min(x+piece, gapEnd, partEnd(x, g.partSize), g.size)}
}

// nextWindow doubles w, capped at maxw.
func nextWindow(w, maxw int64) int64 {
	if w >= maxw/2 {
		return maxw
	}
	return 2 * w
}

// stream is one cursor of a Reader.
type stream struct {
	start  int64  // where the stream's first read began
	next   int64  // end of the furthest byte read
	window int64  // read-ahead window in bytes; 0: random (not yet sequential)
	growAt int64  // the window doubles when next reaches this
	raEnd  int64  // read-ahead issued (or found cached) up to here
	tick   uint64 // last use, for replacement
}

// windowPolicy is the read-ahead and stream configuration.
type windowPolicy struct {
	initial, max  int64 // window bytes
	back, forward int64 // tolerance bytes
	promote       int64 // a random stream that has advanced this far becomes sequential
	streams       int   // cursors per Reader
}

// streamSet is a Reader's cursors. Not safe for concurrent use.
type streamSet struct {
	pol  windowPolicy
	s    []stream
	tick uint64
}

// observe records a read [off, end) and returns the stream it belongs to
// (a pointer valid until the next observe) and whether it is sequential.
func (ss *streamSet) observe(off, end int64) *stream {
	ss.tick++
	for i := range ss.s {
		s := &ss.s[i]
		if off >= s.next-ss.pol.back && off <= s.next+ss.pol.forward {
			s.tick = ss.tick
			prev := s.next
			s.next = max(prev, end)
			if s.window == 0 && end > prev && s.next-s.start >= ss.pol.promote {
				// A random cursor was continued and has covered some ground:
				// now sequential.
				s.window = ss.pol.initial
				s.growAt = s.next + s.window/2
				s.raEnd = max(s.raEnd, s.next)
			}
			for s.window > 0 && s.next >= s.growAt && s.window < ss.pol.max {
				s.window = nextWindow(s.window, ss.pol.max)
				s.growAt = s.next + s.window/2
			}
			return s
		}
	}
	ns := stream{start: off, next: end, raEnd: end, tick: ss.tick}
	if off == 0 {
		ns.window = ss.pol.initial
		ns.growAt = ns.window / 2
		ns.raEnd = 0
		for ns.next >= ns.growAt && ns.window < ss.pol.max {
			ns.window = nextWindow(ns.window, ss.pol.max)
			ns.growAt = ns.next + ns.window/2
		}
	}
	if len(ss.s) < ss.pol.streams {
		ss.s = append(ss.s, ns)
		return &ss.s[len(ss.s)-1]
	}
	old := 0
	for i := range ss.s {
		if ss.s[i].tick < ss.s[old].tick {
			old = i
		}
	}
	ss.s[old] = ns
	return &ss.s[old]
}
