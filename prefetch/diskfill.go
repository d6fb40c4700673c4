package prefetch

import (
	"errors"
	"fmt"
	"io"
)

// DiskCache receives copies of files read whole through the Manager, so a
// later open can be served from local disk. Put stores exactly size bytes
// read from r as the content of (key, etag), leaving nothing on error;
// Remove drops every entry of key. Both must be safe for concurrent use.
// diskcache.Cache implements it.
type DiskCache interface {
	Put(key, etag string, size int64, r io.Reader) error
	Remove(key string)
}

// DiskCacheHas may be implemented by a DiskCache: Has reports whether it
// holds (key, etag) already, so a file on disk is not copied again each
// time it is read whole.
type DiskCacheHas interface {
	Has(key, etag string) bool
}

// Defaults of the disk cache fill.
const (
	// DefaultDiskCacheMaxFile: larger files are not copied to the disk
	// cache from memory, in bytes.
	DefaultDiskCacheMaxFile = 64 << 20
	// DefaultDiskCacheConcurrency: copies to the disk cache in progress at
	// once.
	DefaultDiskCacheConcurrency = 2
)

// errEvicted: an extent a disk-cache copy needed was evicted (or
// invalidated) before the copy reached it.
var errEvicted = errors.New("prefetch: cached bytes evicted during disk-cache copy")

// diskFill is one copy to the disk cache in progress. Guarded by
// Manager.mu.
type diskFill struct {
	etag        string
	invalidated bool // Invalidate(key) ran meanwhile: remove the entry after Put
}

// offerDisk hands f to Options.DiskCache in the background when a handle
// has read all of it and every byte is still cached. It skips f when the
// disk cache is absent, f is empty, unversioned or over DiskCacheMaxFile,
// f is being copied already or on disk (DiskCacheHas), or
// DiskCacheConcurrency copies run.
func (m *Manager) offerDisk(f File) {
	if m.o.DiskCache == nil || f.Size <= 0 || f.Size > m.o.DiskCacheMaxFile || f.ETag == "" {
		return
	}
	if h, ok := m.o.DiskCache.(DiskCacheHas); ok && h.Has(f.Key, f.ETag) {
		return
	}
	fk := fileKey{f.Key, f.ETag}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.diskFills[f.Key] != nil {
		return
	}
	if len(m.diskFills) >= m.o.DiskCacheConcurrency || !m.cachedWholeLocked(fk, f.Size) {
		m.st.diskSkipped.Add(1)
		return
	}
	d := &diskFill{etag: f.ETag}
	m.diskFills[f.Key] = d
	m.wg.Add(1)
	go m.fillDisk(f, d)
}

// cachedWholeLocked says whether fetched, live extents cover [0, size) of fk.
func (m *Manager) cachedWholeLocked(fk fileKey, size int64) bool {
	fs := m.files[fk.key][fk.etag]
	if fs == nil {
		return false
	}
	for x := int64(0); x < size; {
		e, _, _ := fs.find(x, m.o.PartSize)
		if e == nil || e.list == listNone {
			return false
		}
		x = e.end
	}
	return true
}

// fillDisk copies f from the cache to the disk cache.
func (m *Manager) fillDisk(f File, d *diskFill) {
	defer m.wg.Done()
	err := m.o.DiskCache.Put(f.Key, f.ETag, f.Size, &cacheReader{m: m, fk: fileKey{f.Key, f.ETag}, size: f.Size})
	m.mu.Lock()
	delete(m.diskFills, f.Key)
	invalidated := d.invalidated
	m.mu.Unlock()
	if err != nil {
		m.st.diskErrors.Add(1)
		m.log.Debug("prefetch: disk cache fill failed", "key", f.Key, "size", f.Size, "err", err)
		return
	}
	if invalidated {
		// Invalidate's own Remove may have run before Put published.
		m.o.DiskCache.Remove(f.Key)
		return
	}
	m.st.diskPuts.Add(1)
}

// invalidateDiskLocked marks a copy of key in progress as stale; the
// caller calls DiskCache.Remove(key) after dropping m.mu.
func (m *Manager) invalidateDiskLocked(key string) {
	if d := m.diskFills[key]; d != nil {
		d.invalidated = true
	}
}

// cacheReader reads one object version's bytes from the cache, holding a
// reference on one extent at a time while copying from it. It fails with
// errEvicted when a needed extent is gone and with ErrClosed after
// Manager.Close.
type cacheReader struct {
	m    *Manager
	fk   fileKey
	size int64 // bytes
	off  int64 // next byte to read
}

var _ io.Reader = (*cacheReader)(nil)

func (c *cacheReader) Read(p []byte) (int, error) {
	if c.off >= c.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	m := c.m
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0, ErrClosed
	}
	var e *extent
	if fs := m.files[c.fk.key][c.fk.etag]; fs != nil {
		e, _, _ = fs.find(c.off, m.o.PartSize)
	}
	if e == nil || e.list == listNone {
		m.mu.Unlock()
		return 0, fmt.Errorf("%w: %q at %d", errEvicted, c.fk.key, c.off)
	}
	e.refs++
	b := e.buf[c.off-e.off : min(e.end, c.size)-e.off]
	m.mu.Unlock()
	n := copy(p, b)
	m.mu.Lock()
	m.unrefLocked(e)
	m.mu.Unlock()
	c.off += int64(n)
	return n, nil
}
