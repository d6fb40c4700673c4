package namespace

import (
	"context"
	"sync"
	"time"
)

// ListWaitMisses is how many waits for one background listing may give
// up before lookups stop waiting for it, unless more of its waits were
// answered than gave up: a listing that walks a large directory in an
// order the lookups do not follow is then left alone (see Progress.Worth).
const ListWaitMisses = 8

// Progress is how far one directory's background listing has got,
// handed page by page to the lookups that wait for it instead of
// probing the store: after each page every name whose key+"/" sorts at
// or before the page's last decided key (Lister.DecidedUpTo) is known
// present or absent. Waiting instead of probing matters when names are
// opened in listing order without a readdir (a file of paths, a
// benchmark): each probe is a LIST request.
//
// Progress does not lock: the directory's lock guards it, and Wait
// releases that lock while it waits. The zero value has no listing
// under way.
type Progress struct {
	key     string        // decided up to here ("" nothing yet)
	from    int64         // unix ns the listing began
	gen     uint64        // the directory's mutation count then
	advance chan struct{} // closed and replaced at each move; nil when none runs
	seq     uint64        // listings started
	hits    int           // waits this listing answered
	misses  int           // waits that gave up on it
}

// Start records that a background listing begins at now (unix ns) with
// the directory's mutation count at gen, and resets the wait counts.
func (p *Progress) Start(now int64, gen uint64) {
	p.key, p.from, p.gen = "", now, gen
	p.advance = make(chan struct{})
	p.seq++
	p.hits, p.misses = 0, 0
}

// Running reports whether a listing is under way (Start without End).
func (p *Progress) Running() bool { return p.advance != nil }

// From is when the listing under way (or the last) began, unix ns: an
// entry seen before it was not confirmed by this listing.
func (p *Progress) From() int64 { return p.from }

// Gen is the directory's mutation count when the listing began.
func (p *Progress) Gen() uint64 { return p.gen }

// Seq counts the listings started; a waiter compares it to tell a later
// listing from the one it waited for.
func (p *Progress) Seq() uint64 { return p.seq }

// Decided reports whether the listing has decided key (a child's key
// followed by "/", so that a directory "a/" and a file "a" sort alike).
func (p *Progress) Decided(key string) bool { return key <= p.key }

// Advance records that every key up to key has been decided and wakes
// the waiters; a key at or before the current one, or no listing under
// way, changes nothing.
func (p *Progress) Advance(key string) {
	if p.advance == nil || key <= p.key {
		return
	}
	p.key = key
	close(p.advance)
	p.advance = make(chan struct{})
}

// End records that the listing has ended (completed or not) and wakes
// the waiters.
func (p *Progress) End() {
	if p.advance != nil {
		close(p.advance)
		p.advance = nil
	}
}

// Wait waits, with mu (the lock guarding p, held on entry and on return)
// released, until the listing under way moves or ends (true), or t fires
// or ctx ends (false). It returns true at once when no listing runs.
func (p *Progress) Wait(ctx context.Context, t *time.Timer, mu sync.Locker) bool {
	ch := p.advance
	if ch == nil {
		return true
	}
	mu.Unlock()
	defer mu.Lock()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// Hit counts a wait that the listing answered.
func (p *Progress) Hit() { p.hits++ }

// Miss counts a wait that gave up (the listing did not get there in
// time).
func (p *Progress) Miss() { p.misses++ }

// Hits is the count of Hit since Start.
func (p *Progress) Hits() int { return p.hits }

// Misses is the count of Miss since Start.
func (p *Progress) Misses() int { return p.misses }

// Worth reports whether lookups should still wait for this listing:
// false once ListWaitMisses waits gave up, unless more were answered.
func (p *Progress) Worth() bool {
	return p.misses < ListWaitMisses || p.hits > p.misses
}

// Await waits for the listing under way to decide name (whose key is
// key, the child's key followed by "/") in the directory cached in c,
// with mu (the lock guarding p and c) held on entry and on return and
// released while waiting. fresh(t) says whether a complete listing begun
// at t still holds (the metadata TTL).
//
// decided is false, and the caller probes the store instead, when the
// listing ends incomplete or fails, does not reach name within wait,
// when c changed under it (Cache.Gen), when ctx ends, or when this
// listing has stopped being worth waiting for (Worth). A wait that ends
// with the listing past name counts as a Hit, one that runs out of time
// as a Miss. Otherwise found says whether name exists, and e is its
// entry.
func (p *Progress) Await(ctx context.Context, mu sync.Locker, c *Cache, name, key string, wait time.Duration, fresh func(t int64) bool) (e Entry, found, decided bool) {
	if !p.Worth() {
		return Entry{}, false, false
	}
	var timer *time.Timer
	for {
		if !p.Running() {
			// The listing ended; if it completed, c is the directory.
			if fresh(c.CompleteAt()) {
				e, ok := c.Entry(name)
				return e, ok, true
			}
			return Entry{}, false, false
		}
		if c.Gen() != p.Gen() {
			return Entry{}, false, false
		}
		if p.Decided(key) {
			if timer != nil {
				p.Hit()
			}
			e, ok := c.Entry(name)
			if ok && e.Seen >= p.From() {
				return e, true, true
			}
			return Entry{}, false, true
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		if !p.Wait(ctx, timer, mu) {
			if ctx.Err() == nil {
				p.Miss()
			}
			return Entry{}, false, false
		}
	}
}

// AwaitEnd waits, at most wait, until the listing under way (if any)
// has ended, with mu (the lock guarding p) held on entry and on return
// and released while waiting; so that a readdir started meanwhile reads
// the listing it leaves instead of listing the directory a second time.
// A listing that takes longer (a large directory) is not waited for to
// the end, and a later listing is not waited for at all. It returns
// early when ctx ends.
func (p *Progress) AwaitEnd(ctx context.Context, mu sync.Locker, wait time.Duration) {
	if !p.Running() {
		return
	}
	seq := p.seq
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for p.seq == seq && p.Running() {
		if !p.Wait(ctx, timer, mu) {
			return
		}
	}
}
