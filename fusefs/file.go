package fusefs

import (
	"context"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/os2g/os2g/namespace"
)

// objInfo is the committed object version behind a file.
type objInfo struct {
	size  int64 // bytes
	etag  string
	mtime time.Time
}

// fileNode is a regular file: the object dir.key+name.
type fileNode struct {
	fs.Inode
	noXattr
	fsys *filesys

	mu   sync.Mutex // guards the fields below
	dir  *dirNode   // changes on rename
	name string     // changes on rename
	info objInfo
	// exists: a committed object backs info (false for a new file whose
	// first upload has not been committed).
	exists bool
	// stale: info is known to be outdated (a read saw ErrChanged); the
	// next open re-reads it with a HEAD.
	stale        bool
	opened       bool                      // opened for reading at least once
	lastOpenETag string                    // ETag at the last open for reading (FOPEN_KEEP_CACHE)
	writers      map[*writeHandle]struct{} // uncommitted upload handles
	latest       *writeHandle              // most recently opened of writers
	unlinked     bool                      // unlinked while being written: discard the upload
	gone         bool                      // a new file whose upload failed: stat gives ENOENT
	// Open read handles by kernel I/O mode (see openRead): cachedOpen
	// through the page cache, ptOpen offered for passthrough, of the
	// version ptKey/ptETag ("" once none is open and an open has seen it).
	cachedOpen, ptOpen int
	ptKey, ptETag      string
	ptHandles          map[*ptHandle]struct{} // the ptOpen handles
	ptZero             chan struct{}          // closed when ptOpen drops to 0
	// shared reads this file in dataset mode, where READs carry no
	// handle (see dataset.go); nil when no read is under way.
	shared *sharedReader
}

var (
	_ fs.InodeEmbedder     = (*fileNode)(nil)
	_ fs.NodeGetattrer     = (*fileNode)(nil)
	_ fs.NodeSetattrer     = (*fileNode)(nil)
	_ fs.NodeOpener        = (*fileNode)(nil)
	_ fs.NodeStatfser      = (*fileNode)(nil)
	_ fs.NodeGetxattrer    = (*fileNode)(nil)
	_ fs.NodeListxattrer   = (*fileNode)(nil)
	_ fs.NodeSetxattrer    = (*fileNode)(nil)
	_ fs.NodeRemovexattrer = (*fileNode)(nil)
)

func newFileNode(f *filesys, d *dirNode, name string, info objInfo, exists bool) *fileNode {
	return &fileNode{noXattr: noXattr{&f.xattrCalls}, fsys: f, dir: d, name: name, info: info, exists: exists, writers: map[*writeHandle]struct{}{}, ptHandles: map[*ptHandle]struct{}{}}
}

// key returns the node's object key and directory.
func (n *fileNode) key() (string, *dirNode, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return namespace.ChildKey(n.dir.key, n.name), n.dir, n.name
}

// path is the file's absolute path under the mount point ("" if the
// mount point is unknown).
func (n *fileNode) path() string {
	key, _, _ := n.key()
	mp := n.fsys.mountpoint
	if mp == "" {
		return ""
	}
	return mp + "/" + key[len(n.fsys.o.Prefix):]
}

// refresh takes a newer listing's view of the object.
func (n *fileNode) refresh(d *dirNode, name string, info objInfo) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dir != d || n.name != name {
		return
	}
	if !n.exists || n.info.etag != info.etag || n.stale {
		n.info = info
		n.exists = true
		n.stale = false
	}
}

// markStale records that the object changed under an open handle.
func (n *fileNode) markStale() {
	n.mu.Lock()
	n.stale = true
	d, name := n.dir, n.name
	n.mu.Unlock()
	d.forgetEnt(name)
}

// attr fills out and reports whether an upload is in progress. While a
// file is being written, stat shows the growing size if there is no
// previous object (or it is empty); an overwrite keeps showing the
// previous object until the new one is committed, so that readers that
// open it meanwhile read the old version whole.
func (n *fileNode) attr(out *fuse.Attr) (writing bool) {
	n.mu.Lock()
	info, exists, latest := n.info, n.exists, n.latest
	n.mu.Unlock()
	if latest != nil && (!exists || info.size == 0) {
		n.fsys.fileAttr(out, latest.size.Load(), time.Now())
		return true
	}
	n.fsys.fileAttr(out, info.size, info.mtime)
	return latest != nil
}

func (n *fileNode) fillEntry(out *fuse.EntryOut) {
	if n.attr(&out.Attr) {
		out.SetAttrTimeout(volatileTimeout)
	}
}

// Getattr implements fs.NodeGetattrer.
func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	gone := n.gone
	n.mu.Unlock()
	if gone {
		return syscall.ENOENT
	}
	if n.attr(&out.Attr) {
		out.SetTimeout(volatileTimeout)
	}
	return 0
}

// Setattr implements fs.NodeSetattrer. chmod and chown fail with EPERM
// (modes are fixed by the mount options); utimes is accepted and not
// stored (mtime is the object's LastModified); size changes follow the
// truncate rules in docs/semantics.md.
func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.fsys.roErr(); e != 0 {
		return e
	}
	if n.fsys.ownerChange(in, n.fsys.o.FileMode) {
		return syscall.EPERM
	}
	if size, ok := in.GetSize(); ok {
		var errno syscall.Errno
		if wh, isW := fh.(*writeHandle); isW && wh.n == n {
			errno = wh.truncate(int64(size))
		} else {
			errno = n.truncatePath(ctx, int64(size))
		}
		if errno != 0 {
			return errno
		}
		if wh, isW := fh.(*writeHandle); isW && wh.n == n {
			n.fsys.fileAttr(&out.Attr, wh.size.Load(), time.Now())
			out.SetTimeout(volatileTimeout)
			return 0
		}
	}
	return n.Getattr(ctx, fh, out)
}

// truncatePath is truncate(2) without an open write handle: to the
// current size is a no-op; to 0, or any size of an empty file, writes a
// new object of that many zero bytes now; anything else is EOPNOTSUPP.
func (n *fileNode) truncatePath(ctx context.Context, size int64) syscall.Errno {
	n.mu.Lock()
	exists, cur, writing := n.exists, n.info.size, n.latest != nil
	n.mu.Unlock()
	switch {
	case writing:
		return syscall.EBUSY
	case exists && size == cur:
		return 0
	case size != 0 && cur != 0:
		return syscall.EOPNOTSUPP
	}
	return n.putZeros(ctx, size)
}

// putZeros replaces the object with size zero bytes.
func (n *fileNode) putZeros(ctx context.Context, size int64) syscall.Errno {
	f := n.fsys
	key, _, _ := n.key()
	w, err := f.store.Put(f.bg, key, f.putOptions())
	if err != nil {
		return f.errno("truncate", key, err)
	}
	zero := make([]byte, min(size, 1<<20))
	for left := size; left > 0; {
		k := min(left, int64(len(zero)))
		if _, err := w.Write(zero[:k]); err != nil {
			_ = w.Abort(f.bg)
			return f.errno("truncate", key, err)
		}
		left -= k
	}
	info, err := w.Commit(f.bg)
	if err != nil {
		return f.errno("truncate", key, err)
	}
	n.committed(key, info, size)
	return 0
}

// Open implements fs.NodeOpener. Read-only opens get a read handle on
// the current version (kernel page cache kept when the ETag has not
// changed since the last open); write opens get an upload handle (direct
// I/O, see write.go). In dataset mode the answer is ENOSYS: the kernel
// then opens files without the daemon (see dataset.go).
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.fsys.openCalls.Add(1)
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_TRUNC == 0 {
		if n.fsys.noOpen() {
			return nil, 0, syscall.ENOSYS
		}
		return n.openRead(ctx)
	}
	if e := n.fsys.roErr(); e != 0 {
		return nil, 0, e
	}
	h, errno := n.openWrite(ctx, flags, false)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// lookupAgain looks up a file whose object was seen to change (HEAD, for
// op) and records the new version, after calling before (if set) once the
// new version is known. A missing object is noted gone (ENOENT).
func (n *fileNode) lookupAgain(ctx context.Context, op string, before func()) syscall.Errno {
	f := n.fsys
	key, d, name := n.key()
	info, err := f.store.Stat(ctx, key)
	if err != nil {
		errno := f.errno(op, key, err)
		if errno == syscall.ENOENT {
			d.noteGone(name)
		}
		return errno
	}
	if before != nil {
		before()
	}
	n.mu.Lock()
	n.info = objInfo{size: info.Size, etag: info.ETag, mtime: info.LastModified}
	n.exists, n.stale = true, false
	n.mu.Unlock()
	return 0
}

func (n *fileNode) openRead(ctx context.Context) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.fsys
	n.mu.Lock()
	stale := n.stale
	n.mu.Unlock()
	if stale {
		if errno := n.lookupAgain(ctx, "open", nil); errno != 0 {
			return nil, 0, errno
		}
	}
	// A version held whole in the disk cache is read from there; the
	// lookup (and the first check of an entry of a previous run) is I/O,
	// so it happens before the decision below, which re-checks the node.
	n.mu.Lock()
	info, exists, writing := n.info, n.exists, n.latest != nil
	key := namespace.ChildKey(n.dir.key, n.name)
	n.mu.Unlock()
	var df *os.File
	if exists && !writing {
		df = f.openDisk(key, info)
	}
	ptOK := df != nil && f.passthroughOK(df)
	dfKey, dfInfo := key, info

	n.mu.Lock()
	info, exists, writing = n.info, n.exists, n.latest != nil
	key = namespace.ChildKey(n.dir.key, n.name)
	keep := n.opened && n.lastOpenETag == info.etag
	n.opened, n.lastOpenETag = true, info.etag
	var drop *os.File
	if df != nil && (key != dfKey || !exists || writing || info.etag != dfInfo.etag || info.size != dfInfo.size) {
		drop, df, ptOK = df, nil, false
	}
	if !exists {
		// A new file whose upload is not committed: nothing to read yet.
		info = objInfo{}
		keep = false
	}
	// While an inode is open for passthrough the kernel refuses (EIO)
	// every open of it that is not passthrough to the same backing file,
	// and it refuses a passthrough open of an inode open through the page
	// cache. So: passthrough only with no page-cache handle open; while
	// passthrough handles are open, only their version can be opened
	// (ESTALE for a newer one; writes get ETXTBSY in openWrite). go-fuse
	// drops an inode's backing file a moment after our Release, so
	// passthrough of a new version waits for an open that has seen no
	// passthrough handle open (see docs/semantics.md).
	sameVer := n.ptKey == key && n.ptETag == info.etag
	if n.ptOpen > 0 && !sameVer && !n.waitPTClosed(ctx) {
		n.mu.Unlock()
		closeFiles(df, drop)
		return nil, 0, syscall.ESTALE
	}
	if n.ptOpen > 0 {
		if df == nil {
			df = n.dupPTFile() // the version is no longer (or not yet) on disk
		}
		if df == nil {
			n.mu.Unlock()
			closeFiles(drop)
			return nil, 0, syscall.EIO
		}
	}
	usePT := n.ptOpen > 0 || (ptOK && n.cachedOpen == 0 && (sameVer || n.ptKey == ""))
	if !usePT && !sameVer {
		n.ptKey, n.ptETag = "", ""
	}
	direct := writing
	switch {
	case usePT:
		if n.ptOpen == 0 {
			n.ptZero = make(chan struct{})
		}
		n.ptOpen++
		n.ptKey, n.ptETag = key, info.etag
	case !direct:
		n.cachedOpen++
	}
	var ph *ptHandle
	if usePT {
		ph = &ptHandle{&diskHandle{n: n, key: key, etag: info.etag, size: info.size, file: df}}
		n.ptHandles[ph] = struct{}{}
	}
	n.mu.Unlock()
	closeFiles(drop)
	if ph != nil {
		// go-fuse adds FOPEN_PASSTHROUGH (and drops KEEP_CACHE) when the
		// kernel takes the backing file; else reads come to Read.
		return ph, 0, 0
	}

	// A read handle has nothing to flush: close(2) need not wait for a
	// FLUSH round trip (FOPEN_NOFLUSH, Linux 5.16; ignored before).
	flags := uint32(fuse.FOPEN_NOFLUSH)
	switch {
	case direct:
		// An upload to this inode is in progress: its writes move the
		// kernel's file size, which would cut or zero-pad a page-cache
		// read of the old version. Direct I/O lets this handle's own
		// version decide where the file ends.
		flags |= fuse.FOPEN_DIRECT_IO
	case keep:
		flags |= fuse.FOPEN_KEEP_CACHE
	}
	if df != nil {
		return &diskHandle{n: n, key: key, etag: info.etag, size: info.size, file: df, cached: !direct}, flags, 0
	}
	h := f.newReadHandle(n, key, info)
	h.direct = direct
	h.cached = !direct
	return h, flags, 0
}

// writerSize is the largest size of the uploads in progress (0 if none).
func (n *fileNode) writerSize() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var m int64
	for w := range n.writers {
		m = max(m, w.size.Load())
	}
	return m
}

// Statfs implements fs.NodeStatfser (statfs(2) of a file path).
func (n *fileNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	n.mu.Lock()
	d := n.dir
	n.mu.Unlock()
	return d.Statfs(ctx, out)
}

// releaseCachedOpen counts the release of a read handle opened without
// direct I/O (see cachedOpen).
func (n *fileNode) releaseCachedOpen() {
	n.mu.Lock()
	n.cachedOpen--
	n.mu.Unlock()
}
