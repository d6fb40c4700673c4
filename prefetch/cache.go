package prefetch

import (
	"slices"
)

// origin says who created an extent.
type origin uint8

const (
	originDemand origin = iota
	originAhead
	originEpoch
)

// lruList identifies which LRU list an extent is on.
type lruList uint8

const (
	listNone  lruList = iota // in flight, or removed
	listFresh                // fetched, not yet read by anyone
	listUsed                 // read at least once
)

// extent is a byte range [off, end) of one object version in one buffer.
// All fields but buf are guarded by Manager.mu; buf is written by the fetch
// goroutine before done is closed and only read after it.
type extent struct {
	fs       *fileState
	off, end int64
	buf      []byte
	done     chan struct{} // closed when the fetch finished (err says how)
	err      error
	canceled bool // the fetch's own context ended (not a store failure)
	dense    bool // part of a whole-file fetch: filed on the read list
	refs     int  // the fetch goroutine and every waiter/copier hold one
	live     bool // in fs's index (findable); else freed when refs reach 0
	freed    bool
	list     lruList
	prev     *extent // LRU links
	next     *extent
	origin   origin
	owner    *Reader // read-ahead owner (nil for demand and epoch)
	held     bool    // counted in Manager.epochHeld (pre-read, not yet read)
}

func (e *extent) size() int64 { return e.end - e.off }

// lru is an intrusive doubly linked list, most recent at head.
type lru struct {
	head, tail *extent
	bytes      int64
}

func (l *lru) pushFront(e *extent) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	} else {
		l.tail = e
	}
	l.head = e
	l.bytes += e.size()
}

func (l *lru) remove(e *extent) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.bytes -= e.size()
}

// fileKey names one object version.
type fileKey struct{ key, etag string }

// fileState is the cache index of one object version: per part, its extents
// sorted by offset and not overlapping. Guarded by Manager.mu.
type fileState struct {
	fk    fileKey
	parts map[int64][]*extent
	n     int // live extents
}

// find returns the live extent holding byte x, or nil and the hole
// [gapStart, gapEnd) around x within x's part.
func (fs *fileState) find(x, partSize int64) (e *extent, gapStart, gapEnd int64) {
	p := partOf(x, partSize)
	gapStart, gapEnd = p*partSize, (p+1)*partSize
	for _, c := range fs.parts[p] {
		switch {
		case c.end <= x:
			gapStart = c.end
		case c.off > x:
			return nil, gapStart, c.off
		default:
			return c, 0, 0
		}
	}
	return nil, gapStart, gapEnd
}

func (fs *fileState) insert(e *extent, partSize int64) {
	p := partOf(e.off, partSize)
	l := fs.parts[p]
	i, _ := slices.BinarySearchFunc(l, e.off, func(c *extent, off int64) int {
		switch {
		case c.off < off:
			return -1
		case c.off > off:
			return 1
		}
		return 0
	})
	fs.parts[p] = slices.Insert(l, i, e)
	fs.n++
	e.live = true
}

func (fs *fileState) delete(e *extent, partSize int64) {
	p := partOf(e.off, partSize)
	l := fs.parts[p]
	if i := slices.Index(l, e); i >= 0 {
		l = slices.Delete(l, i, i+1)
		if len(l) == 0 {
			delete(fs.parts, p)
		} else {
			fs.parts[p] = l
		}
		fs.n--
	}
	e.live = false
}

// each calls f for every live extent (f may not modify fs).
func (fs *fileState) each(f func(*extent)) {
	for _, l := range fs.parts {
		for _, e := range l {
			f(e)
		}
	}
}
