package prefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// This file is a randomized stress test of ReadAt under kernel-like access
// patterns, tight budgets and a misbehaving store. Every ReadAt runs under a
// hang guard: a read that does not return within hangTimeout dumps every
// goroutine and fails the test. Seeds are fixed; OS2G_PREFETCH_STRESS=N
// runs N times as many iterations.

// hangTimeout is a hang guard only: a correct read returns in milliseconds.
const hangTimeout = 60 * time.Second

var errInjected = errors.New("injected store failure")

// chaosGetter wraps a Getter with random latency and random failures.
type chaosGetter struct {
	inner      Getter
	maxLatency time.Duration
	failPct    int // percent of calls that fail with errInjected

	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

func newChaosGetter(inner Getter, seed uint64, maxLatency time.Duration, failPct int) *chaosGetter {
	return &chaosGetter{inner: inner, maxLatency: maxLatency, failPct: failPct, rng: rand.New(rand.NewPCG(seed, 7))}
}

func (c *chaosGetter) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	c.mu.Lock()
	var lat time.Duration
	if c.maxLatency > 0 {
		lat = time.Duration(c.rng.Int64N(int64(c.maxLatency)))
	}
	fail := c.rng.IntN(100) < c.failPct
	half := c.rng.IntN(2) == 0
	c.mu.Unlock()
	if lat > 0 {
		t := time.NewTimer(lat)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
	if fail {
		if half && len(buf) > 1 {
			// A body cut short: some bytes, then the error.
			n, _ := c.inner.GetRange(ctx, key, off, buf[:len(buf)/2], ifMatch)
			return n, errInjected
		}
		return 0, errInjected
	}
	return c.inner.GetRange(ctx, key, off, buf, ifMatch)
}

// guardedReadAt runs r.ReadAt under the hang guard.
func guardedReadAt(t testing.TB, ctx context.Context, r *Reader, p []byte, off int64) (int, error) {
	t.Helper()
	type res struct {
		n   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		n, err := r.ReadAt(ctx, p, off)
		ch <- res{n, err}
	}()
	timer := time.NewTimer(hangTimeout)
	defer timer.Stop()
	select {
	case x := <-ch:
		return x.n, x.err
	case <-timer.C:
		failHang(t, fmt.Sprintf("ReadAt(%s size %d, off %d, len %d)", r.f.Key, r.f.Size, off, len(p)))
		return 0, nil
	}
}

// failHang dumps every goroutine and fails the test.
func failHang(t testing.TB, what string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	t.Fatalf("%s did not return within %v: goroutines:\n%s", what, hangTimeout, buf)
}

// stressScale is the iteration multiplier (OS2G_PREFETCH_STRESS).
func stressScale() int {
	if n, err := strconv.Atoi(os.Getenv("OS2G_PREFETCH_STRESS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// kernelOps returns a list of batches of reads [off, off+n) shaped like the
// kernel's: reads of one batch are issued concurrently.
func kernelOps(rng *rand.Rand, size int64, pattern int) [][]span {
	const page = 4096
	var ops [][]span
	add := func(b ...span) {
		var c []span
		for _, s := range b {
			if s.off < 0 {
				s.off = 0
			}
			if s.end > s.off {
				c = append(c, s)
			}
		}
		if len(c) > 0 {
			ops = append(ops, c)
		}
	}
	lastPage := alignDown(max(size-1, 0), page)
	seq := func(from int64, chunk int64) {
		for x := from; x < size; {
			k := 2 + rng.IntN(3) // 2-4 concurrent
			var b []span
			for range k {
				if x >= size {
					break
				}
				n := chunk
				if rng.IntN(4) == 0 {
					n = chunk * int64(1+rng.IntN(8)) // up to 1 MiB with 128 KiB
				}
				b = append(b, span{x, x + n}) // may run past EOF, as the kernel does
				x += n
			}
			if len(b) > 1 && rng.IntN(2) == 0 {
				i := rng.IntN(len(b) - 1)
				b[i], b[i+1] = b[i+1], b[i] // slightly out of order
			}
			add(b...)
		}
	}
	switch pattern {
	case 0: // checkpoint read back: last page, first page, then sequential
		add(span{lastPage, lastPage + page})
		add(span{0, page})
		add(span{lastPage - page, lastPage})
		seq(0, 128<<10)
	case 1: // plain sequential, 128 KiB
		seq(0, 128<<10)
	case 2: // random 4 KiB - 1 MiB reads, several at once, with re-reads near EOF
		for range 40 {
			var b []span
			for range 1 + rng.IntN(4) {
				var off int64
				switch rng.IntN(3) {
				case 0:
					off = max(size-rng.Int64N(3*page+1), 0)
				default:
					off = rng.Int64N(max(size, 1))
				}
				b = append(b, span{off, off + 1 + rng.Int64N(1<<20)})
			}
			add(b...)
		}
	case 3: // sequential from the middle, then the tail again, then head
		seq(alignDown(size/2, page), 128<<10)
		add(span{lastPage, lastPage + page}, span{lastPage - page, lastPage + 2*page})
		add(span{max(size-9481, 0), max(size-9481, 0) + page})
		seq(0, 256<<10)
	default: // two interleaved sequential streams plus tail reads
		half := alignDown(size/2, page)
		a, b := int64(0), half
		for a < half || b < size {
			var bt []span
			if a < half {
				bt = append(bt, span{a, a + 128<<10})
				a += 128 << 10
			}
			if b < size {
				bt = append(bt, span{b, b + 128<<10})
				b += 128 << 10
			}
			if rng.IntN(8) == 0 {
				bt = append(bt, span{lastPage, lastPage + page})
			}
			add(bt...)
		}
	}
	return ops
}

// stressCase is one configuration of the stress test.
type stressCase struct {
	name      string
	sizes     []int64
	o         Options // Getter and Alloc are set by the test
	latency   time.Duration
	failPct   int
	handles   int  // concurrent handles per file
	closeMid  bool // one handle is closed while its reads run
	patterns  []int
	cancelPct int // percent of reads given an already short-lived ctx
}

func TestStressReadAt(t *testing.T) {
	const mib = 1 << 20
	ps := int64(DefaultPartSize)
	big := int64(44803337) // the reported checkpoint
	defSizes := []int64{big, ps - 1, ps, ps + 1, 2*ps - 1, 2*ps + 1, DefaultSmallFileSize + 1}
	sp := int64(64 << 10) // a small geometry exercises many part boundaries quickly
	smallSizes := []int64{0, 1, 100, 4095, 4096, 4097, 16 << 10, 16<<10 + 1, sp - 1, sp, sp + 1,
		2*sp - 1, 2 * sp, 2*sp + 1, 5*sp + 12345, 20*sp - 1, 20*sp + 1, 44803337 / 32}
	small := Options{PartSize: sp, InitialWindow: 16 << 10, SmallFileSize: 16 << 10, RandomGranularity: 4096,
		ToleranceBack: 32 << 10, ToleranceForward: 64 << 10, MaxConcurrency: 4, EpochTrigger: -1}
	withMem := func(o Options, mem int64) Options { o.MaxMemory = mem; return o }
	cases := []stressCase{
		{name: "default-256MiB", sizes: []int64{big, 2*ps + 1}, o: Options{MaxMemory: 256 * mib}, handles: 3, patterns: []int{0, 1, 3}},
		{name: "default-1part", sizes: defSizes, o: Options{MaxMemory: ps}, handles: 2, patterns: []int{0, 2, 4}},
		{name: "default-2parts", sizes: defSizes, o: Options{MaxMemory: 2 * ps}, handles: 3, patterns: []int{0, 3}, latency: time.Millisecond},
		{name: "default-16MiB-faulty", sizes: []int64{big, ps + 1}, o: Options{MaxMemory: 16 * mib}, handles: 2,
			patterns: []int{0, 2}, latency: time.Millisecond, failPct: 10, closeMid: true, cancelPct: 5},
		{name: "small-1part", sizes: smallSizes, o: withMem(small, sp), handles: 3, patterns: []int{0, 1, 2, 3, 4}},
		{name: "small-2parts-faulty", sizes: smallSizes, o: withMem(small, 2*sp), handles: 4, patterns: []int{0, 2, 3, 4},
			latency: 200 * time.Microsecond, failPct: 15, closeMid: true, cancelPct: 10},
		{name: "small-16parts", sizes: smallSizes, o: withMem(small, 16*sp), handles: 3, patterns: []int{0, 1, 2, 3, 4},
			latency: 100 * time.Microsecond, failPct: 3},
	}
	scale := stressScale()
	if testing.Short() || raceEnabled {
		// Keep the race run short: the biggest objects only once.
		cases[0].patterns = []int{0}
		cases[1].sizes, cases[1].patterns = []int64{big, 2*ps - 1}, []int{0, 2}
		cases[2].sizes = []int64{big}
		for i := 4; i < len(cases); i++ {
			cases[i].patterns = cases[i].patterns[:3]
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for it := range scale {
				runStressCase(t, c, uint64(it))
			}
		})
	}
}

func runStressCase(t *testing.T, c stressCase, iter uint64) {
	alloc := newTrackAlloc()
	o := c.o
	seed := uint64(len(c.name))*1000 + iter
	words := map[string]int64{}
	o.Getter = newChaosGetter(multiWord{words}, seed, c.latency, c.failPct)
	o.Alloc = alloc
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	for si, size := range c.sizes {
		key := fmt.Sprintf("obj-%d", si)
		words[key] = size
	}
	want := map[int64][]byte{}
	for _, size := range c.sizes {
		if want[size] == nil {
			b := make([]byte, size)
			if _, err := (wordGetter{size}).GetRange(context.Background(), "", 0, b, ""); err != nil {
				t.Fatal(err)
			}
			want[size] = b
		}
	}
	for si, size := range c.sizes {
		f := File{Key: fmt.Sprintf("obj-%d", si), Size: size, ETag: "w"}
		for _, pat := range c.patterns {
			rng := rand.New(rand.NewPCG(seed, uint64(si*16+pat)))
			var wg sync.WaitGroup
			for h := range c.handles {
				r := m.Open(f)
				ops := kernelOps(rng, size, (pat+h)%5)
				closeAt := -1
				if c.closeMid && h == 0 {
					closeAt = rng.IntN(len(ops) + 1)
				}
				hrng := rand.New(rand.NewPCG(seed^uint64(h), uint64(si)))
				cancels := make([]bool, 0, len(ops)*4)
				for range len(ops) * 4 {
					cancels = append(cancels, hrng.IntN(100) < c.cancelPct)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					runStressHandle(t, r, ops, closeAt, c.failPct > 0, cancels, want[size])
				}()
			}
			wg.Wait()
			if t.Failed() {
				m.Close()
				return
			}
		}
	}
	st := m.Stats()
	t.Logf("iter %d: %+v", iter, st)
	done := make(chan struct{})
	go func() { m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangTimeout):
		failHang(t, "Manager.Close")
	}
	m.mu.Lock()
	inUse := m.inUse
	m.mu.Unlock()
	if inUse != 0 {
		t.Errorf("%s: after Close the budget still counts %d bytes", c.name, inUse)
	}
	if out, _, bad := alloc.stats(); out != 0 || bad != 0 {
		t.Errorf("%s: allocator: %d bytes outstanding, %d bad frees", c.name, out, bad)
	}
}

// runStressHandle issues ops on r batch by batch, each batch's reads
// concurrently, checks every byte returned and closes r (early at
// closeAt).
func runStressHandle(t *testing.T, r *Reader, ops [][]span, closeAt int, faulty bool, cancels []bool, want []byte) {
	size := r.f.Size
	k := 0
	closed := false
	for bi, b := range ops {
		if bi == closeAt {
			// Close while this batch's reads run.
			go r.Close()
			closed = true
		}
		var wg sync.WaitGroup
		for _, s := range b {
			cancel := cancels[k%len(cancels)]
			k++
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				if cancel {
					var stop context.CancelFunc
					ctx, stop = context.WithTimeout(ctx, time.Duration(1+s.off%500)*time.Microsecond)
					defer stop()
				}
				p := make([]byte, s.len())
				n, err := guardedReadAt(t, ctx, r, p, s.off)
				if n < 0 || n > len(p) {
					t.Errorf("ReadAt(%d, %d) of %d bytes: n = %d", s.off, len(p), size, n)
					return
				}
				if s.off < size && !bytes.Equal(p[:n], want[s.off:s.off+int64(n)]) {
					i := 0
					for i < n && p[i] == want[s.off+int64(i)] {
						i++
					}
					t.Errorf("ReadAt(%d, %d) of %d bytes: byte %d differs", s.off, len(p), size, s.off+int64(i))
					return
				}
				switch {
				case err == nil:
					if wantN := max(min(s.end, size)-s.off, 0); int64(n) != wantN {
						t.Errorf("ReadAt(%d, %d) of %d bytes: n = %d, want %d", s.off, len(p), size, n, wantN)
					}
				case errors.Is(err, ErrClosed) && closed:
				case errors.Is(err, context.DeadlineExceeded) && cancel:
				case errors.Is(err, errInjected) && faulty:
				default:
					t.Errorf("ReadAt(%d, %d) of %d bytes: unexpected error %v", s.off, len(p), size, err)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			break
		}
	}
	r.Close()
}

// multiWord serves a wordGetter object per key (sizes by key; read only
// while reads run).
type multiWord struct{ sizes map[string]int64 }

func (w multiWord) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	size, ok := w.sizes[key]
	if !ok {
		return 0, fmt.Errorf("no object %q", key)
	}
	return wordGetter{size}.GetRange(ctx, key, off, buf, ifMatch)
}
