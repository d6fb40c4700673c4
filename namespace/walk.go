package namespace

import (
	"slices"
	"time"
)

// Two detectors that decide when a directory is worth listing in the
// background instead of answering lookups one probe at a time. Neither
// locks: the directory's own lock guards them. Times are unix ns.

// ColdListMisses: a directory with no fresh complete listing that gets
// this many lookup misses within the metadata TTL (names opened without
// ever reading the directory, e.g. a dataset index) is listed in the
// background, so that later lookups need no LIST.
const ColdListMisses = 8

// ColdListBackoff: after a failed background listing, misses start none
// again for this long (lookups keep using probes).
const ColdListBackoff = time.Minute

// ColdMisses counts one directory's lookup misses, the cache could not
// answer, and says which one should start a background listing.
// The zero value counts from nothing.
type ColdMisses struct {
	n        int   // misses since at
	at       int64 // first miss of this count
	failedAt int64 // when a background listing last failed; 0 if never
}

// Note counts a miss at now and reports whether it is the
// ColdListMisses-th since the count began, with fresh(t) saying whether
// a count begun at t still holds (within the metadata TTL; t is 0 for
// no count). It reports false for ColdListBackoff after Failed.
func (c *ColdMisses) Note(now int64, fresh func(t int64) bool) bool {
	if c.failedAt != 0 && now-c.failedAt < int64(ColdListBackoff) {
		return false
	}
	if !fresh(c.at) {
		c.n, c.at = 0, now
	}
	c.n++
	return c.n >= ColdListMisses
}

// Reset starts the count over (a background listing has started).
func (c *ColdMisses) Reset() { c.n, c.at = 0, 0 }

// Failed records that a background listing failed at now.
func (c *ColdMisses) Failed(now int64) { c.failedAt = now }

// FailedAt is when a background listing last failed (unix ns), 0 if never.
func (c *ColdMisses) FailedAt() int64 { return c.failedAt }

// WalkWindow is how close together two subdirectory listings must start
// to count as a tree walk.
const WalkWindow = 10 * time.Second

// Walk detects a tree walk over one directory's subdirectories (such as
// torchvision's ImageFolder scan: os.scandir of the root, then of each
// class directory in turn): two subdirectories whose listings start
// within WalkWindow of each other. It fires once. The zero value has
// seen nothing.
type Walk struct {
	n    int   // subdirectory listings started since at
	at   int64 // the latest
	done bool  // fired
}

// Note records that a subdirectory's listing started at now and reports
// true the first time the walk is detected while complete (the parent's
// listing is fresh and whole, so its subdirectories are known); never
// again after that.
func (w *Walk) Note(now int64, complete bool) bool {
	if w.done {
		return false
	}
	if now-w.at > int64(WalkWindow) {
		w.n = 0
	}
	w.at = now
	w.n++
	if w.n >= 2 && complete {
		w.done = true
		return true
	}
	return false
}

// Done reports whether the walk has been detected.
func (w *Walk) Done() bool { return w.done }

// WalkTargets returns, sorted, the subdirectory names in ents other than
// self (the one whose listing is under way): what a detected walk lists
// ahead.
func WalkTargets(ents map[string]Entry, self string) []string {
	var names []string
	for name, e := range ents {
		if e.Dir && name != self {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
