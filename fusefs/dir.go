package fusefs

import (
	"context"
	"sync"
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
