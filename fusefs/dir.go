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

	mu sync.Mutex // guards the fields below
	// cache: the names learned and known absent, and whether they are the
	// whole directory (while CompleteAt is fresh).
	cache   namespace.Cache
	pending namespace.Pending[*fileNode] // new files being written, not yet in the store
	// refreshing: a background listing runs (see refresh).
	refreshing bool
	// cold counts lookups that the cache could not answer; the
	// coldListMisses-th within MetadataTTL starts a background listing.
	cold namespace.ColdMisses
	// prog: while refreshing, how far the background listing has got,
	// handed to the lookups that wait for it (awaitListingLocked), and
	// how many of those waits it answered and how many gave up.
	prog     namespace.Progress
	listKind refreshKind
	// walk: readdirs of subdirectories started; once it detects a walk,
	// the other subdirectories were handed to preListChildren (noteWalk).
	walk namespace.Walk
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
	return &dirNode{noXattr: noXattr{&f.xattrCalls}, fsys: f, key: key, xdirKey: xdirKey}
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
	if p, ok := d.pending.Get(name); ok {
		d.mu.Unlock()
		return dirent{}, p, 0
	}
	switch e, known := d.cache.Lookup(name,
		func(t int64) bool { return f.fresh(t, f.o.MetadataTTL) },
		func(t int64) bool { return f.fresh(t, f.o.NegativeTTL) }); known {
	case namespace.Present:
		d.mu.Unlock()
		return e, nil, 0
	case namespace.Absent:
		d.mu.Unlock()
		return dirent{}, nil, syscall.ENOENT
	}
	// A Go caller's preemption signal interrupts a LOOKUP that waits for
	// the store; without a grace it would fail with EINTR.
	ctx, cancel := interruptGrace(ctx, readInterruptGrace)
	defer cancel()
	stale := d.cache.Listed() && d.cache.Len() >= refreshMinEntries
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
			if p, ok := d.pending.Get(name); ok {
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
	d.cache.Learn(name, ent)
	return ent, nil, 0
}

func (d *dirNode) setNegLocked(name string) {
	d.cache.SetAbsent(name, d.fsys.now())
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
	d.cache.Note(name, e)
}

// noteGone records that name no longer exists.
func (d *dirNode) noteGone(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cache.Gone(name, d.fsys.now())
}

// forgetEnt drops what is known about name (the next lookup asks the
// store), e.g. after a read found the object changed.
func (d *dirNode) forgetEnt(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cache.Forget(name)
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
	d.pending.Add(name, n)
	d.cache.ForgetAbsent(name)
}

// commitPending replaces the pending file n by its committed entry in
// one step, so that no lookup finds the name neither pending nor listed
// (which a background listing that passed it would answer ENOENT).
func (d *dirNode) commitPending(name string, n *fileNode, e dirent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending.Remove(name, n)
	d.noteEntLocked(name, e)
}

// removePending drops n from the files being written, if still there.
func (d *dirNode) removePending(name string, n *fileNode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending.Remove(name, n)
}

func (d *dirNode) hasPending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending.Len() > 0
}
