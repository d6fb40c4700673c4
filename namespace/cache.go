package namespace

import "slices"

// Cache is what one directory knows of its child names: the entries
// learned from listings, probes and local mutations (the positive
// cache), the names known absent (the negative cache, Negative), and
// whether the entries are the whole directory: a complete listing that
// no mutation has invalidated since (CompleteAt). Freshness is the
// caller's: entries carry when they were learned (Entry.Seen), and the
// caller compares that, and CompleteAt, with its TTLs.
//
// Cache does not lock: the directory's lock guards it. The zero value is
// empty and ready.
type Cache struct {
	ents map[string]Entry
	neg  Negative
	// completeAt: start (unix ns) of the last complete listing that no
	// mutation has invalidated since; 0 if none.
	completeAt int64
	// gen counts mutations; a listing that saw it change while it ran
	// does not make the directory complete (Complete).
	gen uint64
	// listed: some listing completed, ever.
	listed bool
}

// Entry returns what is known of name, and whether anything is.
func (c *Cache) Entry(name string) (Entry, bool) {
	e, ok := c.ents[name]
	return e, ok
}

// Len is the number of entries held.
func (c *Cache) Len() int { return len(c.ents) }

// Names returns the names of the entries held that are not in skip,
// sorted.
func (c *Cache) Names(skip map[string]bool) []string {
	names := make([]string, 0, len(c.ents))
	for name := range c.ents {
		if !skip[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Subdirs returns, sorted, the subdirectory names held other than self
// (see WalkTargets).
func (c *Cache) Subdirs(self string) []string { return WalkTargets(c.ents, self) }

// Absent reports whether name is known absent, fresh(t) saying whether
// what was learned at t still holds (the negative TTL).
func (c *Cache) Absent(name string, fresh func(t int64) bool) bool {
	return c.neg.Absent(name, fresh)
}

// AbsentLen is the number of names known absent.
func (c *Cache) AbsentLen() int { return c.neg.Len() }

// Learn records e for name as found in the store (a listing page, a
// probe); it does not change whether the cache is complete.
func (c *Cache) Learn(name string, e Entry) {
	if c.ents == nil {
		c.ents = map[string]Entry{}
	}
	c.ents[name] = e
	c.neg.Forget(name)
}

// SetAbsent records that name was found absent at now (unix ns).
func (c *Cache) SetAbsent(name string, now int64) {
	c.neg.Add(name, now)
	delete(c.ents, name)
}

// Note records e for name after a local mutation: the cache is no
// longer complete (the listed order no longer matches).
func (c *Cache) Note(name string, e Entry) {
	c.Learn(name, e)
	c.invalidate()
}

// Gone records that name was removed at now.
func (c *Cache) Gone(name string, now int64) {
	c.SetAbsent(name, now)
	c.invalidate()
}

// Forget drops all that is known of name (the next lookup asks the
// store), e.g. after a read found the object changed.
func (c *Cache) Forget(name string) {
	delete(c.ents, name)
	c.neg.Forget(name)
	c.invalidate()
}

// ForgetAbsent drops name from the negative cache only (a file of that
// name is being written).
func (c *Cache) ForgetAbsent(name string) { c.neg.Forget(name) }

func (c *Cache) invalidate() {
	c.completeAt = 0
	c.gen++
}

// Gen counts the mutations so far; a listing notes it when it starts and
// passes it to Complete.
func (c *Cache) Gen() uint64 { return c.gen }

// CompleteAt is the start (unix ns) of the complete listing the entries
// reflect, 0 if they are not the whole directory.
func (c *Cache) CompleteAt() int64 { return c.completeAt }

// Listed reports whether a listing has ever completed.
func (c *Cache) Listed() bool { return c.listed }

// Complete records that a listing begun at start (unix ns), when Gen was
// gen, has seen the whole directory: entries not seen since start are
// dropped and the cache is complete. It does nothing and returns false
// when a mutation happened meanwhile.
func (c *Cache) Complete(start int64, gen uint64) bool {
	if gen != c.gen {
		return false
	}
	for name, e := range c.ents {
		if e.Seen < start {
			delete(c.ents, name)
		}
	}
	c.completeAt = start
	c.listed = true
	return true
}

// Known is what the cache can say of a name without asking the store.
type Known int

const (
	// Unknown: the store must be asked (a probe, or a listing's page).
	Unknown Known = iota
	// Present: the entry returned is fresh.
	Present
	// Absent: the name does not exist (a fresh complete listing lacks
	// it, it was found absent within the negative TTL, or it cannot be a
	// POSIX name).
	Absent
)

// Lookup answers name from the cache: Present with its entry when that
// is fresh (fresh(Entry.Seen), the metadata TTL); Absent when a complete
// listing is fresh (fresh(CompleteAt)) and lacks it, when it was found
// absent within freshNeg (the negative TTL), or when it is not a valid
// name (ValidName); else Unknown.
func (c *Cache) Lookup(name string, fresh, freshNeg func(t int64) bool) (Entry, Known) {
	if e, ok := c.ents[name]; ok && fresh(e.Seen) {
		return e, Present
	}
	if fresh(c.completeAt) || c.neg.Absent(name, freshNeg) || !ValidName(name) {
		return Entry{}, Absent
	}
	return Entry{}, Unknown
}
