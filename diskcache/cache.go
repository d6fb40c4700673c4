package diskcache

import (
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
)

// Sentinel errors; every error returned here wraps at most one of them.
var (
	// ErrInvalidArgument: bad Options, an empty key or ETag, a negative size.
	ErrInvalidArgument = errors.New("diskcache: invalid argument")
	// ErrTooLarge: the entry is larger than Options.MaxBytes.
	ErrTooLarge = errors.New("diskcache: entry larger than the cache")
	// ErrFull: Puts in progress hold so much of MaxBytes that evicting every
	// entry would not make room; try again later or skip caching.
	ErrFull = errors.New("diskcache: no room while other entries are being written")
	// ErrSizeMismatch: the reader gave fewer or more bytes than the size passed to Put.
	ErrSizeMismatch = errors.New("diskcache: content size differs from the declared size")
	// ErrLocked: another Cache (in this or another process) uses the directory.
	ErrLocked = errors.New("diskcache: cache directory in use")
	// ErrClosed: the Cache was closed.
	ErrClosed = errors.New("diskcache: closed")
)

// Options configures a Cache.
type Options struct {
	// Dir is the cache directory (required); created with mode 0700 if absent.
	Dir string
	// MaxBytes bounds the content bytes of all entries, those being written
	// included (required, > 0).
	MaxBytes int64
	// VerifyOnStart makes New check the CRC32C of every entry of a previous
	// run, reading all cached bytes; otherwise each is checked on its first
	// Open (see the package doc).
	VerifyOnStart bool
	// Logger receives warnings about dropped entries (default slog.Default()).
	Logger *slog.Logger
}

// Stats is a snapshot of a Cache's counters.
type Stats struct {
	Hits      int64 // Opens that returned a descriptor
	Misses    int64 // Opens that did not (absent, or dropped by a check)
	Entries   int   // entries held
	Bytes     int64 // content bytes of the entries held
	Reserved  int64 // bytes reserved by Puts in progress
	Evictions int64 // entries evicted to stay within MaxBytes
	Corrupt   int64 // entries (or halves of one) dropped because a check failed
}

// entry is one cached object version.
type entry struct {
	id        string
	key, etag string
	size      int64  // bytes
	crc       uint32 // CRC32C of the content
	verified  bool   // CRC32C known to match the file (written or checked by this process)
	elem      *list.Element
}

// Cache is a disk cache of whole objects; see the package doc. Create it
// with New; it is safe for concurrent use.
type Cache struct {
	dir  string
	tmp  string
	max  int64
	log  *slog.Logger
	lock *os.File // holds the flock on dir/lock

	mu        sync.Mutex                   // guards everything below, and renames/unlinks of entry files
	entries   map[string]*entry            // by id
	byKey     map[string]map[string]*entry // key -> ETag -> entry
	lru       *list.List                   // of *entry; front = most recently used
	bytes     int64                        // sum of entries' sizes
	reserved  int64                        // sizes of Puts in progress
	hits      int64
	misses    int64
	evictions int64
	corrupt   int64
	closed    bool
}

// New opens (creating if needed) the cache in o.Dir, takes its lock,
// empties its tmp directory and indexes the entries of a previous run,
// dropping partial and corrupt ones (see the package doc). Errors wrap
// ErrInvalidArgument or ErrLocked, or are I/O errors.
func New(o Options) (*Cache, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("diskcache: empty Dir: %w", ErrInvalidArgument)
	}
	if o.MaxBytes <= 0 {
		return nil, fmt.Errorf("diskcache: MaxBytes %d is not positive: %w", o.MaxBytes, ErrInvalidArgument)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("diskcache: creating %s: %w", o.Dir, err)
	}
	lf, err := os.OpenFile(filepath.Join(o.Dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("diskcache: %s: %w", o.Dir, ErrLocked)
		}
		return nil, fmt.Errorf("diskcache: locking %s: %w", o.Dir, err)
	}
	c := &Cache{
		dir: o.Dir, tmp: filepath.Join(o.Dir, tmpDirName), max: o.MaxBytes, log: o.Logger, lock: lf,
		entries: map[string]*entry{}, byKey: map[string]map[string]*entry{}, lru: list.New(),
	}
	if err := os.RemoveAll(c.tmp); err != nil {
		lf.Close()
		return nil, fmt.Errorf("diskcache: clearing %s: %w", c.tmp, err)
	}
	if err := os.Mkdir(c.tmp, 0o700); err != nil {
		lf.Close()
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	if err := c.load(o.VerifyOnStart); err != nil {
		lf.Close()
		return nil, err
	}
	return c, nil
}

// Close releases the directory lock. Later Puts fail with ErrClosed and
// Opens miss; descriptors already returned stay valid. Idempotent.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.lock.Close() // closing the descriptor drops the flock
}

// Open returns a read-only descriptor on the content of (key, etag), its
// size in bytes and true, or false if the entry is absent or fails a check.
// The object's byte 0 is at offset 0 of the file, so the descriptor can back
// a FUSE passthrough file or be read with ReadAt. The caller closes it. It
// counts as a use for LRU.
func (c *Cache) Open(key, etag string) (*os.File, int64, bool) {
	id := entryID(key, etag)
	c.mu.Lock()
	e := c.entries[id]
	if e == nil || c.closed {
		c.misses++
		c.mu.Unlock()
		return nil, 0, false
	}
	c.lru.MoveToFront(e.elem)
	verified := e.verified
	c.mu.Unlock()

	f, err := os.Open(contentPath(c.dir, id))
	if err != nil {
		c.dropIfCurrent(e, "content file unreadable", err)
		return nil, 0, false
	}
	bad := ""
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != e.size {
		bad = "content file size changed"
	} else if !verified {
		h := crc32.New(castagnoli)
		n, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, e.size+1), make([]byte, 256<<10))
		if err != nil || n != e.size || h.Sum32() != e.crc {
			bad = "CRC32C mismatch"
		}
	}
	if bad != "" {
		f.Close()
		c.dropIfCurrent(e, bad, nil)
		return nil, 0, false
	}
	c.mu.Lock()
	e.verified = true
	c.hits++
	c.mu.Unlock()
	return f, e.size, true
}

// dropIfCurrent retires e after a failed check, unless it was replaced or
// retired meanwhile, and counts a miss.
func (c *Cache) dropIfCurrent(e *entry, why string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.misses++
	if c.entries[e.id] == e {
		c.corrupt++
		c.log.Warn("diskcache: dropping entry", "key", e.key, "etag", e.etag, "reason", why, "err", err)
		c.retire(e)
	}
}

// Verify re-reads the content of (key, etag) and reports whether its size
// and CRC32C match the sidecar. A mismatching entry is dropped; an absent
// one is reported false.
func (c *Cache) Verify(key, etag string) bool {
	id := entryID(key, etag)
	c.mu.Lock()
	e := c.entries[id]
	c.mu.Unlock()
	if e == nil {
		return false
	}
	n, sum, err := checksumFile(contentPath(c.dir, id))
	if err != nil || n != e.size || sum != e.crc {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.entries[id] == e {
			c.corrupt++
			c.log.Warn("diskcache: dropping entry", "key", key, "etag", etag, "reason", "CRC32C mismatch on Verify", "err", err)
			c.retire(e)
		}
		return false
	}
	c.mu.Lock()
	e.verified = true
	c.mu.Unlock()
	return true
}

// Remove drops every entry of key, whatever its ETag (the object was
// overwritten or deleted).
func (c *Cache) Remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.byKey[key] {
		c.retire(e)
	}
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Hits: c.hits, Misses: c.misses, Entries: len(c.entries), Bytes: c.bytes,
		Reserved: c.reserved, Evictions: c.evictions, Corrupt: c.corrupt,
	}
}

// Put stores the content of (key, etag): exactly size bytes read from r.
// It replaces an entry of the same (key, etag) and drops those of other
// ETags of key. Nothing is visible until Put returns nil; on any error no
// entry and no file is left. Errors wrap ErrInvalidArgument, ErrTooLarge,
// ErrFull, ErrSizeMismatch, ErrClosed, or are errors of r or of the disk.
func (c *Cache) Put(key, etag string, size int64, r io.Reader) error {
	if key == "" || etag == "" || size < 0 {
		return fmt.Errorf("diskcache: put %q (ETag %q, %d bytes): %w", key, etag, size, ErrInvalidArgument)
	}
	if size > c.max {
		return fmt.Errorf("diskcache: put %q: %d bytes over MaxBytes %d: %w", key, size, c.max, ErrTooLarge)
	}
	if err := c.reserve(size); err != nil {
		return fmt.Errorf("diskcache: put %q: %w", key, err)
	}
	published := false
	defer func() {
		if !published {
			c.mu.Lock()
			c.reserved -= size
			c.mu.Unlock()
		}
	}()
	id := entryID(key, etag)
	content, sum, err := c.writeContent(r, size)
	if err != nil {
		return fmt.Errorf("diskcache: put %q: %w", key, err)
	}
	defer os.Remove(content) // no-op once renamed
	m := meta{key: key, etag: etag, size: size, crc: sum}
	side, err := c.writeTemp(m.encode())
	if err != nil {
		return fmt.Errorf("diskcache: put %q: %w", key, err)
	}
	defer os.Remove(side)
	if err := os.MkdirAll(filepath.Dir(contentPath(c.dir, id)), 0o700); err != nil {
		return fmt.Errorf("diskcache: put %q: %w", key, err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("diskcache: put %q: %w", key, ErrClosed)
	}
	if err := os.Rename(content, contentPath(c.dir, id)); err != nil {
		return fmt.Errorf("diskcache: put %q: %w", key, err)
	}
	if err := os.Rename(side, sidecarPath(c.dir, id)); err != nil {
		os.Remove(contentPath(c.dir, id))
		if old := c.entries[id]; old != nil {
			c.retire(old) // its content file was just replaced and removed
		}
		return fmt.Errorf("diskcache: put %q: %w", key, err)
	}
	if old := c.entries[id]; old != nil {
		c.unlink(old) // its files were replaced by the renames
	}
	for _, other := range c.byKey[key] {
		c.retire(other)
	}
	e := &entry{id: id, key: key, etag: etag, size: size, crc: sum, verified: true}
	c.link(e, true)
	c.reserved -= size
	published = true
	return nil
}

// writeContent copies exactly size bytes of r to a new temporary file and
// returns its path and CRC32C. The file is removed on error.
func (c *Cache) writeContent(r io.Reader, size int64) (path string, sum uint32, err error) {
	f, err := os.CreateTemp(c.tmp, "c-")
	if err != nil {
		return "", 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := crc32.New(castagnoli)
	n, err := io.CopyBuffer(io.MultiWriter(f, h), io.LimitReader(r, size), make([]byte, 256<<10))
	if err != nil {
		return "", 0, err
	}
	if n != size {
		return "", 0, fmt.Errorf("reader gave %d of %d bytes: %w", n, size, ErrSizeMismatch)
	}
	var one [1]byte
	if m, rerr := io.ReadFull(r, one[:]); m > 0 {
		return "", 0, fmt.Errorf("reader gave more than %d bytes: %w", size, ErrSizeMismatch)
	} else if rerr != io.EOF {
		return "", 0, fmt.Errorf("reading past %d bytes: %w", size, rerr)
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	return f.Name(), h.Sum32(), nil
}

// writeTemp writes b to a new temporary file and returns its path.
func (c *Cache) writeTemp(b []byte) (string, error) {
	f, err := os.CreateTemp(c.tmp, "m-")
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// reserve sets size bytes aside for a Put, evicting least recently used
// entries as needed.
func (c *Cache) reserve(size int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for c.bytes+c.reserved+size > c.max {
		back := c.lru.Back()
		if back == nil {
			return fmt.Errorf("%d bytes reserved by Puts in progress, %d asked, MaxBytes %d: %w", c.reserved, size, c.max, ErrFull)
		}
		c.evictions++
		c.retire(back.Value.(*entry))
	}
	c.reserved += size
	return nil
}

// link adds e to the index, at the front of the LRU list or at its back.
// c.mu must be held.
func (c *Cache) link(e *entry, front bool) {
	c.entries[e.id] = e
	if c.byKey[e.key] == nil {
		c.byKey[e.key] = map[string]*entry{}
	}
	c.byKey[e.key][e.etag] = e
	if front {
		e.elem = c.lru.PushFront(e)
	} else {
		e.elem = c.lru.PushBack(e)
	}
	c.bytes += e.size
}

// unlink removes e from the index, leaving its files. c.mu must be held.
func (c *Cache) unlink(e *entry) {
	delete(c.entries, e.id)
	if m := c.byKey[e.key]; m != nil {
		delete(m, e.etag)
		if len(m) == 0 {
			delete(c.byKey, e.key)
		}
	}
	c.lru.Remove(e.elem)
	c.bytes -= e.size
}

// retire removes e from the index and deletes its files, the sidecar
// first (a crash in between leaves a content file without sidecar, which
// New drops). c.mu must be held.
func (c *Cache) retire(e *entry) {
	c.unlink(e)
	for _, p := range []string{sidecarPath(c.dir, e.id), contentPath(c.dir, e.id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("diskcache: removing entry file", "path", p, "err", err)
		}
	}
}

// load indexes the entries under c.dir (see the package doc, "Starting
// and checking"). It runs before c is shared.
func (c *Cache) load(verify bool) error {
	tops, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("diskcache: %w", err)
	}
	type found struct {
		content, sidecar bool
		sidecarInfo      fs.FileInfo
	}
	type cand struct {
		e     *entry
		mtime int64
	}
	var cands []cand
	for _, top := range tops {
		name := top.Name()
		if !top.IsDir() || len(name) != 2 || !isHex(name) {
			continue
		}
		sub := filepath.Join(c.dir, name)
		ents, err := os.ReadDir(sub)
		if err != nil {
			return fmt.Errorf("diskcache: %w", err)
		}
		ids := map[string]*found{}
		get := func(id string) *found {
			if ids[id] == nil {
				ids[id] = &found{}
			}
			return ids[id]
		}
		for _, de := range ents {
			n := de.Name()
			switch {
			case isEntryID(n) && n[:2] == name && de.Type().IsRegular():
				get(n).content = true
			case len(n) > len(sidecarSuffix) && n[len(n)-len(sidecarSuffix):] == sidecarSuffix &&
				isEntryID(n[:len(n)-len(sidecarSuffix)]) && n[:2] == name && de.Type().IsRegular():
				fi, err := de.Info()
				if err != nil {
					continue
				}
				f := get(n[:len(n)-len(sidecarSuffix)])
				f.sidecar, f.sidecarInfo = true, fi
			}
		}
		for id, f := range ids {
			e, why := c.check(id, f.content, f.sidecar, verify)
			if e == nil {
				c.corrupt++
				c.log.Warn("diskcache: dropping entry of a previous run", "id", id, "reason", why)
				os.Remove(sidecarPath(c.dir, id))
				os.Remove(contentPath(c.dir, id))
				continue
			}
			cands = append(cands, cand{e, f.sidecarInfo.ModTime().UnixNano()})
		}
	}
	// Most recently written first; ties by id for a stable order.
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].mtime != cands[j].mtime {
			return cands[i].mtime > cands[j].mtime
		}
		return cands[i].e.id < cands[j].e.id
	})
	for _, cd := range cands {
		c.link(cd.e, false)
	}
	for c.bytes > c.max {
		c.evictions++
		c.retire(c.lru.Back().Value.(*entry))
	}
	if len(cands) > 0 {
		c.log.Info("diskcache: indexed entries of a previous run", "dir", c.dir, "entries", len(c.entries), "bytes", c.bytes, "dropped", c.corrupt, "verified", verify)
	}
	return nil
}

// check validates one entry found by load; it returns the entry, or nil
// and the reason to drop it.
func (c *Cache) check(id string, content, sidecar, verify bool) (*entry, string) {
	if !content || !sidecar {
		return nil, "partial entry (content or sidecar missing)"
	}
	m, err := readSidecar(sidecarPath(c.dir, id))
	if err != nil {
		return nil, "unreadable sidecar: " + err.Error()
	}
	if entryID(m.key, m.etag) != id {
		return nil, "sidecar does not match its file name"
	}
	fi, err := os.Lstat(contentPath(c.dir, id))
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != m.size {
		return nil, "content size differs from the sidecar"
	}
	e := &entry{id: id, key: m.key, etag: m.etag, size: m.size, crc: m.crc}
	if verify {
		n, sum, err := checksumFile(contentPath(c.dir, id))
		if err != nil || n != m.size || sum != m.crc {
			return nil, "CRC32C mismatch"
		}
		e.verified = true
	}
	return e, ""
}
