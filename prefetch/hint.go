package prefetch

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrNoHint: a hint named no file this Manager knows (no listed
// directory holds any of its keys).
var ErrNoHint = errors.New("prefetch: no file of the hint is known")

// Hint limits.
const (
	// DefaultHintWindow is Options.HintWindow's default, in files: more
	// than a DataLoader keeps in flight (workers x prefetch_factor x
	// batch size, 8 x 2 x 32 = 512).
	DefaultHintWindow = 1024
	// hintStrayLimit: this many opens in a row of files outside the hint
	// mean the reader has moved on; the hint is dropped.
	hintStrayLimit = 64
	// hintRepeatLimit: this many opens of hinted files already opened
	// under the hint mean a new epoch began; the hint is dropped.
	hintRepeatLimit = 8
)

// HintStatus says what a hint became.
type HintStatus struct {
	// Files: hinted keys that will be pre-read in order. Unknown: keys
	// skipped because no listed directory holds them (list a directory,
	// e.g. with os.scandir, before hinting its files). Duplicates: keys
	// named again later in the hint (pre-read once, at the first place).
	Files, Unknown, Duplicates int
}

// hintState is the exact order a reader announced. Guarded by Manager.mu.
type hintState struct {
	stream  string
	files   []File
	at      map[string]int  // key -> index in files
	dirs    map[string]bool // directories with hinted files: no speculative pre-reading there
	opened  []bool
	issued  []bool
	cursor  int // lowest index not opened
	maxOpen int // highest index opened (-1: none)
	next    int // next index to pre-read
	strays  int // opens in a row of files outside the hint
	repeats int // opens of hinted files opened already
	held    []*extent
	kick    chan struct{} // cap 1: an open moved the window
	running bool
}

// Hint tells the Manager the files (keys) a reader will read next, in
// the order it will open them: the exact-order hint of a training script
// that knows its sampler's order (issue 15). stream names the reader
// (e.g. "rank3": several ranks of one node share a mount, each with its
// own hint); the hint replaces that stream's earlier one, and an empty
// list just drops it. The Manager then pre-reads exactly those
// files, whole, in that order, at most Options.HintWindow files (and
// Options.EpochMemory bytes) ahead of the reader, and no speculative
// epoch pre-reading in the directories the hint covers, then or after it
// ends, until a hint goes stale. Opens of hinted
// files move the window (the reader's place is the lowest hinted file not
// opened yet, or HintWindow/2 behind the highest one opened, so a file
// never opened does not stall it). The hint is dropped, and what it pre-read
// and nobody read is left to the cache's eviction, when every hinted file
// was opened, when 64 opens in a row are of files outside every hint, or
// when 8 of its files are opened a second time (the reader moved on to
// another epoch): a stale hint is never obeyed into waste.
//
// Keys must be listed already (Manager.NoteDir); others are skipped and
// counted. Errors: ErrNoHint when keys is not empty but none is known,
// ErrClosed after Close.
func (m *Manager) Hint(stream string, keys []string) (HintStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return HintStatus{}, ErrClosed
	}
	if old := m.hints[stream]; old != nil {
		m.dropHintLocked(old, false)
	}
	if len(keys) == 0 {
		return HintStatus{}, nil
	}
	h := &hintState{stream: stream, at: make(map[string]int, len(keys)), dirs: map[string]bool{}, maxOpen: -1, kick: make(chan struct{}, 1)}
	var st HintStatus
	for _, k := range keys {
		d := m.dirs[dirOf(k)]
		i, ok := 0, false
		if d != nil {
			i, ok = d.index[k]
		}
		if !ok {
			st.Unknown++
			continue
		}
		if _, dup := h.at[k]; dup {
			st.Duplicates++
			continue
		}
		h.at[k] = len(h.files)
		h.files = append(h.files, d.files[i])
		h.dirs[d.dir] = true
	}
	for dir := range h.dirs {
		m.dirs[dir].hinted = true
	}
	st.Files = len(h.files)
	if st.Files == 0 {
		return st, fmt.Errorf("%w: %d keys, none in a listed directory", ErrNoHint, len(keys))
	}
	h.opened = make([]bool, len(h.files))
	h.issued = make([]bool, len(h.files))
	if m.hints == nil {
		m.hints = map[string]*hintState{}
	}
	m.hints[stream] = h
	m.st.hints.Add(1)
	h.running = true
	m.wg.Add(1)
	go m.hintPreRead(h)
	return st, nil
}

// dropHintLocked forgets hint h; stale says it was dropped because the
// reader moved on.
func (m *Manager) dropHintLocked(h *hintState, stale bool) {
	if m.hints[h.stream] != h {
		return
	}
	delete(m.hints, h.stream)
	if stale {
		m.st.hintsStale.Add(1)
		// The reader no longer follows hints here: speculative
		// pre-reading may resume where no other hint leads.
	next:
		for dir := range h.dirs {
			for _, o := range m.hints {
				if o.dirs[dir] {
					continue next
				}
			}
			if d := m.dirs[dir]; d != nil {
				d.hinted = false
			}
		}
	}
	for i, f := range h.files {
		if h.issued[i] && !h.opened[i] {
			m.hintUnopened++
			m.hintWasted += f.Size
		}
	}
	for _, e := range h.held {
		m.demoteLocked(e)
	}
	h.held = nil
	select {
	case h.kick <- struct{}{}: // the pre-reader sees h dropped and ends
	default:
	}
}

// hintCoversLocked says whether hints lead pre-reading in directory d: a
// hint covers it, or the last one that did ended without going stale (the
// script hints every epoch; speculation would fetch the rest of d between
// its hints).
func (m *Manager) hintCoversLocked(d *dirState) bool {
	return d.hinted
}

// hintOpenLocked records an open of key against the hints: the hint that
// holds key moves on; an open that no hint holds is a stray for all.
func (m *Manager) hintOpenLocked(key string) {
	if len(m.hints) == 0 {
		return
	}
	for _, h := range m.hints {
		if i, ok := h.at[key]; ok {
			m.hintOpenOfLocked(h, i)
			return
		}
	}
	for _, h := range m.hints {
		if h.strays++; h.strays >= hintStrayLimit {
			m.dropHintLocked(h, true)
		}
	}
}

// hintOpenOfLocked records an open of h.files[i].
func (m *Manager) hintOpenOfLocked(h *hintState, i int) {
	h.strays = 0
	if h.opened[i] {
		if h.repeats++; h.repeats >= hintRepeatLimit {
			m.dropHintLocked(h, true)
		}
		return
	}
	h.opened[i] = true
	if h.issued[i] {
		m.hintOpened++
	}
	h.maxOpen = max(h.maxOpen, i)
	for h.cursor < len(h.opened) && h.opened[h.cursor] {
		h.cursor++
	}
	if h.cursor == len(h.files) {
		m.dropHintLocked(h, false) // done
		return
	}
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// hintPreRead fetches the hinted files in order, a window ahead of the
// reader, until the hint is dropped or replaced.
func (m *Manager) hintPreRead(h *hintState) {
	defer m.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if m.closed || m.hints[h.stream] != h {
			h.running = false
			return
		}
		lo := max(h.cursor, h.maxOpen+1-m.o.HintWindow/2) // the reader's place
		h.next = max(h.next, lo)
		for h.next < len(h.files) && (h.issued[h.next] || h.opened[h.next]) {
			h.next++
		}
		if h.next < len(h.files) && h.next < lo+m.o.HintWindow && m.epochInFlight < m.o.EpochConcurrency {
			f := h.files[h.next]
			e, cached, ok := m.preReadLocked(f)
			if ok {
				h.issued[h.next] = !cached
				if e != nil {
					m.st.hintFiles.Add(1)
					if len(h.held) >= 2*m.o.HintWindow+64 {
						h.held = slices.DeleteFunc(h.held, func(x *extent) bool { return !x.held })
					}
					h.held = append(h.held, e)
				}
				h.next++
				continue
			}
		}
		// Wait for an open, memory or a GET slot; recheck now and then.
		ch := m.waitChanLocked()
		m.waiting++
		m.mu.Unlock()
		timer.Reset(time.Second)
		select {
		case <-ch:
		case <-h.kick:
		case <-timer.C:
		case <-m.ctx.Done():
		}
		timer.Stop()
		m.mu.Lock()
		m.waiting--
	}
}

// preReadLocked starts fetching f whole as a pre-read (held until read).
// cached says f is cached or being read already, in part or whole, and
// nothing was started; ok is false when the budget has no room now.
func (m *Manager) preReadLocked(f File) (e *extent, cached, ok bool) {
	if f.Size <= 0 || f.Size > m.o.EpochFileSize {
		return nil, true, true // not pre-readable: leave it to its reader
	}
	fk := fileKey{f.Key, f.ETag}
	fs := m.fileLocked(fk)
	defer m.forgetFileLocked(fs)
	if e, _, gapEnd := fs.find(0, m.o.PartSize); e != nil || gapEnd < f.Size {
		return nil, true, true
	}
	if !m.tryReserveLocked(f.Size, true) {
		m.st.epochSkipped.Add(1)
		return nil, false, false
	}
	e = m.newExtentLocked(fk, span{0, f.Size}, originEpoch, nil, false)
	e.held = true
	m.epochHeld += f.Size
	m.epochInFlight++
	return e, false, true
}
