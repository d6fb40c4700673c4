// Package objtest holds test doubles for objclient.Store and the suite
// that every Store implementation must pass.
//
//   - Mem (NewMem): an in-memory Store holding keys verbatim.
//   - StartFakeS3 / StartFakeS3Server: gofakes3 in process behind
//     httptest on 127.0.0.1, bucket "test-bucket", keys verbatim; the
//     real objclient.S3 client talks to it over HTTP.
//   - StartVersity / StartVersityServer: a real S3 server, versitygw with
//     its posix backend (or the server named by OS2G_S3_ENDPOINT), with a
//     fresh bucket per call; skipped when absent unless OS2G_REQUIRE_ALL=1.
//   - Counting (NewCounting) and Faulty (NewFaulty): Store decorators that
//     count calls and bytes, and add latency and injected errors, for the
//     layers above objclient.
//   - FaultProxy (StartFaultProxy): an HTTP proxy in front of an S3 server
//     that answers 503 SlowDown / 500, stalls a body or cuts a connection,
//     for testing the real client's retries and stall handling.
//   - RunConformance / Conformance.Run: the same behavioural suite for Mem,
//     gofakes3 and real servers (missing keys, ranges at and past EOF,
//     multipart, If-Match, paging past 1,000 keys, delimiters, special
//     characters in keys, cancellation).
//
// Everything here is for tests: constructors take a testing.TB, register
// their shutdown with t.Cleanup, and fail the test on setup errors.
package objtest

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/os2g/os2g/objclient"
)

// Mem is an in-memory objclient.Store. Keys are held verbatim (a key "a"
// may sit beside "a/b"). The zero value is not usable; call NewMem.
type Mem struct {
	mu      sync.Mutex // guards objects
	objects map[string]*memObject
	// PartSize is the multipart part size its Writers report (bytes); it
	// only changes the ETag form ("-N" suffix), like S3.
	PartSize int64
}

type memObject struct {
	data        []byte
	etag        string
	modTime     time.Time
	contentType string
	meta        map[string]string
}

var _ objclient.Store = (*Mem)(nil)

// NewMem returns an empty in-memory store.
func NewMem() *Mem {
	return &Mem{objects: map[string]*memObject{}, PartSize: 8 << 20}
}

func etagOf(b []byte) string {
	s := md5.Sum(b)
	return `"` + hex.EncodeToString(s[:]) + `"`
}

// PutObject stores data under key at once (a test helper).
func (m *Mem) PutObject(key string, data []byte, contentType string, meta map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[key] = &memObject{data: bytes.Clone(data), etag: etagOf(data), modTime: time.Now().UTC().Truncate(time.Second), contentType: contentType, meta: maps.Clone(meta)}
}

// Keys returns all keys in order (a test helper).
func (m *Mem) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.objects))
	for k := range m.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Data returns a copy of key's bytes and whether it exists (a test helper).
func (m *Mem) Data(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return nil, false
	}
	return bytes.Clone(o.data), true
}

func (m *Mem) info(key string, o *memObject, full bool) objclient.ObjectInfo {
	oi := objclient.ObjectInfo{Key: key, Size: int64(len(o.data)), ETag: o.etag, LastModified: o.modTime}
	if full {
		oi.ContentType = o.contentType
		oi.Metadata = maps.Clone(o.meta) // callers may not alter the store
	}
	return oi
}

// Stat implements objclient.Store.
func (m *Mem) Stat(ctx context.Context, key string) (objclient.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objclient.ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return objclient.ObjectInfo{}, fmt.Errorf("stat %q: %w", key, objclient.ErrNotFound)
	}
	return m.info(key, o, true), nil
}

// List implements objclient.Store. The continuation token is the last key
// returned (or common prefix), as an opaque string.
func (m *Mem) List(ctx context.Context, req objclient.ListRequest) (objclient.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return objclient.ListPage{}, err
	}
	max := int(req.MaxKeys)
	if max <= 0 || max > 1000 {
		max = 1000
	}
	after := req.StartAfter
	if req.ContinuationToken != "" {
		after = req.ContinuationToken
	}
	m.mu.Lock()
	keys := make([]string, 0, len(m.objects))
	for k := range m.objects {
		if strings.HasPrefix(k, req.Prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var page objclient.ListPage
	count := 0
	lastPrefix := ""
	for _, k := range keys {
		if k <= after {
			continue
		}
		if req.Delimiter != "" {
			rest := k[len(req.Prefix):]
			if i := strings.Index(rest, req.Delimiter); i >= 0 {
				cp := req.Prefix + rest[:i+len(req.Delimiter)]
				if cp == lastPrefix || cp <= after {
					continue
				}
				if count == max {
					page.IsTruncated = true
					break
				}
				lastPrefix = cp
				page.CommonPrefixes = append(page.CommonPrefixes, cp)
				page.NextContinuationToken = cp + "\xff"
				count++
				continue
			}
		}
		if count == max {
			page.IsTruncated = true
			break
		}
		page.Objects = append(page.Objects, m.info(k, m.objects[k], false))
		page.NextContinuationToken = k
		count++
	}
	m.mu.Unlock()
	if !page.IsTruncated {
		page.NextContinuationToken = ""
	}
	return page, nil
}

// GetRange implements objclient.Store.
func (m *Mem) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("get %q at %d: %w", key, off, objclient.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return 0, fmt.Errorf("get %q: %w", key, objclient.ErrNotFound)
	}
	if ifMatch != "" && ifMatch != o.etag {
		return 0, fmt.Errorf("get %q: %w", key, objclient.ErrChanged)
	}
	if off >= int64(len(o.data)) {
		return 0, nil
	}
	return copy(buf, o.data[off:]), nil
}

// Put implements objclient.Store.
func (m *Mem) Put(ctx context.Context, key string, opts objclient.PutOptions) (objclient.Writer, error) {
	if key == "" {
		return nil, fmt.Errorf("put: empty key: %w", objclient.ErrInvalidArgument)
	}
	return &memWriter{m: m, key: key, opts: opts}, nil
}

type memWriter struct {
	m    *Mem
	key  string
	opts objclient.PutOptions
	buf  bytes.Buffer
	done bool
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("write after commit/abort: %w", objclient.ErrInvalidArgument)
	}
	return w.buf.Write(p)
}

func (w *memWriter) Written() int64 { return int64(w.buf.Len()) }

func (w *memWriter) Commit(ctx context.Context) (objclient.ObjectInfo, error) {
	if w.done {
		return objclient.ObjectInfo{}, fmt.Errorf("commit twice: %w", objclient.ErrInvalidArgument)
	}
	w.done = true
	if err := ctx.Err(); err != nil {
		return objclient.ObjectInfo{}, err
	}
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	if w.opts.IfNoneMatch == "*" {
		if _, ok := w.m.objects[w.key]; ok {
			return objclient.ObjectInfo{}, fmt.Errorf("put %q: %w", w.key, objclient.ErrChanged)
		}
	}
	data := bytes.Clone(w.buf.Bytes())
	etag := etagOf(data)
	ps := w.m.PartSize
	if w.opts.PartSize > 0 {
		ps = w.opts.PartSize
	}
	if ps > 0 && int64(len(data)) > ps {
		n := (int64(len(data)) + ps - 1) / ps
		etag = fmt.Sprintf(`%s-%d"`, etag[:len(etag)-1], n)
	}
	o := &memObject{data: data, etag: etag, modTime: time.Now().UTC().Truncate(time.Second), contentType: w.opts.ContentType, meta: maps.Clone(w.opts.Metadata)}
	w.m.objects[w.key] = o
	return w.m.info(w.key, o, true), nil
}

func (w *memWriter) Abort(ctx context.Context) error {
	w.done = true
	w.buf = bytes.Buffer{}
	return nil
}

// Delete implements objclient.Store.
func (m *Mem) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, key)
	return nil
}

// Copy implements objclient.Store.
func (m *Mem) Copy(ctx context.Context, src, dst, ifMatch string) (objclient.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objclient.ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[src]
	if !ok {
		return objclient.ObjectInfo{}, fmt.Errorf("copy %q: %w", src, objclient.ErrNotFound)
	}
	if ifMatch != "" && ifMatch != o.etag {
		return objclient.ObjectInfo{}, fmt.Errorf("copy %q: %w", src, objclient.ErrChanged)
	}
	c := *o
	c.modTime = time.Now().UTC().Truncate(time.Second)
	m.objects[dst] = &c
	return m.info(dst, &c, true), nil
}
