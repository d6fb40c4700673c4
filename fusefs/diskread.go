package fusefs

import (
	"context"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// diskHandle is a read handle whose object version is held whole in the
// disk cache: reads are pread(2) on the cached file and never reach the
// store. It is not offered for passthrough (see ptHandle).
type diskHandle struct {
	n      *fileNode
	key    string
	etag   string
	size   int64 // bytes
	file   *os.File
	cached bool // counted in n.cachedOpen (opened without direct I/O)
}

// ptHandle is a diskHandle offered to the kernel for FUSE passthrough:
// go-fuse registers its descriptor as the inode's backing file and the
// kernel reads the cached file itself; where it refuses, reads arrive at
// diskHandle.Read. It is counted in n.ptOpen.
type ptHandle struct {
	*diskHandle
}

var (
	_ fs.FileReader          = (*diskHandle)(nil)
	_ fs.FileReleaser        = (*diskHandle)(nil)
	_ fs.FileReader          = (*ptHandle)(nil)
	_ fs.FileReleaser        = (*ptHandle)(nil)
	_ fs.FilePassthroughFder = (*ptHandle)(nil)
)

// Read implements fs.FileReader.
func (h *diskHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.n.fsys.diskReads.Add(1)
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if h.cached && off+int64(len(dest)) > h.size && h.n.writerSize() > h.size {
		// As readHandle.Read: an overwrite in progress grew the kernel's
		// file size; a short reply would be zero-padded in the page cache.
		return nil, syscall.ESTALE
	}
	if off >= h.size {
		return fuse.ReadResultData(nil), 0
	}
	want := min(int64(len(dest)), h.size-off)
	got, err := h.file.ReadAt(dest[:want], off)
	if int64(got) < want {
		h.n.fsys.log.Warn("disk cache: short read of a cached file", "key", h.key, "off", off, "err", err)
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:got]), 0
}

// Release implements fs.FileReleaser.
func (h *diskHandle) Release(ctx context.Context) syscall.Errno {
	if h.cached {
		h.n.releaseCachedOpen()
	}
	_ = h.file.Close()
	return 0
}

// PassthroughFd implements fs.FilePassthroughFder. go-fuse calls it once
// per open, and only when the inode has no backing file registered yet.
func (h *ptHandle) PassthroughFd() (int, bool) {
	h.n.fsys.ptFds.Add(1)
	return int(h.file.Fd()), true
}

// Release implements fs.FileReleaser.
func (h *ptHandle) Release(ctx context.Context) syscall.Errno {
	h.n.mu.Lock()
	h.n.ptOpen--
	delete(h.n.ptHandles, h)
	if h.n.ptOpen == 0 {
		close(h.n.ptZero)
	}
	h.n.mu.Unlock()
	_ = h.file.Close()
	return 0
}

// passthrough records whether the kernel accepts backing files for this
// mount (FUSE_PASSTHROUGH negotiated and the daemon privileged, Linux
// 6.9+), learned by registering the first cached file once.
type passthrough struct {
	mu     sync.Mutex // guards probed and ok
	probed bool
	ok     bool
}

// passthroughOK reports whether cached files may be offered for
// passthrough; the first call probes the kernel with file's descriptor
// (FUSE_DEV_IOC_BACKING_OPEN, then closes the backing id again).
func (f *filesys) passthroughOK(file *os.File) bool {
	if !f.o.Passthrough {
		return false
	}
	f.pt.mu.Lock()
	defer f.pt.mu.Unlock()
	if f.pt.probed {
		return f.pt.ok
	}
	srv := f.srv.Load()
	if srv == nil {
		return false // still mounting: ask again at the next open
	}
	f.pt.probed = true
	id, errno := srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(file.Fd())})
	if errno != 0 {
		f.log.Info("disk cache: FUSE passthrough unavailable, cached files are read through the daemon", "err", errno)
		return false
	}
	if errno := srv.UnregisterBackingFd(id); errno != 0 {
		f.log.Warn("disk cache: closing the probe backing id", "err", errno)
	}
	f.pt.ok = true
	f.log.Info("disk cache: FUSE passthrough enabled, the kernel reads cached files itself")
	return true
}

// dupPTFile returns a new descriptor on the cached file of an open
// passthrough handle of n, or nil. n.mu must be held.
func (n *fileNode) dupPTFile() *os.File {
	for h := range n.ptHandles {
		fd, err := syscall.Dup(int(h.file.Fd()))
		if err != nil {
			n.fsys.log.Warn("disk cache: dup of a passthrough file", "key", h.key, "err", err)
			return nil
		}
		syscall.CloseOnExec(fd)
		return os.NewFile(uintptr(fd), h.file.Name())
	}
	return nil
}

// closeFiles closes the non-nil files.
func closeFiles(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

// ptCloseWait bounds how long an open that conflicts with passthrough
// handles of the inode waits for them to be released. The kernel sends
// RELEASE after close(2) has returned, so `cat f; cp g f` would otherwise
// see the cat's handle still open.
const ptCloseWait = time.Second

// waitPTClosed waits until no passthrough handle of n is open, at most
// ptCloseWait, and reports whether none is. n.mu is held on entry and on
// return (dropped while waiting).
func (n *fileNode) waitPTClosed(ctx context.Context) bool {
	if n.ptOpen == 0 {
		return true
	}
	t := time.NewTimer(ptCloseWait)
	defer t.Stop()
	for n.ptOpen > 0 {
		ch := n.ptZero
		n.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			n.mu.Lock()
			return n.ptOpen == 0
		case <-ctx.Done():
			n.mu.Lock()
			return n.ptOpen == 0
		}
		n.mu.Lock()
	}
	return true
}
