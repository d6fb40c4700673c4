package prefetch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stuckGetter blocks every GetRange until release is closed, ignoring its
// context (a store connection that stalls), then serves inner.
type stuckGetter struct {
	inner   Getter
	entered atomic.Int64
	release chan struct{}
	once    sync.Once
}

func newStuckGetter(inner Getter) *stuckGetter {
	return &stuckGetter{inner: inner, release: make(chan struct{})}
}

func (g *stuckGetter) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	g.entered.Add(1)
	<-g.release
	return g.inner.GetRange(context.WithoutCancel(ctx), key, off, buf, ifMatch)
}

func (g *stuckGetter) unstick() { g.once.Do(func() { close(g.release) }) }

// waitUntil polls cond (a state change made by another goroutine) under
// the hang guard.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			failHang(t, what)
		}
		time.Sleep(time.Millisecond)
	}
}

type readResult struct {
	n   int
	err error
}

// startRead runs r.ReadAt in a goroutine.
func startRead(ctx context.Context, r *Reader, off int64, n int) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		n, err := r.ReadAt(ctx, make([]byte, n), off)
		ch <- readResult{n, err}
	}()
	return ch
}

// awaitRead returns the result of a read started by startRead, failing
// with a goroutine dump if it does not return.
func awaitRead(t *testing.T, what string, ch <-chan readResult) readResult {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(hangTimeout):
		failHang(t, what)
		return readResult{}
	}
}

// tightOptions: one 64 KiB part of budget, so that a second reader must
// wait for memory.
func tightOptions(g Getter) Options {
	return Options{Getter: g, PartSize: 64 << 10, MaxMemory: 64 << 10, InitialWindow: 16 << 10,
		SmallFileSize: 4 << 10, RandomGranularity: 4 << 10, EpochTrigger: -1, Alloc: newTrackAlloc()}
}

// TestReaderCloseUnblocksJoinedRead: a read waiting on another handle's
// fetch whose GET is stuck (ignoring its context) returns ErrClosed when
// its Reader closes, and ctx.Err() when its ctx is cancelled. Before the
// fix it waited on the extent's done channel alone.
func TestReaderCloseUnblocksJoinedRead(t *testing.T) {
	g := newStuckGetter(wordGetter{1 << 20})
	m := newTestManager(t, tightOptions(g))
	defer g.unstick() // before the Readers' and the Manager's Close (cleanups)
	f := File{Key: "a", Size: 1 << 20, ETag: "w"}
	owner := m.Open(f)
	t.Cleanup(func() { owner.Close() })
	first := startRead(context.Background(), owner, 200<<10, 4096)
	waitUntil(t, "owner's GET", func() bool { return g.entered.Load() >= 1 })

	joiner := m.Open(f)
	joined := startRead(context.Background(), joiner, 200<<10, 4096)
	waitUntil(t, "join", func() bool { return m.Stats().Joins >= 1 })
	joiner.Close()
	if res := awaitRead(t, "joined read after Reader.Close", joined); !errors.Is(res.err, ErrClosed) {
		t.Fatalf("joined read after Close: %d, %v; want ErrClosed", res.n, res.err)
	}

	j2 := m.Open(f)
	t.Cleanup(func() { j2.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	joined2 := startRead(ctx, j2, 200<<10, 4096)
	waitUntil(t, "second join", func() bool { return m.Stats().Joins >= 2 })
	cancel()
	if res := awaitRead(t, "joined read after cancel", joined2); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("joined read after cancel: %d, %v; want context.Canceled", res.n, res.err)
	}

	g.unstick()
	if res := awaitRead(t, "owner's read", first); res.err != nil || res.n != 4096 {
		t.Fatalf("owner's read: %d, %v", res.n, res.err)
	}
}

// fillBudget makes every byte of a tight Manager's budget in flight on a
// stuck GET and returns the Reader holding them.
func fillBudget(t *testing.T, m *Manager, g *stuckGetter) (*Reader, <-chan readResult) {
	t.Helper()
	r := m.Open(File{Key: "fill", Size: 1 << 20, ETag: "w"})
	// A sequential stream at 0 reads ahead 16 KiB pieces up to the budget.
	ch := startRead(context.Background(), r, 0, 64<<10)
	waitUntil(t, "budget filled", func() bool {
		st := m.Stats()
		return st.InUse == st.MaxMemory
	})
	return r, ch
}

// TestReaderCloseUnblocksBudgetWait: a read waiting for memory returns
// ErrClosed when its Reader closes (before the fix only Manager.Close or
// freed memory woke it) and ctx.Err() when its ctx is cancelled.
func TestReaderCloseUnblocksBudgetWait(t *testing.T) {
	g := newStuckGetter(wordGetter{1 << 20})
	m := newTestManager(t, tightOptions(g))
	defer g.unstick() // before the Readers' and the Manager's Close (cleanups)
	filler, fillRead := fillBudget(t, m, g)
	t.Cleanup(func() { filler.Close() })

	b := m.Open(File{Key: "b", Size: 1 << 20, ETag: "w"})
	waiting := startRead(context.Background(), b, 500<<10, 4096)
	waitUntil(t, "budget wait", func() bool { return m.Stats().BudgetWaits >= 1 })
	b.Close()
	if res := awaitRead(t, "budget-waiting read after Reader.Close", waiting); !errors.Is(res.err, ErrClosed) {
		t.Fatalf("read waiting for memory after Close: %d, %v; want ErrClosed", res.n, res.err)
	}

	c := m.Open(File{Key: "c", Size: 1 << 20, ETag: "w"})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	before := m.Stats().BudgetWaits
	waiting = startRead(ctx, c, 500<<10, 4096)
	waitUntil(t, "second budget wait", func() bool { return m.Stats().BudgetWaits > before })
	cancel()
	if res := awaitRead(t, "budget-waiting read after cancel", waiting); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("read waiting for memory after cancel: %d, %v; want context.Canceled", res.n, res.err)
	}

	// Memory frees: a new reader gets it and the filler completes.
	g.unstick()
	if res := awaitRead(t, "filler read", fillRead); res.err != nil || res.n != 64<<10 {
		t.Fatalf("filler read: %d, %v", res.n, res.err)
	}
	d := m.Open(File{Key: "d", Size: 1 << 20, ETag: "w"})
	t.Cleanup(func() { d.Close() })
	p := make([]byte, 4096)
	if n, err := guardedReadAt(t, context.Background(), d, p, 500<<10); err != nil || n != 4096 || p[0] != wordByte(500<<10) {
		t.Fatalf("read after memory freed: %d, %v", n, err)
	}
}

// TestManagerCloseUnblocksReads: Manager.Close makes reads waiting for
// memory and reads waiting on a stuck GET return ErrClosed at once, even
// though Close itself waits for the stuck GETs to return.
func TestManagerCloseUnblocksReads(t *testing.T) {
	g := newStuckGetter(wordGetter{1 << 20})
	m, err := New(tightOptions(g))
	if err != nil {
		t.Fatal(err)
	}
	defer g.unstick()
	filler, fillRead := fillBudget(t, m, g)
	t.Cleanup(func() { filler.Close() })
	b := m.Open(File{Key: "b", Size: 1 << 20, ETag: "w"})
	t.Cleanup(func() { b.Close() })
	budget := startRead(context.Background(), b, 500<<10, 4096)
	waitUntil(t, "budget wait", func() bool { return m.Stats().BudgetWaits >= 1 })

	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	for name, ch := range map[string]<-chan readResult{"budget-waiting read": budget, "read on a stuck GET": fillRead} {
		if res := awaitRead(t, name+" after Manager.Close", ch); !errors.Is(res.err, ErrClosed) {
			t.Errorf("%s after Manager.Close: %d, %v; want ErrClosed", name, res.n, res.err)
		}
	}
	g.unstick()
	select {
	case <-closed:
	case <-time.After(hangTimeout):
		failHang(t, "Manager.Close")
	}
	if n, err := b.ReadAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadAt after Manager.Close: %d, %v; want ErrClosed", n, err)
	}
}

// TestIssueEmptySpanStops: issueLocked asked to cover a range whose pieces
// clip to nothing (limit at or before the cursor, as at the end of an
// object) returns at once without creating extents. Before the guard it
// reserved 0 bytes and created empty extents forever without advancing.
func TestIssueEmptySpanStops(t *testing.T) {
	m := newTestManager(t, tightOptions(wordGetter{1 << 20}))
	r := m.Open(File{Key: "e", Size: 1 << 20, ETag: "w"})
	t.Cleanup(func() { r.Close() })
	done := make(chan int64, 1)
	go func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		// [from, to) is not covered but the limit clips every piece to empty.
		done <- m.issueLocked(r, 100<<10, 200<<10, 100<<10, 16<<10, originAhead, false)
	}()
	select {
	case x := <-done:
		if x != 100<<10 {
			t.Fatalf("issueLocked covered up to %d, want %d", x, 100<<10)
		}
	case <-time.After(hangTimeout):
		failHang(t, "issueLocked with an empty piece")
	}
	if st := m.Stats(); st.Requests != 0 || st.InUse != 0 {
		t.Fatalf("issueLocked started %d requests, reserved %d bytes; want none", st.Requests, st.InUse)
	}
}
