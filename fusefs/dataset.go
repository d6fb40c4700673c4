package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/os2g/os2g/namespace"
)

// Dataset mode: on a mount that is both read-only and immutable (and has no
// disk cache), a file's bytes can never change and nothing is ever
// written, so a handle per open(2) buys nothing. The first OPEN is
// answered with ENOSYS, which makes the kernel open every file itself from
// then on without asking the daemon, with the page cache kept across opens
// (FUSE_NO_OPEN_SUPPORT, Linux 3.14; "Default for no-open" in
// fs/fuse/file.c sets FOPEN_KEEP_CACHE), and the first FLUSH likewise, so
// that close(2) stops reaching the daemon too (fc->no_flush). The kernel
// then sends no OPEN, FLUSH or RELEASE at all: a training epoch whose
// files are in the page cache makes no request to the daemon, and a cold
// one makes one READ per file (plus LOOKUP for names not seen in a
// listing). READs then carry no file handle; each file's reads share one
// prefetch.Reader (a sharedReader), which stands in for the handle:
// opened at the first READ, closed once a read reaches the end of a file
// that has been read whole, or after sharedIdle without a read.

// sharedIdle is how long a sharedReader may go without a READ before it
// is closed (its read-ahead left to the cache's LRU).
const sharedIdle = 5 * time.Second

// sharedReader is the read state of a file read without handles. Guarded
// by the fileNode's mu.
type sharedReader struct {
	h      *readHandle
	users  int   // READs in progress
	served int64 // bytes returned so far
	last   int64 // unix ns at the end of the latest READ
	// retired: unlinked from its fileNode, so that no new READ takes it;
	// closed once no READ uses it.
	retired bool
	closed  bool // closed, or about to be by whoever set it
}

// retireLocked unlinks s from n (n.mu held).
func (n *fileNode) retireLocked(s *sharedReader) {
	s.retired = true
	if n.shared == s {
		n.shared = nil
	}
}

// closeOwedLocked reports whether the caller must close s now: it is
// retired, unused and not closed yet (n.mu held).
func (s *sharedReader) closeOwedLocked() bool {
	if s.retired && s.users == 0 && !s.closed {
		s.closed = true
		return true
	}
	return false
}

// noOpen reports whether the mount runs in dataset mode (see above).
func (f *filesys) noOpen() bool {
	return f.o.ReadOnly && f.o.Immutable && f.dc == nil
}

// readInterruptGrace is how long a READ (or a LOOKUP that has to ask
// the store) goes on after the kernel has forwarded a signal of the
// caller as an INTERRUPT.
const readInterruptGrace = 250 * time.Millisecond

// sharedRead serves a READ that carries no handle.
func (n *fileNode) sharedRead(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f := n.fsys
	if !f.noOpen() {
		// Only dataset mode opens files without a handle.
		return nil, syscall.EBADF
	}
	f.sharedReads.Add(1)
	n.mu.Lock()
	if n.stale {
		// The object changed on the server after all (a read saw
		// ErrChanged): reads fail until the sweeper has looked it up
		// again and dropped the kernel's pages (refreshDataset).
		n.mu.Unlock()
		return nil, syscall.ESTALE
	}
	s := n.shared
	if s == nil {
		info := n.info
		if !n.exists {
			info = objInfo{}
		}
		s = &sharedReader{h: f.newReadHandle(n, namespace.ChildKey(n.dir.key, n.name), info), last: f.now()}
		n.shared = s
		f.trackShared(n, s)
	}
	s.users++
	n.mu.Unlock()

	res, errno := s.h.Read(ctx, dest, off)

	n.mu.Lock()
	s.users--
	s.last = f.now()
	switch {
	case errno == syscall.ESTALE:
		// The object changed on the server (markStale has set n.stale):
		// this reader is done, and the sweeper refreshes the file.
		n.retireLocked(s)
		f.trackStale(n)
	case errno == 0:
		got := int64(res.Size())
		s.served += got
		// The file has been read whole and this read reached its end:
		// the next READ (a later epoch whose pages were evicted) starts
		// a new reader, which is also what tells the epoch pre-reader
		// that the file is being read again.
		if s.users == 0 && s.served >= s.h.size && off+got >= s.h.size {
			n.retireLocked(s)
		}
	}
	closeNow := s.closeOwedLocked()
	n.mu.Unlock()
	if closeNow {
		_ = s.h.r.Close()
	}
	return res, errno
}

// sharedSet is the set of open sharedReaders, swept for idle ones by one
// goroutine that runs while the set is not empty. Lock order: a
// fileNode's mu, then sharedSet.mu; the sweeper never holds both.
type sharedSet struct {
	mu       sync.Mutex
	readers  map[*sharedReader]*fileNode
	stale    map[*fileNode]struct{} // files to look up again (refreshDataset)
	sweeping bool
}

// trackShared adds s, n's new sharedReader, to the swept set (n.mu held).
func (f *filesys) trackShared(n *fileNode, s *sharedReader) {
	f.shared.mu.Lock()
	defer f.shared.mu.Unlock()
	if f.shared.readers == nil {
		f.shared.readers = map[*sharedReader]*fileNode{}
	}
	f.shared.readers[s] = n
	f.startSweepLocked()
}

// trackStale queues n, whose object changed, for refreshDataset (n.mu
// held).
func (f *filesys) trackStale(n *fileNode) {
	f.shared.mu.Lock()
	defer f.shared.mu.Unlock()
	if f.shared.stale == nil {
		f.shared.stale = map[*fileNode]struct{}{}
	}
	f.shared.stale[n] = struct{}{}
	f.startSweepLocked()
}

// startSweepLocked starts the sweeper if it is not running (shared.mu held).
func (f *filesys) startSweepLocked() {
	if !f.shared.sweeping {
		f.shared.sweeping = true
		go f.sweepShared()
	}
}

// refreshDataset looks up a file whose object changed, drops the kernel's
// pages and attributes of it (kept forever on an immutable mount) and only
// then lets READs at the new version, so that no read mixes the two. It
// runs on the sweeper, never inside a READ: the invalidation waits for the
// page locks that a READ of the inode in progress holds (such READs are
// answered ESTALE at once meanwhile).
func (n *fileNode) refreshDataset(ctx context.Context) bool {
	errno := n.lookupAgain(ctx, "refresh", func() { n.NotifyContent(0, 0) })
	// Any other error: try again on the next sweep.
	return errno == 0 || errno == syscall.ENOENT
}

// sweepShared closes sharedReaders idle for sharedIdle, until none is left
// or the mount ends.
func (f *filesys) sweepShared() {
	t := time.NewTicker(sharedIdle / 2)
	defer t.Stop()
	for {
		select {
		case <-f.bg.Done():
			f.closeShared(0)
			return
		case <-t.C:
		}
		if f.closeShared(int64(sharedIdle)) {
			return
		}
	}
}

// closeShared closes the sharedReaders idle for at least idle ns and not
// in use, drops the closed ones from the set, and reports whether the set
// is now empty, in which case the sweeper stops.
func (f *filesys) closeShared(idle int64) (empty bool) {
	f.shared.mu.Lock()
	all := make(map[*sharedReader]*fileNode, len(f.shared.readers))
	for s, n := range f.shared.readers {
		all[s] = n
	}
	var stale []*fileNode
	for n := range f.shared.stale {
		stale = append(stale, n)
	}
	f.shared.mu.Unlock()
	var refreshed []*fileNode
	for _, n := range stale {
		ctx, cancel := context.WithTimeout(f.bg, 30*time.Second)
		if n.refreshDataset(ctx) {
			refreshed = append(refreshed, n)
		}
		cancel()
	}

	now := f.now()
	var toClose, gone []*sharedReader
	for s, n := range all {
		n.mu.Lock()
		if s.users == 0 && now-s.last >= idle {
			n.retireLocked(s)
		}
		if s.closeOwedLocked() {
			toClose = append(toClose, s)
		}
		if s.closed {
			gone = append(gone, s)
		}
		n.mu.Unlock()
	}
	for _, s := range toClose {
		_ = s.h.r.Close()
	}

	f.shared.mu.Lock()
	defer f.shared.mu.Unlock()
	for _, s := range gone {
		delete(f.shared.readers, s)
	}
	for _, n := range refreshed {
		delete(f.shared.stale, n)
	}
	if len(f.shared.readers) == 0 && len(f.shared.stale) == 0 {
		f.shared.sweeping = false
		return true
	}
	return false
}
