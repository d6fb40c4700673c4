package fusefs

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/os2g/os2g/namespace"
)

// Background listings of a directory: after lookup misses in a directory
// never listed whole (cold), when a large listing went stale, and ahead of
// a detected tree walk (pre-listing); lookups that wait for the listing's
// pages instead of probing; readdirs that wait for it to end.

// refreshMinEntries: a directory with at least this many cached entries
// whose listing went stale is listed again in the background on the next
// lookup miss, so that a second pass over a large directory (a training
// epoch after MetadataTTL) costs N/1000 LISTs instead of one probe per
// file. Lookups meanwhile are answered by probes (refreshStale).
const refreshMinEntries = 16

// coldListMisses: a directory with no fresh complete listing that gets
// this many lookup misses within MetadataTTL (names opened without ever
// reading the directory, e.g. a dataset index) is listed in the
// background, so that later lookups need no LIST and the prefetcher
// learns the directory (epoch pre-reading). Lookups meanwhile are
// answered by probes.
const coldListMisses = 8

// coldListBackoff: after a failed background listing triggered by misses,
// none is tried again for this long (lookups keep using probes).
const coldListBackoff = time.Minute

// listWaitMisses is how many waits for one background listing may give
// up before lookups stop waiting for it, unless more of its waits were
// answered than gave up: a listing that walks a large directory in an
// order the lookups do not follow is then left alone.
const listWaitMisses = 8

// awaitListingLocked waits for the background listing under way (d.mu
// held on entry and on return, released while waiting) to decide name.
// decided is false when the listing ends, fails or does not reach name
// within Options.listWait, when ents changed under it, or when this listing has
// stopped being worth waiting for; the caller then probes. Waiting
// instead of probing matters when names are opened in listing order
// without a readdir (a file of paths, a benchmark): each probe is a LIST
// request, and on servers that walk the directory for every prefix
// listing (versitygw's posix backend) a probe costs the server about as
// much CPU as listing a thousand names.
func (d *dirNode) awaitListingLocked(ctx context.Context, name string) (ent dirent, found, decided bool) {
	if d.waitMisses >= listWaitMisses && d.waitHits <= d.waitMisses {
		return dirent{}, false, false
	}
	key := namespace.ChildKey(d.key, name) + "/"
	var timer *time.Timer
	for {
		if d.listAdvance == nil {
			// The listing ended; if it completed, ents is the directory.
			if d.fsys.fresh(d.completeAt, d.fsys.o.MetadataTTL) {
				e, ok := d.ents[name]
				return e, ok, true
			}
			return dirent{}, false, false
		}
		if d.gen != d.listGen {
			return dirent{}, false, false
		}
		if key <= d.listKey {
			if timer != nil {
				d.waitHits++
			}
			e, ok := d.ents[name]
			if ok && e.Seen >= d.listFrom {
				return e, true, true
			}
			return dirent{}, false, true
		}
		if timer == nil {
			timer = time.NewTimer(d.fsys.o.listWait)
			defer timer.Stop()
		}
		if !d.waitListAdvanceLocked(ctx, timer) {
			if ctx.Err() == nil {
				d.waitMisses++
			}
			return dirent{}, false, false
		}
	}
}

// waitListAdvanceLocked waits, with d.mu released, until the background
// listing under way moves or ends (true), or t fires or ctx ends (false).
// d.mu is held on entry and on return; d.listAdvance must be non-nil.
func (d *dirNode) waitListAdvanceLocked(ctx context.Context, t *time.Timer) bool {
	ch := d.listAdvance
	d.mu.Unlock()
	defer d.mu.Lock()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// listedUpToLocked records that the background listing has decided every
// name up to key and wakes the lookups waiting for it; d.mu must be held.
func (d *dirNode) listedUpToLocked(key string) {
	if d.listAdvance == nil || key <= d.listKey {
		return
	}
	d.listKey = key
	close(d.listAdvance)
	d.listAdvance = make(chan struct{})
}

// noteMissLocked counts a lookup miss and reports whether it is the one
// that should start a background listing; d.mu must be held.
func (d *dirNode) noteMissLocked() bool {
	f := d.fsys
	now := f.now()
	if d.coldFailAt != 0 && now-d.coldFailAt < int64(coldListBackoff) {
		return false
	}
	if !f.fresh(d.missAt, f.o.MetadataTTL) {
		d.misses, d.missAt = 0, now
	}
	d.misses++
	return d.misses >= coldListMisses
}

// refreshKind says why a background listing runs, which decides whether
// lookup misses wait for it (awaitListingLocked) and how it pages.
type refreshKind int

const (
	// refreshCold: lookup misses in a directory never listed whole; they
	// wait for it, and its first page is short (firstTrackedPage).
	refreshCold refreshKind = iota
	// refreshStale: a directory listed before whose listing went stale;
	// its cached names answer most lookups, misses probe as before.
	refreshStale
	// refreshWalk: a subdirectory listed ahead of a tree walk
	// (preListChildren), within the walk's entry budget.
	refreshWalk
)

// startRefreshLocked marks a background listing of d as under way, for
// refresh to run; d.mu must be held and d.refreshing false.
func (d *dirNode) startRefreshLocked(kind refreshKind) {
	d.refreshing = true
	d.misses, d.missAt = 0, 0
	d.listKey, d.listFrom, d.listGen = "", d.fsys.now(), d.gen
	d.listAdvance = make(chan struct{})
	d.listKind = kind
	d.listSeq++
	d.waitHits, d.waitMisses = 0, 0
}

// awaitRefresh waits, at most Options.refreshWait, until the background listing
// of d under way (if any) has ended, so that a readdir started meanwhile
// reads the listing it leaves instead of listing the directory a second
// time; a listing that takes longer (a large directory) is not waited for
// to the end, and a later background listing is not waited for at all.
func (d *dirNode) awaitRefresh(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.refreshing {
		return
	}
	seq := d.listSeq
	timer := time.NewTimer(d.fsys.o.refreshWait)
	defer timer.Stop()
	for d.refreshing && d.listSeq == seq && d.listAdvance != nil {
		if !d.waitListAdvanceLocked(ctx, timer) {
			return
		}
	}
}

// preListMax and preListConcurrency bound the subdirectories that one
// detected walk has listed in the background, and how many such listings
// run at a time on the mount; walkWindow is how close together two
// subdirectory listings must start to count as a walk.
const (
	preListMax = 1024
	walkWindow = 10 * time.Second
)

// The entry budget of one walk's background listings, and how many run
// at a time on the mount, are Options.preListEntries and
// Options.preListConcurrency.

// noteWalk records that a readdir of d has started listing it and, on an
// immutable mount, when this is the second subdirectory of d's parent to
// be listed within walkWindow, has the parent's other subdirectories
// listed in the background (once per parent; see preListChildren). d.mu
// must not be held: this locks the parent.
func (d *dirNode) noteWalk() {
	f := d.fsys
	if !f.o.Immutable {
		return
	}
	self, pi := d.Parent()
	if pi == nil {
		return
	}
	p, ok := pi.Operations().(*dirNode)
	if !ok {
		return
	}
	now := f.now()
	p.mu.Lock()
	if p.preListed {
		p.mu.Unlock()
		return
	}
	if now-p.walkAt > int64(walkWindow) {
		p.walked = 0
	}
	p.walkAt = now
	p.walked++
	var names []string
	if p.walked >= 2 && f.fresh(p.completeAt, f.o.MetadataTTL) {
		p.preListed = true
		for name, e := range p.ents {
			if e.Dir && name != self { // self is being listed by its readdir
				names = append(names, name)
			}
		}
	}
	p.mu.Unlock()
	if names != nil {
		slices.Sort(names)
		p.preListChildren(names)
	}
}

// preListChildren lists in the background, Options.preListConcurrency at a time
// and in name order, up to preListMax of d's subdirectories names that
// the kernel has looked up (READDIRPLUS does for every entry of an
// immutable mount's readdir). A tree walk such as torchvision's
// ImageFolder scan (os.scandir of the root, then of each class directory
// in turn, in sorted order) then finds the classes after the second
// listed already, instead of waiting for one directory's LISTs after
// another: with a thousand classes of a thousand images each on S3, that
// is two thousand LIST round trips in a row.
func (d *dirNode) preListChildren(names []string) {
	f := d.fsys
	var kids []*dirNode
	for _, name := range names[:min(len(names), preListMax)] {
		if ch := d.GetChild(name); ch != nil {
			if c, ok := ch.Operations().(*dirNode); ok {
				kids = append(kids, c)
			}
		}
	}
	budget := new(atomic.Int64)
	budget.Store(d.fsys.o.preListEntries)
	f.goBackground(func() {
		for _, c := range kids {
			select {
			case f.preListSem <- struct{}{}:
			case <-f.bg.Done():
				return
			}
			if budget.Load() <= 0 {
				<-f.preListSem
				return
			}
			f.goBackground(func() {
				defer func() { <-f.preListSem }()
				c.preList(budget)
			})
		}
	})
}

// preList lists d in the background within budget (entries, shared by
// the walk's listings) unless it has been listed (or is being listed) by
// then.
func (d *dirNode) preList(budget *atomic.Int64) {
	f := d.fsys
	d.mu.Lock()
	if d.refreshing || f.fresh(d.completeAt, f.o.MetadataTTL) {
		d.mu.Unlock()
		return
	}
	d.startRefreshLocked(refreshWalk)
	d.mu.Unlock()
	d.refresh(refreshWalk, budget)
}

// refresh lists d completely in the background (under the mount's bg
// context, cancelled at unmount), updating its cache and the
// prefetcher's view of the directory (NoteDir, as readdir does), then
// clears d.refreshing. A failure is logged and dropped: nothing is marked
// absent, and lookups keep using probes.
func (d *dirNode) refresh(kind refreshKind, budget *atomic.Int64) {
	failed := false
	defer func() {
		d.mu.Lock()
		d.refreshing = false
		if d.listAdvance != nil {
			close(d.listAdvance)
			d.listAdvance = nil
		}
		if failed {
			d.coldFailAt = d.fsys.now()
		}
		d.mu.Unlock()
	}()
	h := &dirHandle{d: d, track: true, shortFirst: kind == refreshCold}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.start(true)
	for !h.eof {
		if budget != nil && budget.Load() <= 0 {
			return // the walk's budget is spent: d stays incompletely listed
		}
		h.queue, h.qi = h.queue[:0], 0
		if errno := h.fetch(d.fsys.bg); errno != 0 {
			failed = true
			d.fsys.log.Warn("background listing failed", "prefix", d.key, "errno", errno)
			return
		}
		if budget != nil {
			budget.Add(-int64(len(h.queue))) // this page's entries
		}
	}
}
