package prefetch

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// countGetter counts GetRange calls and bytes, and can add latency or fail.
type countGetter struct {
	inner   Getter
	latency time.Duration
	calls   atomic.Int64
	bytes   atomic.Int64
	active  atomic.Int64 // calls in progress
	maxAct  atomic.Int64

	mu     sync.Mutex // guards ranges, perKey, failN
	ranges []span
	perKey map[string]int
	failN  int   // fail this many calls with failErr
	failEr error // error injected
}

func newCountGetter(inner Getter, latency time.Duration) *countGetter {
	return &countGetter{inner: inner, latency: latency, perKey: map[string]int{}}
}

func (c *countGetter) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	c.calls.Add(1)
	a := c.active.Add(1)
	defer c.active.Add(-1)
	for {
		m := c.maxAct.Load()
		if a <= m || c.maxAct.CompareAndSwap(m, a) {
			break
		}
	}
	c.mu.Lock()
	c.ranges = append(c.ranges, span{off, off + int64(len(buf))})
	c.perKey[key]++
	fail := c.failN > 0
	if fail {
		c.failN--
	}
	err := c.failEr
	c.mu.Unlock()
	if c.latency > 0 {
		t := time.NewTimer(c.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
	if fail {
		return 0, err
	}
	n, err := c.inner.GetRange(ctx, key, off, buf, ifMatch)
	c.bytes.Add(int64(n))
	return n, err
}

func (c *countGetter) keyCalls(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.perKey[key]
}

func (c *countGetter) failNext(n int, err error) {
	c.mu.Lock()
	c.failN, c.failEr = n, err
	c.mu.Unlock()
}

// wordGetter serves synthetic objects of any size whose little-endian u64
// word at byte offset 8k is k (CASES C09). Its ETag is "w".
type wordGetter struct{ size int64 }

func wordByte(off int64) byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(off/8))
	return b[off%8]
}

func (w wordGetter) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if ifMatch != "" && ifMatch != "w" {
		return 0, fmt.Errorf("word %q: %w", key, objclient.ErrChanged)
	}
	if off >= w.size {
		return 0, nil
	}
	n := min(int64(len(buf)), w.size-off)
	i := int64(0)
	for ; i < n && (off+i)%8 != 0; i++ {
		buf[i] = wordByte(off + i)
	}
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], uint64((off+i)/8))
	}
	for ; i < n; i++ {
		buf[i] = wordByte(off + i)
	}
	return int(n), nil
}

// trackAlloc is an Allocator that tracks bytes outstanding and catches
// double frees.
type trackAlloc struct {
	mu    sync.Mutex // guards all
	out   int64
	peak  int64
	live  map[*byte]int
	bad   int
	count int
}

func newTrackAlloc() *trackAlloc { return &trackAlloc{live: map[*byte]int{}} }

func (a *trackAlloc) Alloc(n int) []byte {
	b := make([]byte, n)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.out += int64(n)
	a.peak = max(a.peak, a.out)
	a.count++
	if n > 0 {
		a.live[&b[0]] = n
	}
	return b
}

func (a *trackAlloc) Free(b []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(b) == 0 {
		return
	}
	n, ok := a.live[&b[0]]
	if !ok {
		a.bad++
		return
	}
	delete(a.live, &b[0])
	a.out -= int64(n)
	// Poison freed memory so a use after free shows as corrupt data.
	clear(b)
}

func (a *trackAlloc) stats() (out, peak int64, bad int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out, a.peak, a.bad
}

// randBytes is deterministic pseudo-random data.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

// memFile stores data in a fresh objtest.Mem and returns its File.
func memFile(t testing.TB, mem *objtest.Mem, key string, data []byte) File {
	t.Helper()
	mem.PutObject(key, data, "", nil)
	oi, err := mem.Stat(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return File{Key: key, Size: oi.Size, ETag: oi.ETag}
}

// newTestManager builds a Manager and closes it at cleanup.
func newTestManager(t testing.TB, o Options) *Manager {
	t.Helper()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// readFull reads [off, off+n) with one ReadAt and checks the count.
func readAt(t testing.TB, r *Reader, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	got, err := r.ReadAt(context.Background(), p, off)
	if err != nil {
		t.Fatalf("ReadAt(%d, %d): %v", off, n, err)
	}
	return p[:got]
}
