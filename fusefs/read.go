package fusefs

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

// byteReader reads one object version; *prefetch.Reader and directReader
// implement it. ReadAt is short only at the end of the object.
type byteReader interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Close() error
}

var (
	_ byteReader = (*prefetch.Reader)(nil)
	_ byteReader = (*directReader)(nil)
)

// readHandle is a file opened for reading: one object version (key,
// ETag, size) fixed at open, read with If-Match so that a replaced object
// gives ESTALE, never a mix of versions.
type readHandle struct {
	n      *fileNode
	key    string
	etag   string
	size   int64
	direct bool // opened with FOPEN_DIRECT_IO (the kernel does not bound reads by its file size)
	cached bool // counted in n.cachedOpen (opened without direct I/O)
	r      byteReader
}

var (
	_ fs.FileReader   = (*readHandle)(nil)
	_ fs.FileReleaser = (*readHandle)(nil)
)

func (f *filesys) newReadHandle(n *fileNode, key string, info objInfo) *readHandle {
	h := &readHandle{n: n, key: key, etag: info.etag, size: info.size}
	if f.pf != nil {
		h.r = f.pf.Open(prefetch.File{Key: key, Size: info.size, ETag: info.etag})
	} else {
		h.r = &directReader{store: f.store, key: key, etag: info.etag, size: info.size}
	}
	return h
}

// Read implements fs.FileReader.
func (h *readHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if !h.direct && off+int64(len(dest)) > h.size && h.n.writerSize() > h.size {
		// The kernel reads past this version's end because a concurrent
		// overwrite has grown its file size: a short reply would be
		// padded with zeros in the page cache. A clean error instead.
		return nil, syscall.ESTALE
	}
	if off >= h.size {
		return fuse.ReadResultData(nil), 0
	}
	want := min(int64(len(dest)), h.size-off)
	if pr, ok := h.r.(*prefetch.Reader); ok {
		// The reply is written from the cache's buffer (no copy into
		// dest) and the buffer released once it is sent.
		b, release, err := pr.Borrow(ctx, dest[:want], off)
		if err != nil {
			return nil, h.readErr(err)
		}
		return &borrowed{b: b, release: release}, 0
	}
	got, err := h.r.ReadAt(ctx, dest[:want], off)
	if err != nil {
		return nil, h.readErr(err)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

// readErr maps a read's error. The handle reads one version of the
// object; a version that is gone, replaced (ErrChanged) or deleted
// (ErrNotFound), gives ESTALE: read(2) does not document ENOENT.
func (h *readHandle) readErr(err error) syscall.Errno {
	if errors.Is(err, objclient.ErrNotFound) {
		h.n.markStale()
		h.n.fsys.log.Warn("object deleted while open", "op", "read", "key", h.key, "err", err)
		return syscall.ESTALE
	}
	if errors.Is(err, objclient.ErrChanged) {
		h.n.markStale()
	}
	return h.n.fsys.errno("read", h.key, err)
}

// borrowed is a READ reply whose bytes are a prefetch buffer lent by
// Reader.Borrow. go-fuse writes it with writev straight from b (it takes
// the Slices method) and then calls Done, which gives the buffer back.
type borrowed struct {
	b       []byte
	release func()
}

var _ fuse.ReadResult = (*borrowed)(nil)

func (r *borrowed) Bytes(buf []byte) ([]byte, fuse.Status) { return r.b, fuse.OK }
func (r *borrowed) Size() int                              { return len(r.b) }
func (r *borrowed) Done()                                  { r.release() }

// Slices lets go-fuse write b with writev(2) without copying it into its
// own reply buffer (go-fuse's withSlice interface).
func (r *borrowed) Slices() ([][]byte, fuse.Status) { return [][]byte{r.b}, fuse.OK }

// Release implements fs.FileReleaser.
func (h *readHandle) Release(ctx context.Context) syscall.Errno {
	if h.cached {
		h.n.releaseCachedOpen()
	}
	_ = h.r.Close()
	return 0
}

// wholeLimit: without prefetch, objects up to this size (bytes) are read
// whole on the first read and served from the handle, so a small file is
// one GET and one consistent snapshot.
const wholeLimit = 1 << 20

// directReader reads with Store.GetRange, one request per kernel read
// (objects up to wholeLimit: one request per handle).
type directReader struct {
	store objclient.Store
	key   string
	etag  string
	size  int64

	mu     sync.Mutex // guards whole and loaded
	whole  []byte
	loaded bool
}

func (r *directReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if r.size > wholeLimit {
		return r.store.GetRange(ctx, r.key, off, p, r.etag)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.loaded {
		buf := make([]byte, r.size)
		n, err := r.store.GetRange(ctx, r.key, 0, buf, r.etag)
		if err != nil {
			return 0, err
		}
		r.whole, r.loaded = buf[:n], true
	}
	if off >= int64(len(r.whole)) {
		return 0, nil
	}
	return copy(p, r.whole[off:]), nil
}

func (r *directReader) Close() error {
	r.mu.Lock()
	r.whole = nil
	r.mu.Unlock()
	return nil
}

// The entry point of every READ, in every mode.
var (
	_ fs.NodeReader  = (*fileNode)(nil)
	_ fs.NodeFlusher = (*fileNode)(nil)
)

// Read implements fs.NodeReader: a READ with a handle goes to the handle,
// one without (dataset mode) to the file's sharedReader.
func (n *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx, cancel := interruptGrace(ctx, readInterruptGrace)
	defer cancel()
	if fr, ok := fh.(fs.FileReader); ok {
		return fr.Read(ctx, dest, off)
	}
	if fh != nil {
		return nil, syscall.EBADF
	}
	return n.sharedRead(ctx, dest, off)
}

// interruptGrace returns a context that ends grace after ctx does (or when
// cancel is called). A FUSE INTERRUPT comes for any signal the reading
// thread takes, and Go programs take SIGURG (goroutine preemption) all the
// time: in a Go reader of small files, about a third of the READs were
// interrupted and restarted. Most READs finish within the grace, and
// answering them normally after an INTERRUPT is allowed; a READ that waits
// longer (a hung server) still ends promptly on Ctrl-C. Fatal signals need
// no answer at all: the kernel stops waiting for a dying task.
func interruptGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return g, func() {
		stop()
		cancel()
	}
}

// Flush implements fs.NodeFlusher. Without a handle (dataset mode) it
// answers ENOSYS, so that the kernel stops sending FLUSH on close.
func (n *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	n.fsys.flushCalls.Add(1)
	if fl, ok := fh.(fs.FileFlusher); ok {
		return fl.Flush(ctx)
	}
	if fh == nil && n.fsys.noOpen() {
		return syscall.ENOSYS
	}
	return 0
}
