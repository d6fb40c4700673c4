package prefetch

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// dirState is the epoch state of one directory. Guarded by Manager.mu.
type dirState struct {
	dir     string
	files   []File
	index   map[string]int  // key -> position in files
	read    map[string]bool // keys read whole this epoch
	issued  map[string]bool // keys pre-read (or found cached) this epoch
	order   []int           // this epoch's pre-read order (a permutation of files)
	pos     int             // next position in order
	streak  int             // distinct whole reads in quick succession
	last    time.Time       // last open or whole read of a file of dir
	running bool            // a pre-reader goroutine runs
	held    []*extent       // pre-read extents that may still be held
	epochs  int             // epochs begun
	// partial: files is what a listing still under way has given so far
	// (AddDirFiles); reading all of them does not end the epoch.
	partial bool
	u       usefulness // what this directory's pre-reads are worth (useful.go)
	hinted  bool       // hints lead pre-reading here (Manager.hintCoversLocked)
}

// dirOf is the directory prefix of key, including the trailing "/" ("" at
// the root).
func dirOf(key string) string {
	return key[:strings.LastIndexByte(key, '/')+1]
}

// NoteDir tells the Manager the files directly under dir (a key prefix
// ending in "/", or "" for the root), as a listing returned them; it
// enables epoch pre-reading of that directory. Calling it again replaces
// the list and keeps the epoch's progress.
func (m *Manager) NoteDir(dir string, files []File) {
	m.updateDir(dir, func(d *dirState) {
		d.files = slices.Clone(files)
		d.index = make(map[string]int, len(files))
		for i, f := range d.files {
			d.index[f.Key] = i
		}
		d.shuffle()
		d.partial = false
	})
}

// AddDirFiles tells the Manager files directly under dir from a listing
// still under way, page by page, before NoteDir gives the whole list at
// its end, so that pre-reading a large directory need not wait for its
// listing to finish. Files the Manager does not know yet join dir's list,
// each at a random place among those this epoch has not pre-read yet.
func (m *Manager) AddDirFiles(dir string, files []File) {
	if len(files) == 0 {
		return
	}
	m.updateDir(dir, func(d *dirState) {
		d.partial = true
		for _, f := range files {
			if _, ok := d.index[f.Key]; ok {
				continue
			}
			i := len(d.files)
			d.files = append(d.files, f)
			d.index[f.Key] = i
			d.order = append(d.order, i)
			last := len(d.order) - 1
			j := d.pos + rand.IntN(last-d.pos+1)
			d.order[j], d.order[last] = d.order[last], d.order[j]
		}
		m.maybeStartLocked(d, time.Now())
	})
}

// updateDir runs fn on dir's state (made empty if the Manager has none)
// under m.mu, unless epoch pre-reading is off or the Manager is closed.
func (m *Manager) updateDir(dir string, fn func(d *dirState)) {
	if m.o.EpochTrigger < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	d := m.dirs[dir]
	if d == nil {
		d = &dirState{dir: dir, read: map[string]bool{}, issued: map[string]bool{}, index: map[string]int{},
			u: newUsefulness(m.o.Sharded)}
		m.dirs[dir] = d
	}
	fn(d)
}

func (d *dirState) newEpoch() {
	d.u.endEpoch(len(d.files), d.read)
	d.read = map[string]bool{}
	d.issued = map[string]bool{}
	d.shuffle()
	d.epochs++
}

// shuffle makes a new pre-read order and starts it from the beginning.
func (d *dirState) shuffle() {
	d.order = rand.Perm(len(d.files))
	if !d.u.all() {
		// Predicted files first: the controller refuses the rest sooner.
		slices.SortStableFunc(d.order, func(a, b int) int {
			return d.u.rank(d.files[a].Key) - d.u.rank(d.files[b].Key)
		})
	}
	d.pos = 0
}

func (m *Manager) activeLocked(d *dirState, now time.Time) bool {
	return d.streak >= m.o.EpochTrigger && now.Sub(d.last) < m.o.EpochIdle
}

// touchLocked records activity in d at now; a pause longer than EpochIdle
// ends the streak.
func (m *Manager) touchLocked(d *dirState, now time.Time) {
	if now.Sub(d.last) >= m.o.EpochIdle {
		d.streak = 0
	}
	d.last = now
}

// dirOfFileLocked returns the NoteDir'd directory that lists f, or nil.
func (m *Manager) dirOfFileLocked(f File) *dirState {
	d := m.dirs[dirOf(f.Key)]
	if d == nil {
		return nil
	}
	if _, ok := d.index[f.Key]; !ok {
		return nil
	}
	return d
}

// noteOpenLocked records an Open.
func (m *Manager) noteOpenLocked(f File) {
	m.hintOpenLocked(f.Key)
	d := m.dirOfFileLocked(f)
	if d == nil {
		return
	}
	now := time.Now()
	m.touchLocked(d, now)
	m.maybeStartLocked(d, now)
}

// noteWholeRead records that a handle read all of f.
func (m *Manager) noteWholeRead(f File) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dirOfFileLocked(f)
	if d == nil {
		return
	}
	now := time.Now()
	m.touchLocked(d, now)
	if d.read[f.Key] {
		d.newEpoch() // read again: a new epoch began
	}
	d.read[f.Key] = true
	d.u.onRead(f.Key, f.Size)
	d.streak++
	if len(d.read) >= len(d.files) && !d.partial {
		d.newEpoch()
	}
	m.maybeStartLocked(d, now)
}

func (m *Manager) maybeStartLocked(d *dirState, now time.Time) {
	if d.running || m.closed || d.pos >= len(d.order) || !m.activeLocked(d, now) || m.hintCoversLocked(d) {
		return
	}
	d.running = true
	m.st.epochStarts.Add(1)
	m.wg.Add(1)
	go m.preRead(d)
}

// nextCandidateLocked returns the next file of d to pre-read this epoch;
// false when there is none, or when the usefulness controller refuses the
// next one for now (the pre-reader then stops, and the next read of a
// file of d starts it again).
func (m *Manager) nextCandidateLocked(d *dirState) (File, bool) {
	for ; d.pos < len(d.order); d.pos++ {
		f := d.files[d.order[d.pos]]
		if d.read[f.Key] || d.issued[f.Key] || f.Size <= 0 || f.Size > m.o.EpochFileSize {
			continue
		}
		if !d.u.allow(f, len(d.files)) {
			m.st.epochRefused.Add(1)
			return File{}, false
		}
		return f, true
	}
	return File{}, false
}

// lostPreReadLocked tells the controller of key's directory that the
// pre-read of key was dropped before anyone read it.
func (m *Manager) lostPreReadLocked(key string) {
	if d := m.dirs[dirOf(key)]; d != nil {
		d.u.onLost(key)
	}
}

// preRead fetches d's unread files while the epoch pattern lasts.
func (m *Manager) preRead(d *dirState) {
	defer m.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		now := time.Now()
		if m.closed || !m.activeLocked(d, now) || m.hintCoversLocked(d) {
			// The pattern stopped (or a hint took over): let the cache
			// evict what nobody read.
			for _, e := range d.held {
				m.demoteLocked(e)
			}
			d.held = nil
			d.running = false
			return
		}
		if m.epochInFlight < m.o.EpochConcurrency {
			f, ok := m.nextCandidateLocked(d)
			if !ok {
				d.running = false // all pre-read; the next epoch restarts it
				return
			}
			if m.startPreReadLocked(d, f) {
				continue
			}
		}
		// Wait for memory or a GET slot, and recheck the pattern now and then.
		ch := m.waitChanLocked()
		m.waiting++
		m.mu.Unlock()
		timer.Reset(max(m.o.EpochIdle/4, time.Millisecond))
		select {
		case <-ch:
		case <-timer.C:
		case <-m.ctx.Done():
		}
		timer.Stop()
		m.mu.Lock()
		m.waiting--
	}
}

// startPreReadLocked starts fetching f whole, or marks it issued when it is
// cached already; false means the budget has no room now.
func (m *Manager) startPreReadLocked(d *dirState, f File) bool {
	e, _, ok := m.preReadLocked(f)
	if !ok {
		return false
	}
	d.issued[f.Key] = true // pre-read now, or cached or being read already
	d.pos++
	if e == nil {
		return true
	}
	m.st.epochFiles.Add(1)
	d.u.onIssue(f)
	if len(d.held) >= 2*len(d.files)+64 {
		d.held = slices.DeleteFunc(d.held, func(x *extent) bool { return !x.held })
	}
	d.held = append(d.held, e)
	return true
}
