package prefetch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Manager owns the block cache, the memory budget and the epoch
// pre-readers of one mount. All methods are safe for concurrent use.
type Manager struct {
	o        Options
	log      *slog.Logger
	maxWin   int64 // effective window cap, bytes
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup // every goroutine started by the Manager or its Readers
	st       counters       // atomics, no lock
	unreg    func()         // unregisters metrics
	ownAlloc *MmapAllocator // the default allocator, closed by Close (nil: Options.Alloc was given)

	mu            sync.Mutex // guards every field below, and the Manager-guarded fields of extent, fileState, Reader and dirState
	closed        bool
	files         map[string]map[string]*fileState // key -> etag -> index
	fresh, used   lru                              // cached extents not yet read / read at least once
	inUse         int64                            // bytes reserved: in flight + cached + awaiting free
	peak          int64                            // high-water mark of inUse
	waiting       int                              // goroutines waiting on wake
	demandWaiters int                              // of which demand reads (read-ahead yields to them)
	wake          chan struct{}                    // closed and replaced when memory may have become available
	wakeArmed     bool                             // a goroutine waits on the current wake (else signalling is a no-op)
	epochHeld     int64                            // bytes of pre-read files not yet read
	epochInFlight int                              // pre-read GETs in flight
	denseOwner    *Reader                          // the Reader fetching its file whole (see Reader.plan), if any
	dirs          map[string]*dirState             // NoteDir'd directories by prefix
	diskFills     map[string]*diskFill             // copies to Options.DiskCache in progress, by key
	hints         map[string]*hintState            // the exact-order hints being followed, by stream
	hintOpened    int64                            // hinted files pre-read and then opened
	hintUnopened  int64                            // hinted files pre-read, not opened when their hint ended
	hintWasted    int64                            // bytes of those
}

// New validates o and returns a Manager. The Manager starts no goroutine
// until files are read; Close stops them all.
func New(o Options) (*Manager, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	var own *MmapAllocator
	if o.Alloc == nil {
		if own, err = NewMmapAllocator(MmapOptions{}); err != nil {
			return nil, err
		}
		o.Alloc = own
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		ownAlloc:  own,
		o:         o,
		log:       o.Logger,
		maxWin:    o.effectiveMaxWindow(),
		ctx:       ctx,
		cancel:    cancel,
		files:     map[string]map[string]*fileState{},
		wake:      make(chan struct{}),
		dirs:      map[string]*dirState{},
		diskFills: map[string]*diskFill{},
	}
	if err := m.registerMetrics(o.Registerer); err != nil {
		cancel()
		return nil, err
	}
	return m, nil
}

// Open returns a Reader of f. It does no I/O. Cached bytes of other
// versions (ETags) of f.Key are dropped. The caller must Close the Reader.
func (m *Manager) Open(f File) *Reader {
	r := &Reader{
		m:  m,
		f:  f,
		fk: fileKey{f.Key, f.ETag},
		g:  geometry{size: f.Size, partSize: m.o.PartSize, gran: m.o.RandomGranularity},
		ss: streamSet{pol: windowPolicy{
			initial: m.o.InitialWindow, max: m.maxWin,
			back: m.o.ToleranceBack, forward: m.o.ToleranceForward,
			streams: m.o.Streams, promote: m.o.RandomGranularity,
		}},
	}
	r.ctx, r.cancel = context.WithCancel(m.ctx)
	m.st.opens.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	for etag, fs := range m.files[f.Key] {
		if etag != f.ETag {
			m.dropFileLocked(fs)
		}
	}
	m.noteOpenLocked(f)
	return r
}

// Invalidate drops every cached byte of key (all versions), and key's
// entries in Options.DiskCache. Fetches in flight finish for their current
// waiters but are not kept.
func (m *Manager) Invalidate(key string) {
	m.mu.Lock()
	for _, fs := range m.files[key] {
		m.dropFileLocked(fs)
	}
	m.invalidateDiskLocked(key)
	m.mu.Unlock()
	if m.o.DiskCache != nil {
		m.o.DiskCache.Remove(key)
	}
}

// Close stops every pre-reader and read-ahead, waits for their goroutines
// and frees the cache. Readers return ErrClosed afterwards. Close is
// idempotent.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.wake)
	m.wake = make(chan struct{})
	m.wakeArmed = false
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	for _, byTag := range m.files {
		for _, fs := range byTag {
			m.dropFileLocked(fs)
		}
	}
	m.mu.Unlock()
	if m.ownAlloc != nil {
		// Extents a Reader still copies from are freed (unmapped) when it
		// releases them.
		m.ownAlloc.Close()
	}
	if m.unreg != nil {
		m.unreg()
	}
}

// isClosed says whether Close was called.
func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// fileLocked returns the index of fk, creating it.
func (m *Manager) fileLocked(fk fileKey) *fileState {
	byTag := m.files[fk.key]
	if byTag == nil {
		byTag = map[string]*fileState{}
		m.files[fk.key] = byTag
	}
	fs := byTag[fk.etag]
	if fs == nil {
		fs = &fileState{fk: fk, parts: map[int64][]*extent{}}
		byTag[fk.etag] = fs
	}
	return fs
}

func (m *Manager) dropFileLocked(fs *fileState) {
	var all []*extent
	fs.each(func(e *extent) { all = append(all, e) })
	for _, e := range all {
		m.dropLocked(e)
	}
	m.forgetFileLocked(fs)
}

// forgetFileLocked removes an empty index from m.files.
func (m *Manager) forgetFileLocked(fs *fileState) {
	if fs.n > 0 {
		return
	}
	byTag := m.files[fs.fk.key]
	if byTag[fs.fk.etag] == fs {
		delete(byTag, fs.fk.etag)
		if len(byTag) == 0 {
			delete(m.files, fs.fk.key)
		}
	}
}

// newExtentLocked registers an in-flight extent for sp (whose bytes are
// already reserved) in fk's index and starts its fetch. The caller holds an
// extra reference when ref is set. r is nil for pre-reads. The index is
// looked up again here because reserving memory may have evicted the last
// extent of fk and forgotten its index.
func (m *Manager) newExtentLocked(fk fileKey, sp span, o origin, r *Reader, ref bool) *extent {
	fs := m.fileLocked(fk)
	e := &extent{fs: fs, off: sp.off, end: sp.end, done: make(chan struct{}), refs: 1, origin: o}
	if ref {
		e.refs++
	}
	fs.insert(e, m.o.PartSize)
	ctx := m.ctx
	m.wg.Add(1)
	if r != nil {
		ctx = r.ctx
		r.wg.Add(1)
		if o == originAhead {
			e.owner = r
			r.aheadInFlight++
			if len(r.ahead) >= 256 {
				r.ahead = slices.DeleteFunc(r.ahead, func(a *extent) bool { return !a.live || a.list == listUsed })
			}
			r.ahead = append(r.ahead, e)
		}
	}
	m.st.requests[o].Add(1)
	go m.fetch(ctx, e, r)
	return e
}

// fetch fills e with one GET and publishes the result.
func (m *Manager) fetch(ctx context.Context, e *extent, r *Reader) {
	defer m.wg.Done()
	if r != nil {
		defer r.wg.Done()
	}
	n := int(e.size())
	key, etag := e.fs.fk.key, e.fs.fk.etag
	var err error
	buf := m.o.Alloc.Alloc(n)
	if len(buf) < n {
		err = fmt.Errorf("prefetch: get %q [%d, %d): allocator gave %d of %d bytes", key, e.off, e.end, len(buf), n)
		if buf != nil {
			m.o.Alloc.Free(buf)
		}
		buf = nil
	} else {
		buf = buf[:n]
		got, gerr := m.o.Getter.GetRange(ctx, key, e.off, buf, etag)
		m.st.fetched.Add(int64(max(got, 0)))
		switch {
		case gerr != nil:
			err = fmt.Errorf("prefetch: get %q [%d, %d): %w", key, e.off, e.end, gerr)
		case got < n:
			err = fmt.Errorf("prefetch: get %q [%d, %d): got %d bytes: %w", key, e.off, e.end, got, ErrShortObject)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e.buf = buf
	e.err = err
	if r != nil && e.origin == originAhead {
		r.aheadInFlight--
	}
	if e.origin == originEpoch {
		m.epochInFlight--
	}
	if err != nil {
		m.st.errors.Add(1)
		e.canceled = ctx.Err() != nil
		if !e.canceled {
			m.log.Debug("prefetch: fetch failed", "key", key, "off", e.off, "len", n, "err", err)
		}
		if e.live {
			m.dropLocked(e)
		}
	} else if e.live {
		if m.keepFreshLocked(e) {
			e.list = listFresh
			m.fresh.pushFront(e)
		} else {
			e.list = listUsed
			m.used.pushFront(e)
		}
	}
	close(e.done)
	m.unrefLocked(e)
	m.signalLocked()
}

// keepFreshLocked says whether a just-fetched extent is protected from
// read-ahead eviction until read: pre-reads still held, and read-ahead of a
// Reader that is still open.
func (m *Manager) keepFreshLocked(e *extent) bool {
	switch e.origin {
	case originEpoch:
		return e.held
	case originAhead:
		return !e.dense && !e.owner.closed.Load()
	}
	return true
}

// signalLocked wakes every goroutine waiting for memory. Several signals
// before the woken goroutines run close one channel: a goroutine that
// waits again takes the new channel and arms it.
func (m *Manager) signalLocked() {
	if m.waiting > 0 && m.wakeArmed {
		close(m.wake)
		m.wake = make(chan struct{})
		m.wakeArmed = false
	}
}

// waitChanLocked returns the channel to wait on for the next signal.
func (m *Manager) waitChanLocked() <-chan struct{} {
	m.wakeArmed = true
	return m.wake
}

// unrefLocked drops one reference; the last one frees a dropped extent.
func (m *Manager) unrefLocked(e *extent) {
	e.refs--
	if e.refs > 0 {
		return
	}
	if !e.live {
		m.freeLocked(e)
	} else if e.list != listNone {
		m.signalLocked() // became evictable
	}
}

// dropLocked removes e from the cache; its memory is freed now or when
// the last reference goes.
func (m *Manager) dropLocked(e *extent) {
	if !e.live {
		return
	}
	m.unlistLocked(e)
	if e.held && e.origin == originEpoch {
		m.lostPreReadLocked(e.fs.fk.key)
	}
	m.unholdLocked(e)
	e.fs.delete(e, m.o.PartSize)
	m.forgetFileLocked(e.fs)
	if e.refs == 0 {
		m.freeLocked(e)
	}
}

// unholdLocked stops counting e against the pre-read share.
func (m *Manager) unholdLocked(e *extent) {
	if e.held {
		e.held = false
		m.epochHeld -= e.size()
	}
}

func (m *Manager) freeLocked(e *extent) {
	if e.freed {
		return
	}
	e.freed = true
	if e.buf != nil {
		m.o.Alloc.Free(e.buf)
		e.buf = nil
	}
	m.inUse -= e.size()
	m.signalLocked()
}

// demoteLocked moves a fetched, unread extent to the read list, where
// read-ahead and pre-reads may evict it.
func (m *Manager) demoteLocked(e *extent) {
	m.unholdLocked(e)
	if e.live && e.list == listFresh {
		m.fresh.remove(e)
		e.list = listUsed
		m.used.pushFront(e)
	}
}

// consumeLocked records that e was read: it moves to the head of the read
// list and stops counting against the pre-read share.
func (m *Manager) consumeLocked(e *extent) {
	m.unholdLocked(e)
	if !e.live {
		return
	}
	if !m.unlistLocked(e) {
		return
	}
	e.list = listUsed
	m.used.pushFront(e)
}

// unlistLocked takes e off the LRU list it is on, if any, and says
// whether it was on one.
func (m *Manager) unlistLocked(e *extent) bool {
	switch e.list {
	case listFresh:
		m.fresh.remove(e)
	case listUsed:
		m.used.remove(e)
	default:
		return false
	}
	e.list = listNone
	return true
}

// evictLocked evicts unreferenced extents from l's tail until need more
// bytes fit in the budget, and says whether they do.
func (m *Manager) evictLocked(l *lru, need int64) bool {
	for e := l.tail; e != nil && m.inUse+need > m.o.MaxMemory; {
		prev := e.prev
		if e.refs == 0 {
			m.dropLocked(e)
			m.st.evictions.Add(1)
		}
		e = prev
	}
	return m.inUse+need <= m.o.MaxMemory
}

func (m *Manager) takeLocked(n int64) {
	m.inUse += n
	m.peak = max(m.peak, m.inUse)
}

// tryReserveLocked reserves n bytes for read-ahead or a pre-read, evicting
// only extents already read; it never waits and fails while a demand read
// waits for memory.
func (m *Manager) tryReserveLocked(n int64, epoch bool) bool {
	if m.demandWaiters > 0 {
		return false
	}
	if epoch && m.epochHeld+n > m.o.EpochMemory {
		return false
	}
	if m.inUse+n > m.o.MaxMemory {
		if m.inUse-m.used.bytes+n > m.o.MaxMemory || !m.evictLocked(&m.used, n) {
			return false
		}
	}
	m.takeLocked(n)
	return true
}

// reserveDemandLocked reserves n bytes for a reader's own read, evicting
// any unreferenced extent, read ones first. When everything is in flight
// or being copied it waits (dropping m.mu) until memory frees; waited says
// so, in which case the cache may have changed. It fails only with ctx's
// error, or ErrClosed when the Manager closes or stop (the reading
// Reader's Close) is closed.
func (m *Manager) reserveDemandLocked(ctx context.Context, stop <-chan struct{}, n int64) (waited bool, err error) {
	for {
		if m.closed {
			return waited, ErrClosed
		}
		select {
		case <-stop:
			return waited, ErrClosed
		default:
		}
		if err := ctx.Err(); err != nil {
			return waited, err
		}
		if m.inUse+n <= m.o.MaxMemory || m.evictLocked(&m.used, n) || m.evictLocked(&m.fresh, n) {
			m.takeLocked(n)
			return waited, nil
		}
		waited = true
		m.st.budgetWaits.Add(1)
		ch := m.waitChanLocked()
		m.waiting++
		m.demandWaiters++
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		case <-stop:
		}
		m.mu.Lock()
		m.waiting--
		m.demandWaiters--
		if m.demandWaiters == 0 {
			// Read-ahead and pre-reads held back for this waiter may go on.
			m.signalLocked()
		}
	}
}
