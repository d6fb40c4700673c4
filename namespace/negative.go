package namespace

// MaxNegative bounds a directory's negative cache: past it the cache is
// emptied and starts over, so a scan of absent names holds at most this
// many.
const MaxNegative = 4096

// Negative is a directory's negative cache: names known absent, each
// with when it was learned (unix ns). It does not lock: the directory's
// own lock guards it. The zero value is empty and ready.
type Negative struct {
	m map[string]int64
}

// Add records that name was found absent at now.
func (n *Negative) Add(name string, now int64) {
	if n.m == nil || len(n.m) >= MaxNegative {
		n.m = map[string]int64{}
	}
	n.m[name] = now
}

// Absent reports whether name is known absent, fresh(t) saying whether
// what was learned at t still holds (within the negative TTL).
func (n *Negative) Absent(name string, fresh func(t int64) bool) bool {
	t, ok := n.m[name]
	return ok && fresh(t)
}

// Forget drops name (it exists now, or may).
func (n *Negative) Forget(name string) { delete(n.m, name) }

// Len is how many names are held.
func (n *Negative) Len() int { return len(n.m) }
