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

// lister turns listing pages into entries, in key order across pages. A
// file "x" is held back until the listing has passed "x/", because a
// common prefix "x/" (a directory, which shadows the file) may follow
// after siblings such as "x.txt" or "x-1" that sort in between, possibly
// on a later page.
type lister struct {
	d    *dirNode
	held []objclient.ObjectInfo
}

// add consumes one key (an object, or a common prefix when prefix is
// true) and appends finished entries to out.
func (l *lister) add(out []listed, o objclient.ObjectInfo, prefix bool, now int64) []listed {
	d := l.d
	k := o.Key
	// Release held files that can no longer be shadowed.
	kept := l.held[:0]
	for _, h := range l.held {
		if namespace.CmpSlash(h.Key, k) < 0 {
			out = append(out, l.fileOut(h, now))
		} else {
			kept = append(kept, h)
		}
	}
	l.held = kept
	if prefix {
		name := k[len(d.key) : len(k)-1]
		if !namespace.ValidName(name) {
			d.fsys.warnKey("key with a component that is not a POSIX name skipped", k)
			return out
		}
		e := dirent{dir: true, seen: now}
		for i, h := range l.held {
			if namespace.CmpSlash(h.Key, k) == 0 {
				e.xdir = h.Size == 0
				if h.Size > 0 {
					d.fsys.warnKey("object hidden by a directory of the same name", h.Key)
				}
				l.held = slices.Delete(l.held, i, i+1)
				break
			}
		}
		return append(out, listed{name: name, e: e})
	}
	if k == d.key {
		return out // the directory's own marker "dir/"
	}
	if !namespace.ValidName(k[len(d.key):]) {
		d.fsys.warnKey("key with a component that is not a POSIX name skipped", k)
		return out
	}
	l.held = append(l.held, o)
	return out
}

// flush releases every held file (the listing ended).
func (l *lister) flush(out []listed, now int64) []listed {
	for _, h := range l.held {
		out = append(out, l.fileOut(h, now))
	}
	l.held = l.held[:0]
	return out
}

func (l *lister) fileOut(o objclient.ObjectInfo, now int64) listed {
	return listed{name: o.Key[len(l.d.key):], e: fileEnt(o, now), zero: o.Size == 0}
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
	l         lister
	skip      map[string]bool // names emitted from d.pending at the start
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
	h.l, h.skip, h.last, h.files = lister{}, nil, listed{}, nil
}

// start begins the stream: from the cached complete listing when it is
// fresh (unless forceList), else from the store.
func (h *dirHandle) start(forceList bool) {
	d := h.d
	f := d.fsys
	h.started = true
	h.l = lister{d: d}
	h.queue = append(h.queue, listed{name: ".", e: dirent{dir: true}}, listed{name: "..", e: dirent{dir: true}})
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
	if e.e.dir {
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
	out := h.queue[:0]
	// Merge objects and common prefixes in key order.
	oi, pi := 0, 0
	for oi < len(page.Objects) || pi < len(page.CommonPrefixes) {
		if pi >= len(page.CommonPrefixes) || (oi < len(page.Objects) && page.Objects[oi].Key < page.CommonPrefixes[pi]) {
			out = h.l.add(out, page.Objects[oi], false, now)
			oi++
		} else {
			out = h.l.add(out, objclient.ObjectInfo{Key: page.CommonPrefixes[pi]}, true, now)
			pi++
		}
	}
	if !page.IsTruncated {
		out = h.l.flush(out, now)
		h.eof = true
	} else if page.NextContinuationToken == "" {
		f.log.Error("truncated listing without a continuation token", "prefix", d.key)
		return syscall.EIO
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
		if h.files != nil && !e.e.dir {
			h.files = append(h.files, prefetch.File{Key: namespace.ChildKey(d.key, e.name), Size: e.e.size, ETag: e.e.etag})
		}
	}
	if h.track && !h.eof {
		d.listedUpToLocked(decidedUpTo(page, h.l.held))
	}
	if h.eof && d.gen == h.startGen {
		for name, e := range d.ents {
			if e.seen < h.listStart {
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

// decidedUpTo is the greatest key up to which a listing that has just
// taken page (of a truncated listing) has decided every name: the page's
// last key, or if files are still held back (a common prefix of the same
// name could follow) just below the first of them. "" if nothing is decided.
func decidedUpTo(page objclient.ListPage, held []objclient.ObjectInfo) string {
	last := ""
	if n := len(page.Objects); n > 0 {
		last = page.Objects[n-1].Key
	}
	if n := len(page.CommonPrefixes); n > 0 {
		last = max(last, page.CommonPrefixes[n-1])
	}
	for _, h := range held {
		// h.Key+"/" is undecided; every name whose key+"/" sorts before
		// it is decided. h.Key itself sorts before h.Key+"/".
		last = min(last, h.Key)
	}
	return last
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
		if ok && old.etag == e.e.etag && (old.checked || (old.dir && old.xdir)) {
			old.seen = e.e.seen
			e.e = old
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			key := namespace.ChildKey(d.key, e.name)
			ne, found, err := d.checkZero(ctx, key, e.e)
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
