package prefetch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Reader reads one object version for one open handle. ReadAt is safe for
// concurrent use; Close must be called once, after which ReadAt returns
// ErrClosed.
type Reader struct {
	m      *Manager
	f      File
	fk     fileKey
	g      geometry
	ctx    context.Context // cancelled by Close: ends this Reader's fetches
	cancel context.CancelFunc
	wg     sync.WaitGroup // this Reader's fetch goroutines
	closed atomic.Bool    // set under Manager.mu

	mu         sync.Mutex // guards ss, readBytes, wholeNoted, randomReads, denseNext
	ss         streamSet
	readBytes  int64 // bytes returned by ReadAt
	wholeNoted bool  // noteWholeRead was called
	// randomReads counts reads that belonged to no sequential stream;
	// from denseRandomReads on, the file is fetched whole (see plan) up
	// to denseNext.
	randomReads int
	denseNext   int64

	// Guarded by Manager.mu.
	aheadInFlight int       // read-ahead GETs in flight
	ahead         []*extent // read-ahead extents created, demoted at Close
	firstDone     bool      // the first read has found its first extent
}

// File returns the object version this Reader reads.
func (r *Reader) File() File { return r.f }

// ReadAt reads len(p) bytes at off into p. The count is short only at the
// end of the object, and 0 with a nil error at or past it. Errors of the
// Getter are returned wrapped (errors.Is works on objclient's sentinels);
// a cancelled ctx returns promptly with ctx.Err(); after Close, ErrClosed.
// Every wait (for a GET, or for memory under the budget) also ends
// promptly, with ErrClosed, when the Reader or its Manager is closed, even
// if the Getter ignores its context.
func (r *Reader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := r.visit(ctx, off, int64(len(p)), func(at int64, b []byte) (bool, error) {
		copy(p[at-off:], b)
		return false, nil
	}, nil)
	return int(n), err
}

// View calls fn with the object's bytes [off, off+n) (clipped to the end of
// the object) in order, in one or more chunks that are the cache's own
// buffers (from Options.Alloc: pinned memory when gdd injects it), so a
// caller can DMA or checksum them without a copy. at is the object offset
// of b's first byte. b is valid only during the call and must not be
// modified. An error from fn stops the walk and is returned as is. View
// returns the number of bytes passed to fn; errors as ReadAt.
func (r *Reader) View(ctx context.Context, off, n int64, fn func(at int64, b []byte) error) (int64, error) {
	return r.visit(ctx, off, n, func(at int64, b []byte) (bool, error) { return false, fn(at, b) }, nil)
}

// Borrow returns the object's bytes [off, off+len(p)) (clipped to the end
// of the object), for a caller that hands them to a system call after
// returning (a FUSE reply written with writev). When the range lies in one
// cached buffer, b is that buffer itself, not a copy: it stays valid, and
// its memory counted in the budget, until release is called, and must not
// be modified. Otherwise b is p, filled as by ReadAt. release must be
// called exactly once in every case, also on an error (then a no-op).
// Errors as ReadAt.
func (r *Reader) Borrow(ctx context.Context, p []byte, off int64) (b []byte, release func(), err error) {
	want := min(int64(len(p)), max(r.f.Size-off, 0))
	var held []*extent
	_, err = r.visit(ctx, off, want, func(at int64, c []byte) (bool, error) {
		if at == off && int64(len(c)) == want {
			b = c
			return true, nil
		}
		copy(p[at-off:], c)
		return false, nil
	}, &held)
	release = func() {
		for _, e := range held {
			r.m.release(e, true)
		}
		held = nil
	}
	switch {
	case err != nil:
		release()
		return nil, func() {}, err
	case b != nil:
		return b, release, nil
	}
	return p[:want], func() {}, nil // copied (or nothing to read)
}

// visit walks [off, off+n) through the cache, fetching what is missing,
// and calls fn with each extent's bytes in order. When fn returns true
// (and hold is non-nil) the extent is appended to *hold instead of
// released, for the caller to release with release(e, true).
func (r *Reader) visit(ctx context.Context, off, n int64, fn func(at int64, b []byte) (bool, error), hold *[]*extent) (int64, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: %d", ErrInvalidOffset, off)
	}
	if r.closed.Load() {
		return 0, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if n <= 0 || off >= r.f.Size {
		return 0, nil
	}
	end := r.f.Size
	if n < r.f.Size-off {
		end = off + n
	}
	mode, piece := r.plan(off, end)
	cur := off
	retried := int64(-1) // the offset already retried after a shared fetch failed
	canceled := 0        // other handles' fetches found cut short at cur
	for cur < end {
		e, own, err := r.acquire(ctx, cur, end, mode, piece)
		if err != nil {
			return cur - off, err
		}
		// Every wait ends with the fetch, the caller's ctx (a FUSE
		// interrupt), this Reader's Close or the Manager's Close (which
		// cancels r.ctx): a GET that ignores its context cannot hold the
		// read.
		select {
		case <-e.done:
		case <-ctx.Done():
			r.m.release(e, false)
			return cur - off, ctx.Err()
		case <-r.ctx.Done():
			r.m.release(e, false)
			return cur - off, ErrClosed
		}
		if e.err != nil {
			err, wasCanceled := e.err, e.canceled
			r.m.release(e, false)
			if wasCanceled && !own && canceled < maxCanceledRetries {
				// Another handle's fetch was cut short by its Close; the
				// extent left the index, so the next acquire fetches anew.
				canceled++
				continue
			}
			if r.closed.Load() || r.m.isClosed() {
				return cur - off, ErrClosed
			}
			if err := ctx.Err(); err != nil {
				return cur - off, err
			}
			if !own && retried != cur {
				// A read-ahead, pre-read or other reader's GET failed: try
				// once with our own demand GET before failing the read.
				retried = cur
				continue
			}
			return cur - off, err
		}
		if e.off > cur || e.end <= cur || int64(len(e.buf)) != e.size() {
			// Cannot happen: acquire returns an extent holding cur. Fail
			// rather than loop without progress.
			r.m.release(e, false)
			return cur - off, fmt.Errorf("prefetch: internal error: extent [%d, %d) (%d bytes) for byte %d of %q", e.off, e.end, len(e.buf), cur, r.f.Key)
		}
		canceled, retried = 0, -1
		b := e.buf[cur-e.off : min(e.end, end)-e.off]
		keep, err := fn(cur, b)
		if keep && hold != nil {
			*hold = append(*hold, e)
		} else {
			r.m.release(e, true)
		}
		if err != nil {
			return cur - off, err
		}
		cur += int64(len(b))
	}
	r.m.st.read.Add(end - off)
	r.noteRead(end - off)
	return end - off, nil
}

// maxCanceledRetries bounds how often one ReadAt refetches after finding
// other handles' fetches cut short by their Close (each such extent leaves
// the index, so a few suffice); past it the error is returned.
const maxCanceledRetries = 64

// denseRandomReads is how many random reads of one handle make its file's
// whole fetch worth it (when the file fits in half the budget).
const denseRandomReads = 16

// fetchWholeLocked goes on fetching the whole file, for sustained random
// reads of a file that fits well in the budget (an LMDB, HDF5 or zip data
// file read by index): besides each read's own granule, the file is
// fetched front to back in part-sized read-ahead GETs (within the budget
// and the concurrency cap, resumed by later reads), so that later random
// reads are served from memory. The bytes fetched stay below the file's
// size plus the granules of the first reads. One file at a time, and its
// extents go on the read list, where other read-ahead may evict them:
// whole-file fetches never crowd out the rest of the budget. r.mu and
// m.mu are held.
func (r *Reader) fetchWholeLocked() {
	m := r.m
	if m.denseOwner != nil && m.denseOwner != r && !m.denseOwner.closed.Load() {
		return
	}
	m.denseOwner = r
	r.denseNext = m.issueLocked(r, r.denseNext, r.f.Size, r.f.Size, r.g.partSize, originAhead, true)
	if r.denseNext >= r.f.Size {
		m.denseOwner = nil
	}
}

// plan classifies the read, issues read-ahead for a sequential stream and
// returns how to size a demand miss.
func (r *Reader) plan(off, end int64) (readMode, int64) {
	m := r.m
	if r.f.Size <= m.o.SmallFileSize {
		return modeWhole, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.ss.observe(off, end)
	if s.window == 0 {
		r.randomReads++
		spans := partOf(off, r.g.partSize) != partOf(end-1, r.g.partSize)
		dense := r.randomReads >= denseRandomReads && r.f.Size <= m.o.MaxMemory/2 && r.denseNext < r.f.Size
		if spans || dense {
			m.mu.Lock()
			if spans {
				// A large random read: fetch its parts concurrently if memory allows.
				m.issueLocked(r, alignDown(off, r.g.gran), end, alignUp(end, r.g.gran), r.g.partSize, originDemand, false)
			}
			if dense {
				r.fetchWholeLocked()
			}
			m.mu.Unlock()
		}
		return modeRandom, 0
	}
	piece := min(s.window, r.g.partSize)
	from := max(s.raEnd, off)
	target := min(r.f.Size, s.next+s.window)
	if from < target {
		m.mu.Lock()
		s.raEnd = m.issueLocked(r, from, target, r.f.Size, piece, originAhead, false)
		m.mu.Unlock()
	}
	return modeSeq, piece
}

// issueLocked makes sure [from, to) is cached or in flight, fetching pieces
// of at most piece bytes (clipped to limit) with memory reserved without
// waiting. It stops at the first piece it cannot start (budget, or the
// read-ahead concurrency cap) and returns how far the range is covered.
// dense marks the extents of a whole-file fetch (see plan).
func (m *Manager) issueLocked(r *Reader, from, to, limit, piece int64, o origin, dense bool) int64 {
	x := from
	for x < to {
		if m.closed || r.closed.Load() {
			break
		}
		fs := m.fileLocked(r.fk) // again each time: eviction may forget an index
		e, _, gapEnd := fs.find(x, m.o.PartSize)
		if e != nil {
			x = e.end
			continue
		}
		if o == originAhead && r.aheadInFlight >= m.o.MaxConcurrency {
			break
		}
		sp := r.g.aheadSpan(x, piece, min(gapEnd, limit))
		if sp.end <= x {
			break // nothing to fetch here (at the end of the object): never loop in place
		}
		if !m.tryReserveLocked(sp.len(), false) {
			m.st.aheadSkipped.Add(1)
			m.forgetFileLocked(fs)
			break
		}
		ne := m.newExtentLocked(r.fk, sp, o, r, false)
		ne.dense = dense // before the fetch ends: it takes m.mu to file ne
		x = sp.end
	}
	return x
}

// acquire returns a referenced extent (cached or in flight) holding cur,
// starting a demand fetch sized by mode when there is none (own).
func (r *Reader) acquire(ctx context.Context, cur, end int64, mode readMode, piece int64) (e *extent, own bool, err error) {
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var reserved span // bytes reserved for a fetch not yet started
	for {
		if m.closed || r.closed.Load() {
			m.inUse -= reserved.len()
			return nil, false, ErrClosed
		}
		fs := m.fileLocked(r.fk)
		var gapStart, gapEnd int64
		e, gapStart, gapEnd = fs.find(cur, m.o.PartSize)
		if e != nil {
			if reserved.len() > 0 {
				m.inUse -= reserved.len()
				m.signalLocked()
			}
			e.refs++
			if e.list != listNone {
				m.st.hits.Add(1)
			} else {
				m.st.joins.Add(1)
			}
			if !r.firstDone {
				r.firstDone = true
				if e.origin == originEpoch {
					m.st.epochHitOpens.Add(1)
				}
			}
			return e, false, nil
		}
		if reserved.len() > 0 {
			// Memory was reserved while waiting; keep the part of that span
			// still free, which holds cur.
			sp := span{max(reserved.off, gapStart), min(reserved.end, gapEnd)}
			m.inUse -= reserved.len() - sp.len()
			m.signalLocked()
			return r.startDemandLocked(sp), true, nil
		}
		sp := r.g.demandSpan(mode, cur, end, piece, gapStart, gapEnd)
		if sp.off > cur || sp.end <= cur {
			// Cannot happen (demandSpan's contract, fuzzed): fail rather
			// than start an extent that does not hold cur.
			return nil, false, fmt.Errorf("prefetch: internal error: demand span [%d, %d) for byte %d of %q (size %d)", sp.off, sp.end, cur, r.f.Key, r.f.Size)
		}
		waited, err := m.reserveDemandLocked(ctx, r.ctx.Done(), sp.len())
		if err != nil {
			return nil, false, err
		}
		if !waited {
			return r.startDemandLocked(sp), true, nil
		}
		reserved = sp // the cache may have changed while we waited: look again
	}
}

func (r *Reader) startDemandLocked(sp span) *extent {
	m := r.m
	m.st.misses.Add(1)
	if !r.firstDone {
		r.firstDone = true
	}
	return m.newExtentLocked(r.fk, sp, originDemand, r, true)
}

// release drops a reference taken by acquire; consumed says the bytes were
// read.
func (m *Manager) release(e *extent, consumed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if consumed {
		m.consumeLocked(e)
	}
	m.unrefLocked(e)
}

// noteRead tracks whether the handle has read the whole object (for epoch
// detection).
func (r *Reader) noteRead(n int64) {
	r.mu.Lock()
	r.readBytes += n
	whole := false
	if !r.wholeNoted && r.readBytes >= r.f.Size {
		r.wholeNoted = true
		whole = true
	}
	r.mu.Unlock()
	if whole {
		r.m.noteWholeRead(r.f)
		r.m.offerDisk(r.f)
	}
}

// Close ends the Reader's fetches, waits for their goroutines and lets the
// cache evict what it read ahead and nobody read. It is idempotent and
// always returns nil.
func (r *Reader) Close() error {
	m := r.m
	m.mu.Lock()
	if r.closed.Load() {
		m.mu.Unlock()
		return nil
	}
	r.closed.Store(true)
	if m.denseOwner == r {
		m.denseOwner = nil
	}
	for _, e := range r.ahead {
		m.demoteLocked(e)
	}
	r.ahead = nil
	m.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return nil
}
