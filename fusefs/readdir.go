package fusefs

import (
	"context"
	"slices"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/os2g/os2g/namespace"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

// firstTrackedPage is the size of the first page of a background listing
// that lookups wait for (see dirNode.awaitListingLocked).
const firstTrackedPage = 100

// OpendirHandle implements fs.NodeOpendirHandler. The handle streams the
// directory page by page: the first entries reach getdents after the
// first LIST page, and only one page is held by the handle.
func (d *dirNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{d: d}, 0, 0
}

// listed is one directory entry produced from a listing.
type listed struct {
	name string
	e    dirent
	pend *fileNode // a file being written (not in the store yet)
	zero bool      // zero-byte object not yet checked for a directory marker
}

// dirHandle is one open directory stream (FileReaddirenter). go-fuse
// serialises READDIR calls on a handle; mu still guards the fields.
type dirHandle struct {
	d *dirNode

	mu        sync.Mutex // guards the fields below
	started   bool
	queue     []listed // entries ready to emit
	qi        int
	names     []string // cache mode: the names still to emit, from a fresh complete listing
	fromCache bool
	token     string
	eof       bool
	listStart int64
	startGen  uint64
	l         namespace.Lister
	got       []namespace.Listed // a page's entries (reused)
	skip      map[string]bool    // names emitted from d.pending at the start
	last      listed
	files     []prefetch.File // for Manager.NoteDir (nil without prefetch)
	// track: this is the background listing (refresh) that lookups may
	// wait for; each page moves d.listKey.
	track bool
	// shortFirst: the first page is firstTrackedPage keys (lookups wait
	// for this listing); walkNote: this readdir lists the directory from
	// the store, and Readdirent tells the parent (dirNode.noteWalk).
	shortFirst, walkNote bool
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
)

// reset rewinds the stream; h.mu must be held.
func (h *dirHandle) reset() {
	h.started, h.queue, h.qi, h.names, h.fromCache = false, nil, 0, nil, false
	h.token, h.eof, h.listStart, h.startGen = "", false, 0, 0
	h.l, h.skip, h.last, h.files = namespace.Lister{}, nil, listed{}, nil
}

// start begins the stream: from the cached complete listing when it is
// fresh (unless forceList), else from the store.
func (h *dirHandle) start(forceList bool) {
	d := h.d
	f := d.fsys
	h.started = true
	h.l = namespace.Lister{DirKey: d.key, Warn: d.fsys.warnKey}
	h.queue = append(h.queue, listed{name: ".", e: dirent{Dir: true}}, listed{name: "..", e: dirent{Dir: true}})
	d.mu.Lock()
	defer d.mu.Unlock()
	h.skip = map[string]bool{}
	for name, n := range d.pending {
		h.skip[name] = true
		h.queue = append(h.queue, listed{name: name, pend: n})
	}
	if !forceList && f.fresh(d.completeAt, f.o.MetadataTTL) {
		h.fromCache = true
		h.names = make([]string, 0, len(d.ents))
		for name := range d.ents {
			if !h.skip[name] {
				h.names = append(h.names, name)
			}
		}
		slices.Sort(h.names)
		return
	}
	h.listStart = f.now()
	h.startGen = d.gen
	h.walkNote = !forceList
	if f.pf != nil {
		h.files = []prefetch.File{}
	}
}

// Readdirent implements fs.FileReaddirenter.
func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		h.d.awaitRefresh(ctx)
		h.start(false)
		if h.walkNote {
			h.d.noteWalk() // without d.mu: it locks the parent
		}
	}
	for h.qi >= len(h.queue) {
		h.queue, h.qi = h.queue[:0], 0
		if h.fromCache {
			if !h.fillFromCache() {
				return nil, 0
			}
			continue
		}
		if h.eof {
			return nil, 0
		}
		if errno := h.fetch(ctx); errno != 0 {
			return nil, errno
		}
	}
	e := h.queue[h.qi]
	h.queue[h.qi] = listed{}
	h.qi++
	h.last = e
	mode := uint32(syscall.S_IFREG)
	if e.e.Dir {
		mode = syscall.S_IFDIR
	}
	key := namespace.ChildKey(h.d.key, e.name)
	return &fuse.DirEntry{Name: e.name, Mode: mode, Ino: direntIno(key)}, 0
}

// fillFromCache moves up to one page of names from the cached listing
// into the queue; false when none are left.
func (h *dirHandle) fillFromCache() bool {
	d := h.d
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(h.names) > 0 && len(h.queue) < int(d.fsys.o.listPageSize) {
		name := h.names[0]
		h.names = h.names[1:]
		if e, ok := d.ents[name]; ok {
			h.queue = append(h.queue, listed{name: name, e: e})
		}
	}
	return len(h.queue) > 0
}

// fetch lists the next page into the queue and the directory's cache.
func (h *dirHandle) fetch(ctx context.Context) syscall.Errno {
	d := h.d
	f := d.fsys
	size := f.o.listPageSize
	if h.shortFirst && h.token == "" {
		// Lookups wait for this listing: a short first page answers the
		// first of them sooner.
		size = min(size, firstTrackedPage)
	}
	page, err := f.store.List(ctx, objclient.ListRequest{Prefix: d.key, Delimiter: "/", ContinuationToken: h.token, MaxKeys: size})
	if err != nil {
		return f.errno("readdir", d.key, err)
	}
	now := f.now()
	// Entries in key order, a file held back until no directory of the
	// same name can follow (namespace.Lister).
	got := h.l.AddPage(h.got[:0], page, now)
	if !page.IsTruncated {
		got = h.l.Flush(got, now)
		h.eof = true
	} else if page.NextContinuationToken == "" {
		f.log.Error("truncated listing without a continuation token", "prefix", d.key)
		return syscall.EIO
	}
	h.got = got
	out := h.queue[:0]
	for _, g := range got {
		out = append(out, listed{name: g.Name, e: g.Entry, zero: g.Zero})
	}
	h.token = page.NextContinuationToken
	out, errno := h.checkZero(ctx, out)
	if errno != 0 {
		return errno
	}
	// Drop pending names (already emitted) and record the rest.
	kept := out[:0]
	nfiles := len(h.files)
	d.mu.Lock()
	for _, e := range out {
		if h.skip[e.name] {
			continue
		}
		d.ents[e.name] = e.e
		delete(d.neg, e.name)
		kept = append(kept, e)
		if h.files != nil && !e.e.Dir {
			h.files = append(h.files, prefetch.File{Key: namespace.ChildKey(d.key, e.name), Size: e.e.Size, ETag: e.e.ETag})
		}
	}
	if h.track && !h.eof {
		d.listedUpToLocked(h.l.DecidedUpTo(page))
	}
	if h.eof && d.gen == h.startGen {
		for name, e := range d.ents {
			if e.Seen < h.listStart {
				delete(d.ents, name)
			}
		}
		d.completeAt = h.listStart
		d.listed = true
	}
	d.mu.Unlock()
	h.queue = kept
	switch {
	case h.eof && h.files != nil:
		f.pf.NoteDir(d.key, h.files)
		h.files = nil
	case h.files != nil && len(h.files) > nfiles:
		// A large directory: pre-reading may start before its end.
		f.pf.AddDirFiles(d.key, h.files[nfiles:])
	}
	return 0
}

// zeroChecks is how many zero-byte objects of one listing page are
// checked for a directory marker at once (one HEAD each).
const zeroChecks = 32

// checkZero decides, for zero-byte objects, whether they are
// application/x-directory markers: one HEAD each, remembered per ETag,
// up to zeroChecks of them at once (a page of empty objects cost a
// sequential HEAD per entry: listing 100,000 empty objects took 5-6 times
// the LIST, issue 14).
func (h *dirHandle) checkZero(ctx context.Context, out []listed) ([]listed, syscall.Errno) {
	d := h.d
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, zeroChecks)
		mu       sync.Mutex // guards firstErr, errKey
		firstErr error
		errKey   string
	)
	for i := range out {
		e := &out[i]
		if !e.zero {
			continue
		}
		e.zero = false
		d.mu.Lock()
		old, ok := d.ents[e.name]
		d.mu.Unlock()
		if ok && old.ETag == e.e.ETag && (old.Checked || (old.Dir && old.XDir)) {
			old.Seen = e.e.Seen
			e.e = old
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			key := namespace.ChildKey(d.key, e.name)
			ne, found, err := namespace.CheckMarker(ctx, d.fsys.store, key, e.e)
			switch {
			case err != nil:
				mu.Lock()
				if firstErr == nil {
					firstErr, errKey = err, key
				}
				mu.Unlock()
			case found:
				e.e = ne
			default:
				e.name = "" // vanished; dropped below
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return out, d.fsys.errno("readdir", errKey, firstErr)
	}
	kept := out[:0]
	for _, e := range out {
		if e.name != "" {
			kept = append(kept, e)
		}
	}
	return kept, 0
}

// Lookup implements fs.FileLookuper: READDIRPLUS asks for the entry just
// emitted, answered from the listing without a request.
func (h *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	h.mu.Lock()
	last := h.last
	h.mu.Unlock()
	if last.name != name {
		return h.d.Lookup(ctx, name, out)
	}
	if last.pend != nil {
		last.pend.fillEntry(out)
		return last.pend.EmbeddedInode(), 0
	}
	return h.d.childInode(ctx, name, last.e, out), 0
}

// Seekdir implements fs.FileSeekdirer: only a rewind to the start.
func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off != 0 {
		return syscall.EINVAL
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reset()
	return 0
}

// Releasedir implements fs.FileReleasedirer.
func (h *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {}
