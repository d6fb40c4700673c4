package objtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/os2g/os2g/objclient"
)

// FaultOptions configures a Faulty store. The zero value injects nothing.
type FaultOptions struct {
	// Latency is added before every call (all operations), in wall time;
	// the wait ends early with the context's error if ctx is done.
	Latency time.Duration
	// Ops are the operations that may fail ("Stat", "List", "GetRange",
	// "Put", "Commit", "Delete", "Copy"); nil means all of them.
	Ops []string
	// Err is the error an injected failure wraps (default
	// objclient.ErrUnavailable), e.g. objclient.ErrThrottled.
	Err error
	// FailFirstN fails the first N calls of Ops.
	FailFirstN int
	// FailEvery fails every N-th call of Ops (the N-th, 2N-th, ...), counted
	// over all of Ops together; 0 disables it.
	FailEvery int
	// FailRate fails this fraction of calls of Ops, in [0, 1], drawn from a
	// PRNG seeded with Seed, so a run is repeatable for a given call order.
	FailRate float64
	// Seed seeds FailRate's PRNG (0 is a fixed default seed).
	Seed uint64
	// Before, if set, is called before each call (all operations, after the
	// latency) with the operation and key (Copy: src; List: prefix); a
	// non-nil error is returned as the call's error, unwrapped.
	Before func(op, key string) error
}

// Faulty is a Store decorator that adds latency and injects errors, for
// testing the layers above objclient (prefetch, fusefs) against a slow or
// failing store. Deterministic for a given call order; safe for
// concurrent use.
type Faulty struct {
	inner objclient.Store
	o     FaultOptions

	calls    atomic.Int64 // calls of o.Ops so far
	injected atomic.Int64

	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

var _ objclient.Store = (*Faulty)(nil)

// NewFaulty wraps inner. It panics on invalid options (a FailRate outside
// [0, 1], negative counts or latency, an unknown op): they are test bugs.
func NewFaulty(inner objclient.Store, o FaultOptions) *Faulty {
	if o.FailRate < 0 || o.FailRate > 1 || o.FailFirstN < 0 || o.FailEvery < 0 || o.Latency < 0 {
		panic(fmt.Sprintf("objtest: invalid FaultOptions %+v", o))
	}
	for _, op := range o.Ops {
		if !slices.Contains(allOps, op) {
			panic(fmt.Sprintf("objtest: FaultOptions: unknown op %q", op))
		}
	}
	if o.Err == nil {
		o.Err = objclient.ErrUnavailable
	}
	seed := o.Seed
	if seed == 0 {
		seed = 0x05216
	}
	return &Faulty{inner: inner, o: o, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Injected returns the number of errors injected so far (Before's errors
// included).
func (f *Faulty) Injected() int64 { return f.injected.Load() }

// Inner returns the wrapped store.
func (f *Faulty) Inner() objclient.Store { return f.inner }

func (f *Faulty) before(ctx context.Context, op, key string) error {
	if f.o.Latency > 0 {
		tm := time.NewTimer(f.o.Latency)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		}
	}
	if f.o.Before != nil {
		if err := f.o.Before(op, key); err != nil {
			f.injected.Add(1)
			return err
		}
	}
	if f.o.Ops != nil && !slices.Contains(f.o.Ops, op) {
		return nil
	}
	n := f.calls.Add(1)
	fail := n <= int64(f.o.FailFirstN) || (f.o.FailEvery > 0 && n%int64(f.o.FailEvery) == 0)
	if !fail && f.o.FailRate > 0 {
		f.mu.Lock()
		fail = f.rng.Float64() < f.o.FailRate
		f.mu.Unlock()
	}
	if fail {
		f.injected.Add(1)
		return fmt.Errorf("objtest: injected fault in %s %q: %w", op, key, f.o.Err)
	}
	return nil
}

// Stat implements objclient.Store.
func (f *Faulty) Stat(ctx context.Context, key string) (objclient.ObjectInfo, error) {
	if err := f.before(ctx, OpStat, key); err != nil {
		return objclient.ObjectInfo{}, err
	}
	return f.inner.Stat(ctx, key)
}

// List implements objclient.Store.
func (f *Faulty) List(ctx context.Context, req objclient.ListRequest) (objclient.ListPage, error) {
	if err := f.before(ctx, OpList, req.Prefix); err != nil {
		return objclient.ListPage{}, err
	}
	return f.inner.List(ctx, req)
}

// GetRange implements objclient.Store.
func (f *Faulty) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	if err := f.before(ctx, OpGetRange, key); err != nil {
		return 0, err
	}
	return f.inner.GetRange(ctx, key, off, buf, ifMatch)
}

// Put implements objclient.Store. The Writer's Commit passes through the
// faults as op "Commit"; a Commit failed by a fault aborts the inner upload.
func (f *Faulty) Put(ctx context.Context, key string, opts objclient.PutOptions) (objclient.Writer, error) {
	if err := f.before(ctx, OpPut, key); err != nil {
		return nil, err
	}
	w, err := f.inner.Put(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &faultyWriter{Writer: w, f: f, key: key}, nil
}

type faultyWriter struct {
	objclient.Writer
	f   *Faulty
	key string
}

func (w *faultyWriter) Commit(ctx context.Context) (objclient.ObjectInfo, error) {
	if err := w.f.before(ctx, OpCommit, w.key); err != nil {
		// Keep the Writer contract: after a failed Commit the upload is gone.
		_ = w.Writer.Abort(context.WithoutCancel(ctx))
		return objclient.ObjectInfo{}, err
	}
	return w.Writer.Commit(ctx)
}

// Delete implements objclient.Store.
func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := f.before(ctx, OpDelete, key); err != nil {
		return err
	}
	return f.inner.Delete(ctx, key)
}

// Copy implements objclient.Store.
func (f *Faulty) Copy(ctx context.Context, src, dst, ifMatch string) (objclient.ObjectInfo, error) {
	if err := f.before(ctx, OpCopy, src); err != nil {
		return objclient.ObjectInfo{}, err
	}
	return f.inner.Copy(ctx, src, dst, ifMatch)
}
