package prefetch

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"
)

// MmapOptions configures NewMmapAllocator. Zero values take the defaults
// noted; negative values other than those documented are errors.
type MmapOptions struct {
	// MaxIdle bounds the bytes of freed buffers kept resident for reuse
	// (default 16 MiB; -1 keeps none, so every Free returns its pages to the
	// kernel at once). Idle bytes are outside a Manager's budget: a
	// process's RSS can exceed MaxMemory by up to MaxIdle.
	MaxIdle int64
	// MinSize: requests of fewer bytes than this are served from the Go
	// heap, because one mapping costs at least a page (default 64 KiB, at
	// least the page size).
	MinSize int
}

// DefaultMmapMaxIdle and DefaultMmapMinSize are the MmapOptions defaults,
// in bytes.
const (
	DefaultMmapMaxIdle = 16 << 20
	DefaultMmapMinSize = 64 << 10
)

// MmapStats is a snapshot of an MmapAllocator's counters; bytes are
// virtual sizes of the mappings unless noted.
type MmapStats struct {
	// Mapped: bytes of live mappings (handed out or idle); Idle: resident
	// bytes (page-rounded) of freed buffers kept for reuse; Out: bytes
	// handed out by Alloc and not yet freed (requested sizes, heap ones
	// included).
	Mapped, Idle, Out int64
	// Maps and Unmaps count mmap(2) and munmap(2) calls; Reuses counts
	// Allocs served from an idle buffer; Trims counts madvise(DONTNEED)
	// calls that dropped pages of a reused buffer beyond its new length.
	Maps, Unmaps, Reuses, Trims int64
}

// MmapAllocator is an Allocator of anonymous private mappings, outside
// the Go heap, so the garbage collector neither scans nor delays their
// release: a freed buffer's pages go back to the kernel at once (munmap),
// except up to MaxIdle bytes of recently freed buffers kept for reuse.
// Sizes are rounded up to a power of two of at least MinSize (virtual
// space only: pages a buffer never touched are never resident, and a
// reused buffer's pages beyond the new length are dropped with
// madvise(MADV_DONTNEED)), so resident memory per buffer is its length
// rounded up to a page. Requests under MinSize come from the Go heap.
//
// On systems without mmap support in this package (not Linux) every
// request comes from the Go heap. Free panics on a slice that Alloc did not
// return (or returned and was freed already), because handing such memory
// to the kernel would corrupt the process. Create it with
// NewMmapAllocator; it is safe for concurrent use.
type MmapAllocator struct {
	maxIdle int64
	minSize int
	page    int

	mu     sync.Mutex         // guards every field below
	live   map[*byte]*mmapBuf // mapped buffers handed out, by first byte
	heap   map[*byte]int      // heap buffers handed out, by first byte, with their length
	idle   map[int][]*mmapBuf // idle buffers by class (mapping size), last freed last
	closed bool               // Close was called: Free unmaps
	st     MmapStats          // counters and gauges
}

// mmapBuf is one mapping.
type mmapBuf struct {
	mem      []byte // the whole mapping; len is the class size
	resident int    // bytes (page-rounded) that may be resident: touched by a user
}

var _ Allocator = (*MmapAllocator)(nil)

// NewMmapAllocator validates o and returns an allocator. It maps nothing
// until the first Alloc.
func NewMmapAllocator(o MmapOptions) (*MmapAllocator, error) {
	page := pageSize()
	switch {
	case o.MaxIdle < -1:
		return nil, invalid("MmapOptions.MaxIdle must be >= -1, got %d", o.MaxIdle)
	case o.MaxIdle == 0:
		o.MaxIdle = DefaultMmapMaxIdle
	case o.MaxIdle == -1:
		o.MaxIdle = 0
	}
	switch {
	case o.MinSize < 0:
		return nil, invalid("MmapOptions.MinSize must not be negative, got %d", o.MinSize)
	case o.MinSize == 0:
		o.MinSize = DefaultMmapMinSize
	case o.MinSize < page:
		return nil, invalid("MmapOptions.MinSize (%d) must be at least the page size (%d)", o.MinSize, page)
	}
	return &MmapAllocator{
		maxIdle: o.MaxIdle,
		minSize: o.MinSize,
		page:    page,
		live:    map[*byte]*mmapBuf{},
		heap:    map[*byte]int{},
		idle:    map[int][]*mmapBuf{},
	}, nil
}

// classOf is the mapping size for n bytes: a power of two >= minSize.
func (a *MmapAllocator) classOf(n int) int {
	c := max(n, a.minSize)
	return 1 << bits.Len(uint(c-1))
}

func (a *MmapAllocator) pageUp(n int) int { return (n + a.page - 1) / a.page * a.page }

// Alloc returns a buffer of n bytes (not zeroed when reused), or nil when
// the kernel refuses the mapping.
func (a *MmapAllocator) Alloc(n int) []byte {
	if n <= 0 {
		return []byte{}
	}
	if n < a.minSize || !mmapSupported {
		b := make([]byte, n)
		a.mu.Lock()
		a.heap[&b[0]] = n
		a.st.Out += int64(n)
		a.mu.Unlock()
		return b
	}
	class := a.classOf(n)
	need := a.pageUp(n)
	a.mu.Lock()
	var mb *mmapBuf
	if l := a.idle[class]; len(l) > 0 {
		mb = l[len(l)-1]
		a.idle[class] = l[:len(l)-1]
		a.st.Idle -= int64(mb.resident)
		a.st.Reuses++
	}
	a.mu.Unlock()
	if mb != nil && mb.resident > need {
		// Drop the pages of the longer previous use, so resident memory
		// matches what the caller accounts for.
		if err := madviseDontNeed(mb.mem[need:mb.resident]); err == nil {
			mb.resident = need
			a.mu.Lock()
			a.st.Trims++
			a.mu.Unlock()
		}
	}
	if mb == nil {
		mem, err := mmapAnon(class)
		if err != nil {
			return nil
		}
		mb = &mmapBuf{mem: mem}
		a.mu.Lock()
		a.st.Maps++
		a.st.Mapped += int64(class)
		a.mu.Unlock()
	}
	if mb.resident < need {
		// The caller writes all n bytes (a GET's body lands here): fault
		// the pages in at once. A failure only leaves them to fault in.
		_ = populate(mb.mem[mb.resident:need])
	}
	mb.resident = max(mb.resident, need)
	a.mu.Lock()
	a.live[&mb.mem[0]] = mb
	a.st.Out += int64(n)
	a.mu.Unlock()
	return mb.mem[:n:n]
}

// Free gives back a buffer Alloc returned: it is kept for reuse while
// idle buffers hold under MaxIdle bytes, else unmapped at once.
func (a *MmapAllocator) Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	p := unsafe.SliceData(b)
	a.mu.Lock()
	if n, ok := a.heap[p]; ok {
		delete(a.heap, p)
		a.st.Out -= int64(n)
		a.mu.Unlock()
		return
	}
	mb, ok := a.live[p]
	if !ok {
		a.mu.Unlock()
		panic(fmt.Sprintf("prefetch: MmapAllocator.Free of a buffer it did not hand out (or freed twice), %d bytes", cap(b)))
	}
	delete(a.live, p)
	a.st.Out -= int64(cap(b))
	if !a.closed && a.st.Idle+int64(mb.resident) <= a.maxIdle {
		class := len(mb.mem)
		a.idle[class] = append(a.idle[class], mb)
		a.st.Idle += int64(mb.resident)
		a.mu.Unlock()
		return
	}
	a.st.Unmaps++
	a.st.Mapped -= int64(len(mb.mem))
	a.mu.Unlock()
	// Unmapping an address still mapped by us cannot fail; a failure
	// would only leak the mapping.
	_ = munmap(mb.mem)
}

// Close unmaps the idle buffers; buffers freed later are unmapped at once.
// Buffers still handed out stay valid. It is idempotent.
func (a *MmapAllocator) Close() {
	a.mu.Lock()
	a.closed = true
	idle := a.idle
	a.idle = map[int][]*mmapBuf{}
	for _, l := range idle {
		for _, mb := range l {
			a.st.Unmaps++
			a.st.Mapped -= int64(len(mb.mem))
		}
	}
	a.st.Idle = 0
	a.mu.Unlock()
	for _, l := range idle {
		for _, mb := range l {
			_ = munmap(mb.mem)
		}
	}
}

// Stats returns a snapshot of the counters.
func (a *MmapAllocator) Stats() MmapStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// MemoryLimitFor returns a soft memory limit, in bytes, for
// runtime/debug.SetMemoryLimit in a process whose prefetch budget is
// budget bytes (Options.MaxMemory): the budget, plus the default MaxIdle
// of an MmapAllocator, plus 48 MiB for the rest of the process. With the
// default allocator the blocks live outside the Go heap, so the limit only
// restrains the heap's own garbage (request buffers, metadata, blocks under
// MinSize); with an Allocator of Go slices it keeps the garbage collector
// from letting the heap grow to about twice the budget. The daemon should call
// debug.SetMemoryLimit(MemoryLimitFor(budget)) once at start, unless
// GOMEMLIMIT is set.
func MemoryLimitFor(budget int64) int64 {
	return budget + DefaultMmapMaxIdle + 48<<20
}
