package fusefs

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/os2g/os2g/objclient"
)

// synthObj is an object whose bytes are computed, not stored.
type synthObj struct {
	size  int64
	etag  string
	mtime time.Time
	fill  func(p []byte, off int64) // writes bytes [off, off+len(p))
}

// synthStore is a read-only objclient.Store over computed objects: a few
// named ones, plus optional families of numbered keys
// prefix+fmt.Sprintf(format, i) for i < count, so tests can have 6 GiB
// objects and 100,000-key directories without holding them.
type synthStore struct {
	objs     map[string]synthObj
	families []synthFamily
}

type synthFamily struct {
	prefix, format string // key = prefix + fmt.Sprintf(format, i)
	count          int
	obj            func(i int) synthObj
}

var _ objclient.Store = (*synthStore)(nil)

func (s *synthStore) lookup(key string) (synthObj, bool) {
	if o, ok := s.objs[key]; ok {
		return o, true
	}
	for _, f := range s.families {
		if rest, ok := strings.CutPrefix(key, f.prefix); ok {
			var i int
			if _, err := fmt.Sscanf(rest, f.format, &i); err == nil && i >= 0 && i < f.count && fmt.Sprintf(f.format, i) == rest {
				return f.obj(i), true
			}
		}
	}
	return synthObj{}, false
}

func (s *synthStore) Stat(ctx context.Context, key string) (objclient.ObjectInfo, error) {
	o, ok := s.lookup(key)
	if !ok {
		return objclient.ObjectInfo{}, fmt.Errorf("stat %q: %w", key, objclient.ErrNotFound)
	}
	return objclient.ObjectInfo{Key: key, Size: o.size, ETag: o.etag, LastModified: o.mtime}, nil
}

// List supports flat or "/"-delimited listings; the continuation token is
// the last key returned.
func (s *synthStore) List(ctx context.Context, req objclient.ListRequest) (objclient.ListPage, error) {
	max := int(req.MaxKeys)
	if max <= 0 || max > 1000 {
		max = 1000
	}
	after := req.StartAfter
	if req.ContinuationToken != "" {
		after = req.ContinuationToken
	}
	var keys []string
	for k := range s.objs {
		if strings.HasPrefix(k, req.Prefix) {
			keys = append(keys, k)
		}
	}
	for _, f := range s.families {
		if !strings.HasPrefix(f.prefix, req.Prefix) && !strings.HasPrefix(req.Prefix, f.prefix) {
			continue
		}
		// Binary search the first index after `after` (keys ascend with i).
		lo := sort.Search(f.count, func(i int) bool { return f.prefix+fmt.Sprintf(f.format, i) > after })
		for i := lo; i < f.count && len(keys) < 4*max+len(s.objs); i++ {
			if k := f.prefix + fmt.Sprintf(f.format, i); strings.HasPrefix(k, req.Prefix) {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	var page objclient.ListPage
	lastCP := ""
	for _, k := range keys {
		if k <= after {
			continue
		}
		if req.Delimiter != "" {
			if i := strings.Index(k[len(req.Prefix):], req.Delimiter); i >= 0 {
				cp := k[:len(req.Prefix)+i+1]
				if cp == lastCP || cp <= after {
					continue
				}
				if len(page.Objects)+len(page.CommonPrefixes) == max {
					page.IsTruncated = true
					break
				}
				lastCP = cp
				page.CommonPrefixes = append(page.CommonPrefixes, cp)
				page.NextContinuationToken = cp + "\xff"
				continue
			}
		}
		if len(page.Objects)+len(page.CommonPrefixes) == max {
			page.IsTruncated = true
			break
		}
		o, _ := s.lookup(k)
		page.Objects = append(page.Objects, objclient.ObjectInfo{Key: k, Size: o.size, ETag: o.etag, LastModified: o.mtime})
		page.NextContinuationToken = k
	}
	if !page.IsTruncated {
		page.NextContinuationToken = ""
	}
	return page, nil
}

func (s *synthStore) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	o, ok := s.lookup(key)
	if !ok {
		return 0, fmt.Errorf("get %q: %w", key, objclient.ErrNotFound)
	}
	if ifMatch != "" && ifMatch != o.etag {
		return 0, fmt.Errorf("get %q: %w", key, objclient.ErrChanged)
	}
	if off >= o.size {
		return 0, nil
	}
	n := min(int64(len(buf)), o.size-off)
	o.fill(buf[:n], off)
	return int(n), nil
}

func (s *synthStore) Put(ctx context.Context, key string, opts objclient.PutOptions) (objclient.Writer, error) {
	return nil, fmt.Errorf("synthetic store: %w", objclient.ErrAccessDenied)
}

func (s *synthStore) Delete(ctx context.Context, key string) error {
	return fmt.Errorf("synthetic store: %w", objclient.ErrAccessDenied)
}

func (s *synthStore) Copy(ctx context.Context, src, dst, ifMatch string) (objclient.ObjectInfo, error) {
	return objclient.ObjectInfo{}, fmt.Errorf("synthetic store: %w", objclient.ErrAccessDenied)
}

// wordFill writes the C09 pattern: the little-endian u64 at byte offset
// 8k has value k.
func wordFill(p []byte, off int64) {
	var w [8]byte
	for i := 0; i < len(p); {
		pos := off + int64(i)
		k := pos / 8
		binary.LittleEndian.PutUint64(w[:], uint64(k))
		i += copy(p[i:], w[pos%8:])
	}
}

// byteFill writes a cheap position-dependent pattern.
func byteFill(seed byte) func(p []byte, off int64) {
	return func(p []byte, off int64) {
		for i := range p {
			x := uint64(off) + uint64(i)
			p[i] = byte(x*2654435761>>13) ^ byte(x>>20) ^ seed
		}
	}
}

func etagN(name string, parts int) string {
	return `"` + fmt.Sprintf("%032x", len(name)) + "-" + strconv.Itoa(parts) + `"`
}
