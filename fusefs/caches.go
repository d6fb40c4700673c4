package fusefs

// The mount's caches beside the kernel's: the prefetcher's block cache
// (Options.Prefetch) and the disk cache of whole versions
// (Options.DiskCache). Every change of an object through the mount
// invalidates both (invalidate).

import "os"

// DiskCache is a local cache of whole object versions (Options.DiskCache);
// *diskcache.Cache implements it.
type DiskCache interface {
	// Open returns a read-only descriptor whose byte i is byte i of the
	// object version (key, etag), its size in bytes and true; false if
	// it is not cached. The caller closes the file.
	Open(key, etag string) (*os.File, int64, bool)
	// Remove drops every cached version of key (overwritten, deleted or
	// renamed).
	Remove(key string)
}

// invalidate forgets every cached copy of key (prefetch blocks and disk
// cache entries): it was overwritten, deleted or renamed.
func (f *filesys) invalidate(key string) {
	if f.pf != nil {
		f.pf.Invalidate(key)
	}
	if f.dc != nil {
		f.dc.Remove(key)
	}
}

// openDisk returns the disk cache's file of (key, info) if it holds that
// version whole, else nil.
func (f *filesys) openDisk(key string, info objInfo) *os.File {
	if f.dc == nil || info.etag == "" || info.size <= 0 {
		return nil
	}
	file, size, ok := f.dc.Open(key, info.etag)
	if !ok {
		return nil
	}
	if size != info.size {
		_ = file.Close()
		return nil
	}
	return file
}
