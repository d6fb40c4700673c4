package fusefs

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/os2g/os2g/namespace"
)

// dirent is what a directory knows about one child name (see
// namespace.Entry).
type dirent = namespace.Entry

// maxNegative bounds a directory's negative cache (names known absent).
const maxNegative = 4096

// dirNode is a directory: the key prefix key ("" or ending in "/"),
// whether or not a marker object exists for it.
type dirNode struct {
	fs.Inode
	noXattr
	fsys *filesys
	key  string // immutable (directories are not renamed)
	// xdirKey is the zero-byte x-directory object that marks this
	// directory, "" if none; immutable.
	xdirKey string

	mu   sync.Mutex        // guards the fields below
	ents map[string]dirent // names learned (positive cache)
	neg  map[string]int64  // names known absent -> unix ns
	// completeAt is the start time (unix ns) of the last complete listing
	// that no mutation has invalidated since; 0 if none. While fresh,
	// ents is the whole directory.
	completeAt int64
	// gen counts mutations of ents; a listing that saw gen change while
	// it ran does not mark the directory complete.
	gen     uint64
	pending map[string]*fileNode // new files being written, not yet in the store
	// listed: a complete listing happened at least once; refreshing: a
	// background listing runs (see refresh).
	listed, refreshing bool
	// misses counts lookups since missAt (unix ns) that the cache could
	// not answer; the coldListMisses-th within MetadataTTL starts a
	// background listing. coldFailAt: when such a listing last failed.
	misses             int
	missAt, coldFailAt int64
	// While refreshing: every name whose key+"/" sorts at or before
	// listKey has been decided by the background listing, which began at
	// listFrom (unix ns) when gen was listGen; listAdvance is closed (and
	// replaced) each time listKey moves and when the listing ends.
	// waitHits and waitMisses count this listing's lookups that it
	// answered and those that gave up waiting (see awaitListingLocked).
	listKey              string
	listFrom             int64
	listGen              uint64
	listAdvance          chan struct{}
	listKind             refreshKind
	listSeq              uint64 // counts background listings started
	waitHits, waitMisses int
	// walked counts readdirs of subdirectories started since walkAt
	// (unix ns, the latest); preListed: a walk was detected and the
	// other subdirectories were handed to preListChildren (noteWalk).
	walked    int
	walkAt    int64
	preListed bool
}

var (
	_ fs.InodeEmbedder      = (*dirNode)(nil)
	_ fs.NodeLookuper       = (*dirNode)(nil)
	_ fs.NodeGetattrer      = (*dirNode)(nil)
	_ fs.NodeSetattrer      = (*dirNode)(nil)
	_ fs.NodeOpendirHandler = (*dirNode)(nil)
	_ fs.NodeStatfser       = (*dirNode)(nil)
	_ fs.NodeGetxattrer     = (*dirNode)(nil)
	_ fs.NodeListxattrer    = (*dirNode)(nil)
	_ fs.NodeSetxattrer     = (*dirNode)(nil)
	_ fs.NodeRemovexattrer  = (*dirNode)(nil)
)

func newDirNode(f *filesys, key, xdirKey string) *dirNode {
	return &dirNode{noXattr: noXattr{&f.xattrCalls}, fsys: f, key: key, xdirKey: xdirKey, ents: map[string]dirent{}, neg: map[string]int64{}, pending: map[string]*fileNode{}}
}

// Getattr implements fs.NodeGetattrer.
func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fsys.dirAttr(&out.Attr)
	return 0
}

// Setattr implements fs.NodeSetattrer: chmod/chown fail with EPERM,
// utimes is accepted and not stored.
func (d *dirNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := d.fsys.roErr(); e != 0 {
		return e
	}
	if d.fsys.ownerChange(in, d.fsys.o.DirMode) {
		return syscall.EPERM
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		return syscall.EISDIR
	}
	d.fsys.dirAttr(&out.Attr)
	return 0
}

// Statfs implements fs.NodeStatfser with a large, never-full volume.
func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	const blocks = 1 << 40 // 4 PiB of 4 KiB blocks
	out.Bsize, out.Frsize = 4096, 4096
	out.Blocks, out.Bfree, out.Bavail = blocks, blocks, blocks
	out.Files, out.Ffree = 1<<40, 1<<40
	out.NameLen = namespace.MaxNameLen
	return 0
}

// Lookup implements fs.NodeLookuper: from the cached listing when it is
// fresh, else one small delimiter listing (namespace.Probe).
func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ent, pend, errno := d.resolve(ctx, name)
	if errno != 0 {
		return nil, errno
	}
	if pend != nil {
		pend.fillEntry(out)
		return pend.EmbeddedInode(), 0
	}
	return d.childInode(ctx, name, ent, out), 0
}

// resolve finds name: a file being written (pend), or what the store
// holds (ent). ENOENT if absent.
func (d *dirNode) resolve(ctx context.Context, name string) (dirent, *fileNode, syscall.Errno) {
	f := d.fsys
	if len(name) > namespace.MaxNameLen {
		// FUSE lets names up to 1024 bytes through; NAME_MAX is ours.
		return dirent{}, nil, syscall.ENAMETOOLONG
	}
	d.mu.Lock()
	if p := d.pending[name]; p != nil {
		d.mu.Unlock()
		return dirent{}, p, 0
	}
	if e, ok := d.ents[name]; ok && f.fresh(e.Seen, f.o.MetadataTTL) {
		d.mu.Unlock()
		return e, nil, 0
	}
	if f.fresh(d.completeAt, f.o.MetadataTTL) {
		d.mu.Unlock()
		return dirent{}, nil, syscall.ENOENT
	}
	if t, ok := d.neg[name]; ok && f.fresh(t, f.o.NegativeTTL) {
		d.mu.Unlock()
		return dirent{}, nil, syscall.ENOENT
	}
	if !namespace.ValidName(name) {
		d.mu.Unlock()
		return dirent{}, nil, syscall.ENOENT
	}
	// A Go caller's preemption signal interrupts a LOOKUP that waits for
	// the store; without a grace it would fail with EINTR.
	ctx, cancel := interruptGrace(ctx, readInterruptGrace)
	defer cancel()
	stale := d.listed && len(d.ents) >= refreshMinEntries
	if !d.refreshing && (stale || d.noteMissLocked()) {
		kind := refreshCold
		if stale {
			kind = refreshStale
		}
		d.startRefreshLocked(kind)
		f.goBackground(func() { d.refresh(kind, nil) })
	}
	if d.refreshing && d.listKind != refreshStale {
		if ent, found, decided := d.awaitListingLocked(ctx, name); decided {
			if p := d.pending[name]; p != nil {
				d.mu.Unlock()
				return dirent{}, p, 0
			}
			if !found {
				d.setNegLocked(name)
				d.mu.Unlock()
				return dirent{}, nil, syscall.ENOENT
			}
			d.mu.Unlock()
			return ent, nil, 0
		}
	}
	d.mu.Unlock()

	// One small delimiter listing (namespace.Probe).
	ent, found, err := namespace.Probe(ctx, f.store, d.key, name, f.now, f.warnKey)
	if err != nil {
		return dirent{}, nil, f.errno("lookup", namespace.ChildKey(d.key, name), err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !found {
		d.setNegLocked(name)
		return dirent{}, nil, syscall.ENOENT
	}
	d.ents[name] = ent
	delete(d.neg, name)
	return ent, nil, 0
}

func (d *dirNode) setNegLocked(name string) {
	if len(d.neg) >= maxNegative {
		d.neg = map[string]int64{}
	}
	d.neg[name] = d.fsys.now()
	delete(d.ents, name)
}

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

// childInode returns the Inode for name described by e, reusing the
// existing child when its type matches (so the kernel keeps its caches),
// and fills out.
func (d *dirNode) childInode(ctx context.Context, name string, e dirent, out *fuse.EntryOut) *fs.Inode {
	f := d.fsys
	ch := d.GetChild(name)
	if e.Dir {
		if ch != nil {
			if _, ok := ch.Operations().(*dirNode); ok {
				f.dirAttr(&out.Attr)
				return ch
			}
		}
		xk := ""
		if e.XDir {
			xk = namespace.ChildKey(d.key, name)
		}
		f.dirAttr(&out.Attr)
		return d.NewInode(ctx, newDirNode(f, namespace.ChildDirKey(d.key, name), xk), fs.StableAttr{Mode: syscall.S_IFDIR})
	}
	info := objInfo{size: e.Size, etag: e.ETag, mtime: time.Unix(0, e.MTime)}
	if ch != nil {
		if fn, ok := ch.Operations().(*fileNode); ok {
			fn.refresh(d, name, info)
			fn.fillEntry(out)
			return ch
		}
	}
	fn := newFileNode(f, d, name, info, true)
	fn.fillEntry(out)
	return d.NewInode(ctx, fn, fs.StableAttr{Mode: syscall.S_IFREG})
}

// noteEnt records a name learned from a mutation and invalidates the
// complete-listing flag (the cached order no longer matches).
func (d *dirNode) noteEnt(name string, e dirent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.noteEntLocked(name, e)
}

// noteEntLocked is noteEnt with d.mu held.
func (d *dirNode) noteEntLocked(name string, e dirent) {
	d.ents[name] = e
	delete(d.neg, name)
	d.completeAt = 0
	d.gen++
}

// noteGone records that name no longer exists.
func (d *dirNode) noteGone(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setNegLocked(name)
	d.completeAt = 0
	d.gen++
}

// forgetEnt drops what is known about name (the next lookup asks the
// store), e.g. after a read found the object changed.
func (d *dirNode) forgetEnt(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.ents, name)
	delete(d.neg, name)
	d.completeAt = 0
	d.gen++
}

// childrenChanged is called after a child of d was removed: d itself may
// have vanished (an implicit directory exists only while keys are under
// it), so the parent forgets what it knew about d.
func (d *dirNode) childrenChanged() {
	name, parent := d.Parent()
	if parent == nil || name == "" {
		return
	}
	if pd, ok := parent.Operations().(*dirNode); ok {
		pd.forgetEnt(name)
	}
}

func (d *dirNode) addPending(name string, n *fileNode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending[name] = n
	delete(d.neg, name)
}

// commitPending replaces the pending file n by its committed entry in
// one step, so that no lookup finds the name neither pending nor listed
// (which a background listing that passed it would answer ENOENT).
func (d *dirNode) commitPending(name string, n *fileNode, e dirent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[name] == n {
		delete(d.pending, name)
	}
	d.noteEntLocked(name, e)
}

// removePending drops n from the files being written, if still there.
func (d *dirNode) removePending(name string, n *fileNode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[name] == n {
		delete(d.pending, name)
	}
}

func (d *dirNode) hasPending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending) > 0
}
