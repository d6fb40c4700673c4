package fusefs

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/os2g/os2g/namespace"
	"github.com/os2g/os2g/objclient"
)

// renameNoreplace is Linux's RENAME_NOREPLACE flag of renameat2(2).
const renameNoreplace = 0x1

var (
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeMkdirer   = (*dirNode)(nil)
	_ fs.NodeMknoder   = (*dirNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRmdirer   = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
	_ fs.NodeLinker    = (*dirNode)(nil)
	_ fs.NodeSymlinker = (*dirNode)(nil)
)

// Create implements fs.NodeCreater. A new file is visible at once (size
// growing while written) and exists in the store only after the upload
// is committed; an existing file is opened for writing as by Open.
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := d.fsys.roErr(); e != 0 {
		return nil, nil, 0, e
	}
	ent, pend, errno := d.resolve(ctx, name)
	switch {
	case errno == 0 && flags&syscall.O_EXCL != 0:
		return nil, nil, 0, syscall.EEXIST
	case errno == 0 && pend == nil && ent.Dir:
		return nil, nil, 0, syscall.EISDIR
	case errno == 0:
		var ch *fs.Inode
		if pend != nil {
			ch = pend.EmbeddedInode()
		} else {
			ch = d.childInode(ctx, name, ent, out)
		}
		n := ch.Operations().(*fileNode)
		h, errno := n.openWrite(ctx, flags, false)
		if errno != 0 {
			return nil, nil, 0, errno
		}
		n.fillEntry(out)
		return ch, h, fuse.FOPEN_DIRECT_IO, 0
	case errno != syscall.ENOENT:
		return nil, nil, 0, errno
	}
	n := newFileNode(d.fsys, d, name, objInfo{mtime: time.Now()}, false)
	ch := d.NewInode(ctx, n, fs.StableAttr{Mode: syscall.S_IFREG})
	h, errno := n.openWrite(ctx, flags, true)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	d.addPending(name, n)
	n.fillEntry(out)
	return ch, h, fuse.FOPEN_DIRECT_IO, 0
}

// Mkdir implements fs.NodeMkdirer: it writes the marker object "dir/".
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := d.fsys
	if e := f.roErr(); e != 0 {
		return nil, e
	}
	if _, _, errno := d.resolve(ctx, name); errno == 0 {
		return nil, syscall.EEXIST
	} else if errno != syscall.ENOENT {
		return nil, errno
	}
	key := namespace.ChildDirKey(d.key, name)
	w, err := f.store.Put(f.bg, key, objclient.PutOptions{})
	if err != nil {
		return nil, f.errno("mkdir", key, err)
	}
	if _, err := w.Commit(f.bg); err != nil {
		return nil, f.errno("mkdir", key, err)
	}
	e := dirent{Dir: true, Seen: f.now()}
	d.noteEnt(name, e)
	return d.childInode(ctx, name, e, out), 0
}

// Mknod implements fs.NodeMknoder: device nodes, FIFOs and sockets
// cannot be stored (EPERM).
func (d *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := d.fsys.roErr(); e != 0 {
		return nil, e
	}
	return nil, syscall.EPERM
}

// Link implements fs.NodeLinker: no hard links (EPERM).
func (d *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := d.fsys.roErr(); e != 0 {
		return nil, e
	}
	return nil, syscall.EPERM
}

// Symlink implements fs.NodeSymlinker: no symbolic links (EPERM).
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := d.fsys.roErr(); e != 0 {
		return nil, e
	}
	return nil, syscall.EPERM
}

// child returns the inode of name, looking it up if the kernel has not
// (it normally looks names up before unlink and rmdir; be safe anyway).
func (d *dirNode) child(ctx context.Context, name string) (*fs.Inode, syscall.Errno) {
	if ch := d.GetChild(name); ch != nil {
		return ch, 0
	}
	var out fuse.EntryOut
	return d.Lookup(ctx, name, &out)
}

// Unlink implements fs.NodeUnlinker: DeleteObject. A file still being
// written is discarded when its writer closes.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	f := d.fsys
	if e := f.roErr(); e != 0 {
		return e
	}
	ch, errno := d.child(ctx, name)
	if errno != 0 {
		return errno
	}
	n, ok := ch.Operations().(*fileNode)
	if !ok {
		return syscall.EISDIR
	}
	n.mu.Lock()
	exists := n.exists
	key := namespace.ChildKey(n.dir.key, n.name)
	if len(n.writers) > 0 {
		n.unlinked = true
	}
	n.mu.Unlock()
	d.removePending(name, n)
	if !exists {
		d.noteGone(name)
		d.childrenChanged()
		return 0
	}
	if err := f.store.Delete(ctx, key); err != nil {
		return f.errno("unlink", key, err)
	}
	n.mu.Lock()
	n.exists = false
	n.mu.Unlock()
	d.noteGone(name)
	d.childrenChanged()
	f.invalidate(key)
	return 0
}

// Rmdir implements fs.NodeRmdirer: ENOTEMPTY if any key is under the
// directory, else its markers ("dir/" and a zero-byte x-directory "dir")
// are deleted. An implicit directory has no marker; it vanishes with its
// last key anyway.
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	f := d.fsys
	if e := f.roErr(); e != 0 {
		return e
	}
	ch, errno := d.child(ctx, name)
	if errno != 0 {
		return errno
	}
	cd, ok := ch.Operations().(*dirNode)
	if !ok {
		return syscall.ENOTDIR
	}
	if cd.hasPending() {
		return syscall.ENOTEMPTY
	}
	page, err := f.store.List(ctx, objclient.ListRequest{Prefix: cd.key, MaxKeys: 2})
	if err != nil {
		return f.errno("rmdir", cd.key, err)
	}
	for _, o := range page.Objects {
		if o.Key != cd.key {
			return syscall.ENOTEMPTY
		}
	}
	if len(page.CommonPrefixes) > 0 {
		return syscall.ENOTEMPTY
	}
	if len(page.Objects) > 0 {
		if err := f.store.Delete(ctx, cd.key); err != nil {
			return f.errno("rmdir", cd.key, err)
		}
	}
	if cd.xdirKey != "" {
		if err := f.store.Delete(ctx, cd.xdirKey); err != nil {
			return f.errno("rmdir", cd.xdirKey, err)
		}
	}
	d.noteGone(name)
	d.childrenChanged()
	return 0
}

// Rename implements fs.NodeRenamer for files: server-side Copy (If-Match
// the source's ETag), then the tree is updated, then the source is
// deleted, so an observer always finds at least one of the two names.
// Directories are not renamed (EXDEV: mv falls back to copy and unlink).
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	f := d.fsys
	if e := f.roErr(); e != 0 {
		return e
	}
	nd, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	if flags&fs.RENAME_EXCHANGE != 0 {
		return syscall.EINVAL
	}
	ch := d.GetChild(name)
	if ch == nil {
		var out fuse.EntryOut
		var errno syscall.Errno
		if ch, errno = d.Lookup(ctx, name, &out); errno != 0 {
			return errno
		}
	}
	n, ok := ch.Operations().(*fileNode)
	if !ok {
		return syscall.EXDEV
	}
	if tent, tpend, errno := nd.resolve(ctx, newName); errno == 0 {
		if flags&renameNoreplace != 0 {
			return syscall.EEXIST
		}
		if tpend == nil && tent.Dir {
			return syscall.EISDIR
		}
		if tpend != nil {
			return syscall.EBUSY
		}
	} else if errno != syscall.ENOENT {
		return errno
	}
	n.mu.Lock()
	exists, writing, old := n.exists, len(n.writers) > 0, n.info
	src := namespace.ChildKey(n.dir.key, n.name)
	n.mu.Unlock()
	if writing || !exists {
		return syscall.EBUSY
	}
	dst := namespace.ChildKey(nd.key, newName)
	if src == dst {
		return 0
	}
	info, err := f.store.Copy(ctx, src, dst, old.etag)
	if err != nil {
		return f.errno("rename", src, err)
	}
	if info.Size == 0 {
		info.Size = old.size
	}
	if info.LastModified.IsZero() {
		info.LastModified = time.Now()
	}
	n.mu.Lock()
	n.dir, n.name = nd, newName
	n.info = objInfo{size: info.Size, etag: info.ETag, mtime: info.LastModified}
	n.mu.Unlock()
	nd.noteEnt(newName, namespace.FileEntry(info, f.now()))
	f.invalidate(dst)
	if err := f.store.Delete(ctx, src); err != nil {
		// dst is complete and the node now names it; the source object
		// is left behind and shows up again at the next lookup.
		f.log.Error("rename: deleting the source after the copy failed", "src", src, "dst", dst, "err", err)
		d.forgetEnt(name)
		return 0
	}
	d.noteGone(name)
	d.childrenChanged()
	f.invalidate(src)
	return 0
}
