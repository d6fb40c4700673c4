package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/os2g/os2g/namespace"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/upload"
)

// DefaultWriteWindow is the default Options.WriteWindow: the bytes an
// upload handle holds back before handing them to the Store's Writer, so
// that a writer that seeks back (to patch a header) or reads back what it
// just wrote is served. At least half of it is always held; anything
// older is on its way to the store and cannot change.
const DefaultWriteWindow = 8 << 20

type writeState uint8

const (
	wsOpen   writeState = iota // accepting writes
	wsDone                     // committed (or nothing to commit)
	wsFailed                   // aborted or the commit failed; errno says why
)

// writeHandle is a file opened for writing: its bytes stream, in order,
// into one Store.Put upload that is committed by the owner's first close
// (FLUSH), by fsync, or at RELEASE, and becomes visible atomically then.
// Opened with FOPEN_DIRECT_IO, so the kernel page cache of the previous
// version is never mixed with new bytes.
type writeHandle struct {
	n      *fileNode
	fsys   *filesys
	key    string       // fixed at open
	owner  int          // tgid of the opener (0: unknown)
	append bool         // O_APPEND: every write goes to the end
	wasNew bool         // no committed object existed at open
	size   atomic.Int64 // logical size in bytes; read without mu

	mu sync.Mutex // guards the fields below
	// keep: opened without O_TRUNC on a non-empty object; the old bytes
	// stay unless ftruncate(0) turns this into a rewrite. Writes fail.
	keep   bool
	dirty  bool             // there is something to commit
	failed bool             // a write could not be honoured: abort at close
	w      objclient.Writer // started lazily
	win    *upload.Window   // the bytes not yet given to w (pushed to w by push)
	state  writeState
	errno  syscall.Errno // result reported by later FLUSH/fsync calls
	rd     *readHandle   // keep mode: reads of the existing object
}

var (
	_ fs.FileWriter   = (*writeHandle)(nil)
	_ fs.FileReader   = (*writeHandle)(nil)
	_ fs.FileFlusher  = (*writeHandle)(nil)
	_ fs.FileFsyncer  = (*writeHandle)(nil)
	_ fs.FileReleaser = (*writeHandle)(nil)
)

func (f *filesys) putOptions() objclient.PutOptions {
	return objclient.PutOptions{PartSize: f.o.PartSize}
}

// openWrite makes an upload handle. created: the file was just created
// (an empty object must be committed even if nothing is written).
func (n *fileNode) openWrite(ctx context.Context, flags uint32, created bool) (*writeHandle, syscall.Errno) {
	trunc := flags&syscall.O_TRUNC != 0
	app := flags&syscall.O_APPEND != 0
	owner := tgidOf(callerPid(ctx))
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.waitPTClosed(ctx) {
		// The kernel serves this inode from a disk cache file
		// (passthrough) and refuses any other kind of open of it.
		return nil, syscall.ETXTBSY
	}
	exists, size := n.exists, n.info.size
	if app && exists && size > 0 && !trunc {
		return nil, syscall.EOPNOTSUPP
	}
	h := &writeHandle{n: n, fsys: n.fsys, key: namespace.ChildKey(n.dir.key, n.name), owner: owner, append: app, wasNew: !exists}
	win, err := upload.New(n.fsys.o.WriteWindow, h.push)
	if err != nil {
		// Options.WriteWindow is validated at mount.
		return nil, n.fsys.errno("open", h.key, err)
	}
	h.win = win
	if trunc || created || !exists || size == 0 {
		h.dirty = trunc || created
		n.writers[h] = struct{}{}
		n.latest = h
	} else {
		h.keep = true
		h.size.Store(size)
	}
	return h, 0
}

// register makes h the node's current writer (keep mode turned rewrite).
func (h *writeHandle) register() {
	n := h.n
	n.mu.Lock()
	n.writers[h] = struct{}{}
	n.latest = h
	n.mu.Unlock()
}

// unregister removes h from the node's writers.
func (h *writeHandle) unregister() {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.writers, h)
	if n.latest == h {
		n.latest = nil
		for o := range n.writers {
			n.latest = o
			break
		}
	}
}

// Write implements fs.FileWriter.
func (h *writeHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.state != wsOpen || h.keep:
		// After fsync/close committed the upload, or in-place
		// modification of an existing object: cannot be honoured.
		return 0, syscall.EINVAL
	case h.failed:
		return 0, syscall.EIO
	}
	if h.append {
		off = h.win.End()
	}
	if off < h.win.Base() {
		h.failed = true
		h.fsys.log.Warn("write before the upload window; the upload will be aborted", "key", h.key, "offset", off, "window_start", h.win.Base())
		return 0, syscall.EINVAL
	}
	// The window's rules (zero-fill, push of all but the newer half):
	// upload.Window.Write.
	if err := h.win.Write(data, off); err != nil {
		return 0, h.fsys.errno("write", h.key, err)
	}
	h.dirty = true
	h.size.Store(h.win.End())
	return uint32(len(data)), 0
}

// start begins the upload.
func (h *writeHandle) start() syscall.Errno {
	if h.w != nil {
		return 0
	}
	w, err := h.fsys.store.Put(h.fsys.bg, h.key, h.fsys.putOptions())
	if err != nil {
		h.failed = true
		return h.fsys.errno("put", h.key, err)
	}
	h.w = w
	return 0
}

// push hands the oldest held bytes p to the Writer (the window's push
// function; h.mu held). It returns a syscall.Errno, which the window
// returns unchanged.
func (h *writeHandle) push(p []byte) error {
	if errno := h.start(); errno != 0 {
		return errno
	}
	if _, err := h.w.Write(p); err != nil {
		h.failed = true
		return h.fsys.errno("write", h.key, err)
	}
	return nil
}

// truncate is ftruncate(2) on the handle: to the current size is a no-op;
// to 0 starts the object over; within the held window, or beyond the end,
// it cuts or zero-fills; anything else (bytes already handed to the
// upload, or part of an existing object kept) is EOPNOTSUPP.
func (h *writeHandle) truncate(size int64) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != wsOpen {
		return syscall.EINVAL
	}
	cur := h.win.End()
	if h.keep {
		cur = h.size.Load()
	}
	switch {
	case size == cur:
		return 0
	case h.keep && size != 0:
		return syscall.EOPNOTSUPP
	case h.keep:
		h.keep = false
		h.dirty = true
		h.size.Store(0)
		h.register()
		return 0
	case size < h.win.Base():
		return syscall.EOPNOTSUPP
	}
	// Cut within the window or zero-fill past the end:
	// upload.Window.Truncate.
	h.dirty = true
	if err := h.win.Truncate(size); err != nil {
		return h.fsys.errno("truncate", h.key, err)
	}
	h.size.Store(size)
	return 0
}

// Read implements fs.FileReader for O_RDWR handles: bytes still held by
// the handle are served; older bytes (already handed to the upload) give
// EBADF, never a short read. In keep mode the existing object is read.
func (h *writeHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	if h.keep {
		if h.rd == nil {
			h.n.mu.Lock()
			info := h.n.info
			h.n.mu.Unlock()
			h.rd = h.fsys.newReadHandle(h.n, h.key, info)
			h.rd.direct = true // the write handle is opened with direct I/O
		}
		rd := h.rd
		h.mu.Unlock()
		return rd.Read(ctx, dest, off)
	}
	defer h.mu.Unlock()
	k, err := h.win.ReadAt(dest, off)
	if err != nil {
		return nil, h.fsys.errno("read", h.key, err) // EBADF: pushed bytes
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// Flush implements fs.FileFlusher (close(2) of one descriptor). The
// opener's close of its last writable descriptor of the file commits the
// upload and returns its result; a close while the opener still holds a
// dup'd writable descriptor, or from another process (a forked child's
// inherited copy), does nothing; a close by a process being killed by a
// signal aborts the upload, so no partial object appears. Flushes after
// the commit repeat its result.
func (h *writeHandle) Flush(ctx context.Context) syscall.Errno {
	pid := callerPid(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != wsOpen {
		return h.errno
	}
	if t := tgidOf(pid); h.owner != 0 && t != 0 && t != h.owner {
		return 0
	}
	if killedBySignal(pid) {
		h.fsys.log.Warn("writer killed by a signal; upload aborted", "key", h.key, "pid", pid)
		h.abortLocked(syscall.EIO)
		return syscall.EIO
	}
	if otherWriteFD(h.owner, h.n.path()) {
		return 0 // a dup'd descriptor of the owner is still open
	}
	return h.commitLocked()
}

// Fsync implements fs.FileFsyncer: it commits the upload (the data is
// then durable in the store); later writes to the handle fail with
// EINVAL.
func (h *writeHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != wsOpen {
		return h.errno
	}
	return h.commitLocked()
}

// Release implements fs.FileReleaser: an upload not committed by a FLUSH
// is committed now (nobody can see the result; failures are logged).
func (h *writeHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == wsOpen {
		if errno := h.commitLocked(); errno != 0 {
			h.fsys.log.Error("upload committed at release failed", "key", h.key, "errno", errno)
		}
	}
	if h.rd != nil {
		_ = h.rd.Release(ctx)
	}
	return 0
}

// abortLocked discards the upload with result errno.
func (h *writeHandle) abortLocked(errno syscall.Errno) {
	if h.w != nil {
		if err := h.w.Abort(h.fsys.bg); err != nil {
			h.fsys.log.Warn("abort of upload failed", "key", h.key, "err", err)
		}
		h.w = nil
	}
	h.win.Discard()
	h.state, h.errno = wsFailed, errno
	h.unregister()
	h.n.dropIfPhantom()
}

// commitLocked finishes the upload and publishes the new version.
func (h *writeHandle) commitLocked() syscall.Errno {
	if h.failed {
		h.abortLocked(syscall.EIO)
		return syscall.EIO
	}
	if !h.dirty {
		h.state = wsDone
		h.unregister()
		h.n.dropIfPhantom()
		return 0
	}
	if h.n.isUnlinked() {
		h.abortLocked(0)
		return 0
	}
	if errno := h.start(); errno != 0 {
		h.abortLocked(errno)
		return errno
	}
	if held := h.win.Held(); len(held) > 0 {
		if _, err := h.w.Write(held); err != nil {
			errno := h.fsys.errno("write", h.key, err)
			h.abortLocked(errno)
			return errno
		}
	}
	size := h.win.End()
	info, err := h.w.Commit(h.fsys.bg)
	h.w = nil
	h.win.Discard()
	if err != nil {
		errno := h.fsys.errno("commit", h.key, err)
		h.fsys.log.Error("upload failed; close() reports it", "key", h.key, "errno", errno)
		h.state, h.errno = wsFailed, errno
		h.unregister()
		h.n.dropIfPhantom()
		return errno
	}
	h.state, h.errno = wsDone, 0
	h.n.committed(h.key, info, size)
	h.unregister()
	return 0
}

// committed publishes a new object version of n.
func (n *fileNode) committed(key string, info objclient.ObjectInfo, size int64) {
	f := n.fsys
	if info.Size == 0 {
		info.Size = size
	}
	if info.LastModified.IsZero() {
		info.LastModified = time.Now()
	}
	n.mu.Lock()
	n.info = objInfo{size: info.Size, etag: info.ETag, mtime: info.LastModified}
	n.exists, n.stale = true, false
	d, name := n.dir, n.name
	n.mu.Unlock()
	d.commitPending(name, n, namespace.FileEntry(objclient.ObjectInfo{Size: info.Size, ETag: info.ETag, LastModified: info.LastModified}, f.now()))
	f.invalidate(key)
}

// isUnlinked reports whether the file was unlinked while being written.
func (n *fileNode) isUnlinked() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unlinked
}

// dropIfPhantom removes a new file whose every upload ended without a
// commit, so no empty placeholder stays visible.
func (n *fileNode) dropIfPhantom() {
	n.mu.Lock()
	phantom := !n.exists && len(n.writers) == 0 && !n.unlinked
	if phantom {
		n.gone = true
	}
	d, name := n.dir, n.name
	n.mu.Unlock()
	if !phantom {
		return
	}
	d.removePending(name, n)
	d.noteGone(name)
	// The kernel may hold a positive dentry: drop it. FLUSH and RELEASE
	// do not hold the directory's lock, so this cannot deadlock.
	_ = d.NotifyEntry(name)
}
