package objtest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/os2g/os2g/objclient"
)

// Operation names used by Counting and Faulty. "Commit" is a Writer's
// Commit; the others are the Store methods of the same name.
const (
	OpStat     = "Stat"
	OpList     = "List"
	OpGetRange = "GetRange"
	OpPut      = "Put"
	OpCommit   = "Commit"
	OpDelete   = "Delete"
	OpCopy     = "Copy"
)

var allOps = []string{OpStat, OpList, OpGetRange, OpPut, OpCommit, OpDelete, OpCopy}

// Counting is a Store decorator that counts calls per operation (successful
// or not) and the bytes GetRange returned, so tests can assert how many
// requests a layer above made ("ls -l of N files costs N/1000 LISTs",
// "each block is fetched once"). Safe for concurrent use.
type Counting struct {
	inner  objclient.Store
	counts map[string]*atomic.Int64 // fixed at construction; values atomic
	bytes  atomic.Int64

	mu     sync.Mutex // guards perKey
	perKey map[opKey]int64
}

type opKey struct{ op, key string }

var _ objclient.Store = (*Counting)(nil)

// NewCounting wraps inner.
func NewCounting(inner objclient.Store) *Counting {
	c := &Counting{inner: inner, counts: map[string]*atomic.Int64{}, perKey: map[opKey]int64{}}
	for _, op := range allOps {
		c.counts[op] = new(atomic.Int64)
	}
	return c
}

// Inner returns the wrapped store.
func (c *Counting) Inner() objclient.Store { return c.inner }

// Count returns the number of calls of op ("Stat", "List", "GetRange",
// "Put", "Commit", "Delete", "Copy") since construction or Reset; 0 for
// an unknown op.
func (c *Counting) Count(op string) int64 {
	if n, ok := c.counts[op]; ok {
		return n.Load()
	}
	return 0
}

// KeyCount returns the number of calls of op on key (for Copy: on src;
// for List: on the request's Prefix).
func (c *Counting) KeyCount(op, key string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.perKey[opKey{op, key}]
}

// Total returns the number of calls of all operations.
func (c *Counting) Total() int64 {
	var t int64
	for _, n := range c.counts {
		t += n.Load()
	}
	return t
}

// BytesRead returns the sum of the counts GetRange returned, in bytes.
func (c *Counting) BytesRead() int64 { return c.bytes.Load() }

// Reset sets all counters to zero.
func (c *Counting) Reset() {
	for _, n := range c.counts {
		n.Store(0)
	}
	c.bytes.Store(0)
	c.mu.Lock()
	c.perKey = map[opKey]int64{}
	c.mu.Unlock()
}

func (c *Counting) note(op, key string) {
	c.counts[op].Add(1)
	c.mu.Lock()
	c.perKey[opKey{op, key}]++
	c.mu.Unlock()
}

// Stat implements objclient.Store.
func (c *Counting) Stat(ctx context.Context, key string) (objclient.ObjectInfo, error) {
	c.note(OpStat, key)
	return c.inner.Stat(ctx, key)
}

// List implements objclient.Store.
func (c *Counting) List(ctx context.Context, req objclient.ListRequest) (objclient.ListPage, error) {
	c.note(OpList, req.Prefix)
	return c.inner.List(ctx, req)
}

// GetRange implements objclient.Store.
func (c *Counting) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	c.note(OpGetRange, key)
	n, err := c.inner.GetRange(ctx, key, off, buf, ifMatch)
	c.bytes.Add(int64(n))
	return n, err
}

// Put implements objclient.Store. The Writer's Commit is counted as "Commit".
func (c *Counting) Put(ctx context.Context, key string, opts objclient.PutOptions) (objclient.Writer, error) {
	c.note(OpPut, key)
	w, err := c.inner.Put(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &countingWriter{Writer: w, c: c, key: key}, nil
}

type countingWriter struct {
	objclient.Writer
	c   *Counting
	key string
}

func (w *countingWriter) Commit(ctx context.Context) (objclient.ObjectInfo, error) {
	w.c.note(OpCommit, w.key)
	return w.Writer.Commit(ctx)
}

// Delete implements objclient.Store.
func (c *Counting) Delete(ctx context.Context, key string) error {
	c.note(OpDelete, key)
	return c.inner.Delete(ctx, key)
}

// Copy implements objclient.Store.
func (c *Counting) Copy(ctx context.Context, src, dst, ifMatch string) (objclient.ObjectInfo, error) {
	c.note(OpCopy, src)
	return c.inner.Copy(ctx, src, dst, ifMatch)
}
