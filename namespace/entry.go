package namespace

import (
	"context"
	"errors"
	"slices"

	"github.com/os2g/os2g/objclient"
)

// Entry is what a directory knows about one child name, from a listing,
// a lookup probe or a local mutation. Kept small: a directory of 100,000
// files holds 100,000 of them.
type Entry struct {
	Dir bool
	// XDir: a zero-byte object "name" (no slash) stands for this
	// directory (x-directory marker, or shadowed by "name/"); rmdir
	// deletes it too.
	XDir bool
	// Checked: a zero-byte file whose Content-Type was HEADed (for its
	// ETag) and is not a directory marker.
	Checked bool
	Size    int64  // bytes (files)
	MTime   int64  // unix ns (files)
	Seen    int64  // unix ns when this was learned
	ETag    string // files
}

// FileEntry is the entry of object o (a file) learned at now (unix ns).
func FileEntry(o objclient.ObjectInfo, now int64) Entry {
	return Entry{Size: o.Size, MTime: o.LastModified.UnixNano(), Seen: now, ETag: o.ETag}
}

// Listed is one directory entry produced from a listing: Name (a valid
// POSIX name), its Entry, and Zero for a zero-byte object not yet checked
// for a directory marker (see CheckMarker).
type Listed struct {
	Name  string
	Entry Entry
	Zero  bool
}

// Lister turns the pages of a delimiter listing of the directory DirKey
// ("" or ending in "/") into entries, in key order across pages. A file
// "x" is held back until the listing has passed "x/", because a common
// prefix "x/" (a directory, which shadows the file) may follow after
// siblings such as "x.txt" or "x-1" that sort in between, possibly on a
// later page. Keys that are not POSIX names, and objects hidden by a
// directory of the same name that hold bytes, are reported to Warn (nil:
// not reported). The zero Lister with DirKey set is ready to use.
type Lister struct {
	DirKey string
	Warn   func(msg, key string)
	held   []objclient.ObjectInfo
}

func (l *Lister) warn(msg, key string) {
	if l.Warn != nil {
		l.Warn(msg, key)
	}
}

// Add consumes one key (an object, or a common prefix when prefix is
// true), in listing order, and appends the entries it finishes to out.
// now (unix ns) stamps them.
func (l *Lister) Add(out []Listed, o objclient.ObjectInfo, prefix bool, now int64) []Listed {
	k := o.Key
	// Release held files that can no longer be shadowed.
	kept := l.held[:0]
	for _, h := range l.held {
		if CmpSlash(h.Key, k) < 0 {
			out = append(out, l.fileOut(h, now))
		} else {
			kept = append(kept, h)
		}
	}
	l.held = kept
	if prefix {
		name := k[len(l.DirKey) : len(k)-1]
		if !ValidName(name) {
			l.warn("key with a component that is not a POSIX name skipped", k)
			return out
		}
		e := Entry{Dir: true, Seen: now}
		for i, h := range l.held {
			if CmpSlash(h.Key, k) == 0 {
				e.XDir = h.Size == 0
				if h.Size > 0 {
					l.warn("object hidden by a directory of the same name", h.Key)
				}
				l.held = slices.Delete(l.held, i, i+1)
				break
			}
		}
		return append(out, Listed{Name: name, Entry: e})
	}
	if k == l.DirKey {
		return out // the directory's own marker "dir/"
	}
	if !ValidName(k[len(l.DirKey):]) {
		l.warn("key with a component that is not a POSIX name skipped", k)
		return out
	}
	l.held = append(l.held, o)
	return out
}

// AddPage consumes one listing page, merging its objects and common
// prefixes in key order (see Add).
func (l *Lister) AddPage(out []Listed, page objclient.ListPage, now int64) []Listed {
	oi, pi := 0, 0
	for oi < len(page.Objects) || pi < len(page.CommonPrefixes) {
		if pi >= len(page.CommonPrefixes) || (oi < len(page.Objects) && page.Objects[oi].Key < page.CommonPrefixes[pi]) {
			out = l.Add(out, page.Objects[oi], false, now)
			oi++
		} else {
			out = l.Add(out, objclient.ObjectInfo{Key: page.CommonPrefixes[pi]}, true, now)
			pi++
		}
	}
	return out
}

// Flush releases every held file (the listing ended).
func (l *Lister) Flush(out []Listed, now int64) []Listed {
	for _, h := range l.held {
		out = append(out, l.fileOut(h, now))
	}
	l.held = l.held[:0]
	return out
}

func (l *Lister) fileOut(o objclient.ObjectInfo, now int64) Listed {
	return Listed{Name: o.Key[len(l.DirKey):], Entry: FileEntry(o, now), Zero: o.Size == 0}
}

// DecidedUpTo is the greatest key up to which a listing that has just
// taken page (of a truncated listing) has decided every name: the page's
// last key, or if files are still held back (a common prefix of the same
// name could follow) just below the first of them. "" if nothing is
// decided.
func (l *Lister) DecidedUpTo(page objclient.ListPage) string {
	last := ""
	if n := len(page.Objects); n > 0 {
		last = page.Objects[n-1].Key
	}
	if n := len(page.CommonPrefixes); n > 0 {
		last = max(last, page.CommonPrefixes[n-1])
	}
	for _, h := range l.held {
		// h.Key+"/" is undecided; every name whose key+"/" sorts before
		// it is decided. h.Key itself sorts before h.Key+"/".
		last = min(last, h.Key)
	}
	return last
}

// probeMaxKeys is the page size of a lookup probe: enough for the exact
// key, a few siblings that sort between "name" and "name/" (such as
// "name.txt"), and "name/".
const probeMaxKeys = 4

// Probe asks st what name in directory dirKey is, with no prior listing:
// one delimiter listing Prefix=dirKey+name finds the exact key (it sorts
// first) and the common prefix "name/"; only when siblings like
// "name.txt" fill the page before "name/" could appear does a second
// listing Prefix=dirKey+name+"/" decide. A zero-byte "name" without
// "name/" costs one HEAD (CheckMarker). found is false when nothing is
// there; errors are the store's. The entry is stamped with now() (unix
// ns), read once the listing has answered; warn (may be nil) is told of
// an object with bytes hidden by a directory of the same name.
func Probe(ctx context.Context, st objclient.Store, dirKey, name string, now func() int64, warn func(msg, key string)) (e Entry, found bool, err error) {
	p := ChildKey(dirKey, name)
	slash := p + "/"
	page, err := st.List(ctx, objclient.ListRequest{Prefix: p, Delimiter: "/", MaxKeys: probeMaxKeys})
	if err != nil {
		return Entry{}, false, err
	}
	var file *objclient.ObjectInfo
	dir := false
	last := ""
	for i := range page.Objects {
		o := &page.Objects[i]
		if o.Key == p {
			file = o
		}
		last = max(last, o.Key)
	}
	for _, cp := range page.CommonPrefixes {
		if cp == slash {
			dir = true
		}
		last = max(last, cp)
	}
	if !dir && page.IsTruncated && last < slash {
		page2, err := st.List(ctx, objclient.ListRequest{Prefix: slash, Delimiter: "/", MaxKeys: 1})
		if err != nil {
			return Entry{}, false, err
		}
		dir = len(page2.Objects)+len(page2.CommonPrefixes) > 0
	}
	t := now()
	switch {
	case dir:
		e := Entry{Dir: true, Seen: t}
		if file != nil {
			e.XDir = file.Size == 0
			if file.Size > 0 && warn != nil {
				warn("object hidden by a directory of the same name", p)
			}
		}
		return e, true, nil
	case file == nil:
		return Entry{}, false, nil
	}
	e = FileEntry(*file, t)
	if file.Size == 0 {
		return CheckMarker(ctx, st, p, e)
	}
	return e, true, nil
}

// CheckMarker HEADs the zero-byte object key (listed as e) to see whether
// it is a directory marker (Content-Type DirContentType): the entry
// returned is then a directory with XDir set, else e with Checked and the
// HEAD's ETag. found is false if the object vanished; other errors are
// the store's.
func CheckMarker(ctx context.Context, st objclient.Store, key string, e Entry) (Entry, bool, error) {
	info, err := st.Stat(ctx, key)
	if err != nil {
		if errors.Is(err, objclient.ErrNotFound) {
			return Entry{}, false, nil
		}
		return Entry{}, false, err
	}
	if IsDirContentType(info.ContentType) {
		return Entry{Dir: true, XDir: true, Seen: e.Seen, ETag: info.ETag}, true, nil
	}
	e.Checked = true
	e.ETag = info.ETag
	return e, true, nil
}
