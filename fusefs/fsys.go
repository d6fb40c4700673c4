package fusefs

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

// filesys is the state shared by every node of one mount.
type filesys struct {
	o     Options // validated, defaults filled
	store objclient.Store
	log   *slog.Logger
	pf    *prefetch.Manager // nil: direct GetRange reads
	mtime time.Time         // directories' mtime: the mount time
	// mountpoint is the absolute mount point, for matching /proc/*/fd
	// links; immutable.
	mountpoint string

	// bg outlives single requests: uploads and commits run under it so
	// that an interrupt (even the Go runtime's SIGURG) never aborts a
	// checkpoint half-way. Cancelled at unmount.
	bg     context.Context
	cancel context.CancelFunc

	// preListSem bounds the background listings of subdirectories that
	// a detected walk starts on an immutable mount (preListChildren).
	preListSem chan struct{}
	// bgWG counts background listings (goBackground); serving ends only
	// after they have.
	bgWG sync.WaitGroup

	warnMu sync.Mutex // guards warned
	warned map[string]struct{}

	xattrCalls atomic.Int64 // GETXATTR/LISTXATTR/SETXATTR/REMOVEXATTR that reached the daemon

	dc        DiskCache                   // nil: no disk cache
	srv       atomic.Pointer[fuse.Server] // set once mounted (backing file registration)
	pt        passthrough                 // whether the kernel takes backing files
	diskReads atomic.Int64                // READs served by disk cache handles (not by passthrough)
	ptFds     atomic.Int64                // descriptors handed to go-fuse for passthrough

	shared sharedSet // dataset mode's per-file readers (dataset.go)
	// Requests on files that reached the daemon (tests check what dataset
	// mode keeps in the kernel).
	openCalls, flushCalls, sharedReads atomic.Int64

	// clock, if set, replaces the wall clock for cache freshness (tests).
	clock func() int64
}

// goBackground runs fn in a goroutine that unmounting waits for (fn must
// end soon once f.bg is cancelled).
func (f *filesys) goBackground(fn func()) {
	f.bgWG.Add(1)
	go func() {
		defer f.bgWG.Done()
		fn()
	}()
}

// now is the time in unix ns used to date and age cached facts.
func (f *filesys) now() int64 {
	if f.clock != nil {
		return f.clock()
	}
	return time.Now().UnixNano()
}

// maxWarned bounds the set of keys already warned about.
const maxWarned = 10000

// warnKey logs msg once per key (bounded), e.g. for a key that cannot be
// a POSIX name and is skipped in every listing.
func (f *filesys) warnKey(msg, key string) {
	f.warnMu.Lock()
	_, seen := f.warned[key]
	if !seen {
		if len(f.warned) >= maxWarned {
			f.warned = map[string]struct{}{}
		}
		f.warned[key] = struct{}{}
	}
	f.warnMu.Unlock()
	if !seen {
		f.log.Warn(msg, "key", key)
	}
}

// errno maps err for op on key (see errno.go).
func (f *filesys) errno(op, key string, err error) syscall.Errno {
	return toErrno(f.log, op, key, err)
}

// roErr returns EROFS on a read-only mount, else 0.
func (f *filesys) roErr() syscall.Errno {
	if f.o.ReadOnly {
		return syscall.EROFS
	}
	return 0
}

// ownerChange reports whether a SETATTR changes the mode, owner or group
// to something other than what every node already has (mode perm for the
// node's type). Setting the current value is a true no-op and succeeds
// (so shutil.copy and cp -p of a file with default modes work); any real
// change is EPERM, since modes are fixed by the mount options.
func (f *filesys) ownerChange(in *fuse.SetAttrIn, perm os.FileMode) bool {
	if m, ok := in.GetMode(); ok && os.FileMode(m&0o7777) != perm {
		return true
	}
	if u, ok := in.GetUID(); ok && u != f.o.UID {
		return true
	}
	if g, ok := in.GetGID(); ok && g != f.o.GID {
		return true
	}
	return false
}

// fresh reports whether a fact learned at t (unix ns) is still within ttl.
func (f *filesys) fresh(t int64, ttl time.Duration) bool {
	if t == 0 {
		return false
	}
	if f.o.Immutable {
		return true
	}
	return f.now()-t < int64(ttl)
}

// fileAttr fills out for a regular file of size bytes modified at mtime.
func (f *filesys) fileAttr(out *fuse.Attr, size int64, mtime time.Time) {
	out.Mode = syscall.S_IFREG | uint32(f.o.FileMode)
	out.Size = uint64(size)
	out.Blocks = (uint64(size) + 511) / 512
	out.Blksize = 4096
	out.Nlink = 1
	out.Owner = fuse.Owner{Uid: f.o.UID, Gid: f.o.GID}
	setTimes(out, mtime)
}

// dirAttr fills out for a directory.
func (f *filesys) dirAttr(out *fuse.Attr) {
	out.Mode = syscall.S_IFDIR | uint32(f.o.DirMode)
	out.Size = 4096
	out.Blocks = 8
	out.Blksize = 4096
	out.Nlink = 1 // unknown number of subdirectories (find(1) then does not guess)
	out.Owner = fuse.Owner{Uid: f.o.UID, Gid: f.o.GID}
	setTimes(out, f.mtime)
}

func setTimes(out *fuse.Attr, t time.Time) {
	sec, nsec := uint64(t.Unix()), uint32(t.Nanosecond())
	if t.IsZero() || t.Unix() < 0 {
		sec, nsec = 0, 0
	}
	out.Atime, out.Mtime, out.Ctime = sec, sec, sec
	out.Atimensec, out.Mtimensec, out.Ctimensec = nsec, nsec, nsec
}

// volatileTimeout is the attribute timeout of a file with an upload in
// progress: effectively zero (go-fuse replaces an exact zero with the
// mount default), so every stat sees the current size and the committed
// version right after close.
const volatileTimeout = time.Nanosecond
