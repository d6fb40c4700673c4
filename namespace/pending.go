package namespace

// Pending holds a directory's files being written (created, not yet in
// the store), by name, each as the caller's handle N (in fusefs, the
// file's node): they are found by lookups and listed by readdir before
// any listing can show them. It does not lock: the directory's lock
// guards it. The zero value is empty and ready.
type Pending[N comparable] struct {
	m map[string]N
}

// Add records n as the file being written under name, replacing any
// other.
func (p *Pending[N]) Add(name string, n N) {
	if p.m == nil {
		p.m = map[string]N{}
	}
	p.m[name] = n
}

// Get returns the file being written under name, and whether there is
// one.
func (p *Pending[N]) Get(name string) (N, bool) {
	n, ok := p.m[name]
	return n, ok
}

// Remove drops name if n is still the file being written under it (a
// later create of the same name is kept), and reports whether it did.
func (p *Pending[N]) Remove(name string, n N) bool {
	if cur, ok := p.m[name]; ok && cur == n {
		delete(p.m, name)
		return true
	}
	return false
}

// Len is the number of files being written.
func (p *Pending[N]) Len() int { return len(p.m) }

// All calls yield for each file being written, in no order, until it
// returns false.
func (p *Pending[N]) All(yield func(name string, n N) bool) {
	for name, n := range p.m {
		if !yield(name, n) {
			return
		}
	}
}
