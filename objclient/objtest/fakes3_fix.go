package objtest

import (
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// gofakes3 v1.2.0 departs from S3 in ways that would make tests of the
// layers above lie, so StartFakeS3Server puts two small fixes around it:
//
//   - fixedBackend.ListBucket: S3 listing semantics (gofakes3 repeats a
//     common prefix on the next page when a page ends inside it, and lists
//     a "dir/" marker as an object of its parent instead of rolling it up).
//   - fakeFront (HTTP): If-Match on GET/HEAD (gofakes3 ignores it),
//     If-None-Match/If-Match on CompleteMultipartUpload, and multipart
//     ETags ("md5-N") that stay what CompleteMultipartUpload returned on
//     HEAD, GET and LIST (gofakes3 reports the MD5 of the content there),
//     and an empty ListMultipartUploads where gofakes3 answers 404
//     NoSuchUpload for a bucket that never had an upload.

// fixedBackend is s3mem with an S3-exact ListBucket and multipart ETags.
type fixedBackend struct {
	*s3mem.Backend

	mu      sync.Mutex                 // guards mpETags
	mpETags map[bucketKey]multipartTag // objects made by CompleteMultipartUpload
}

type bucketKey struct{ bucket, key string }

// multipartTag is the multipart ETag of an object whose content MD5 ETag is md5.
type multipartTag struct{ md5, etag string }

func newFixedBackend() *fixedBackend {
	return &fixedBackend{Backend: s3mem.New(), mpETags: map[bucketKey]multipartTag{}}
}

// etagFor maps the MD5 ETag gofakes3 reports for bucket/key to the
// multipart ETag when the object is the one CompleteMultipartUpload made.
func (b *fixedBackend) etagFor(bucket, key, md5 string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.mpETags[bucketKey{bucket, key}]; ok && t.md5 == md5 {
		return t.etag
	}
	return md5
}

func (b *fixedBackend) forget(bucket, key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.mpETags, bucketKey{bucket, key})
}

// currentETag returns the object's ETag as S3 would report it.
func (b *fixedBackend) currentETag(bucket, key string) (string, bool) {
	obj, err := b.Backend.HeadObject(bucket, key)
	if err != nil || obj == nil {
		return "", false
	}
	obj.Contents.Close()
	return b.etagFor(bucket, key, `"`+hex.EncodeToString(obj.Hash)+`"`), true
}

// ListBucket implements gofakes3.Backend with S3's rules: keys in byte
// order after the marker; with a delimiter, every key whose rest after the
// prefix contains it rolls up into one common prefix, counted once toward
// MaxKeys, and a page ending on a prefix resumes after all its keys.
func (b *fixedBackend) ListBucket(name string, prefix *gofakes3.Prefix, page gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	all, err := b.Backend.ListBucket(name, nil, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, err
	}
	var pfx, delim string
	if prefix != nil {
		if prefix.HasPrefix {
			pfx = prefix.Prefix
		}
		if prefix.HasDelimiter {
			delim = prefix.Delimiter
		}
	}
	max := int(page.MaxKeys)
	if max <= 0 {
		max = gofakes3.DefaultMaxBucketKeys
	}
	out := gofakes3.NewObjectList()
	count := 0
	lastPrefix := ""
	for _, c := range all.Contents {
		k := c.Key
		if !strings.HasPrefix(k, pfx) || (page.HasMarker && k <= page.Marker) {
			continue
		}
		entry, isPrefix := k, false
		if delim != "" {
			if i := strings.Index(k[len(pfx):], delim); i >= 0 {
				entry, isPrefix = k[:len(pfx)+i+len(delim)], true
			}
		}
		if isPrefix && (entry == lastPrefix || (page.HasMarker && entry <= page.Marker)) {
			continue
		}
		if count == max {
			out.IsTruncated = true
			break
		}
		if isPrefix {
			out.AddPrefix(entry)
			lastPrefix = entry
		} else {
			cc := *c
			cc.ETag = b.etagFor(name, k, c.ETag)
			out.Add(&cc)
		}
		out.NextMarker = entry
		count++
	}
	if !out.IsTruncated {
		out.NextMarker = ""
	}
	return out, nil
}

// fakeFront is the HTTP middleware in front of gofakes3 (path-style only).
type fakeFront struct {
	b    *fixedBackend
	next http.Handler
}

func splitPath(p string) (bucket, key string) {
	bucket, key, _ = strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return bucket, key
}

func etagMatches(cond, etag string) bool {
	for _, c := range strings.Split(cond, ",") {
		c = strings.TrimSpace(c)
		if c == "*" || strings.Trim(c, `"`) == strings.Trim(etag, `"`) {
			return true
		}
	}
	return false
}

func preconditionFailed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusPreconditionFailed)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
			`<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message><Condition>If-Match</Condition></Error>`))
	}
}

func (f *fakeFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, key := splitPath(r.URL.Path)
	q := r.URL.Query()
	if key == "" && r.Method == http.MethodGet && q.Has("uploads") {
		f.listUploads(w, r, bucket)
		return
	}
	if key == "" || q.Has("versionId") {
		f.next.ServeHTTP(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		cur, exists := f.b.currentETag(bucket, key)
		if im := r.Header.Get("If-Match"); im != "" && exists && !etagMatches(im, cur) {
			preconditionFailed(w, r)
			return
		}
		ew := &etagWriter{ResponseWriter: w, fix: func(e string) string { return f.b.etagFor(bucket, key, e) }}
		f.next.ServeHTTP(ew, r)
		if !ew.wrote { // gofakes3 leaves a HEAD's 200 implicit
			ew.WriteHeader(http.StatusOK)
		}
	case http.MethodPost:
		if !q.Has("uploadId") {
			f.next.ServeHTTP(w, r)
			return
		}
		cur, exists := f.b.currentETag(bucket, key)
		if inm := r.Header.Get("If-None-Match"); inm != "" && exists && etagMatches(inm, cur) {
			preconditionFailed(w, r)
			return
		}
		if im := r.Header.Get("If-Match"); im != "" && (!exists || !etagMatches(im, cur)) {
			preconditionFailed(w, r)
			return
		}
		rec := httptest.NewRecorder()
		f.next.ServeHTTP(rec, r)
		if rec.Code == http.StatusOK {
			var res struct {
				ETag string `xml:"ETag"`
			}
			if xml.Unmarshal(rec.Body.Bytes(), &res) == nil && res.ETag != "" {
				if obj, err := f.b.Backend.HeadObject(bucket, key); err == nil && obj != nil {
					obj.Contents.Close()
					f.b.mu.Lock()
					f.b.mpETags[bucketKey{bucket, key}] = multipartTag{md5: `"` + hex.EncodeToString(obj.Hash) + `"`, etag: res.ETag}
					f.b.mu.Unlock()
				}
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	case http.MethodPut, http.MethodDelete:
		if !q.Has("uploadId") { // a part upload leaves the object alone
			f.b.forget(bucket, key)
		}
		f.next.ServeHTTP(w, r)
	default:
		f.next.ServeHTTP(w, r)
	}
}

// listUploads answers an empty ListMultipartUploads where gofakes3 says
// 404 NoSuchUpload because the bucket never had an upload.
func (f *fakeFront) listUploads(w http.ResponseWriter, r *http.Request, bucket string) {
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, r)
	if rec.Code == http.StatusNotFound && strings.Contains(rec.Body.String(), "NoSuchUpload") {
		var b strings.Builder
		_ = xml.EscapeText(&b, []byte(bucket))
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
			`<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>` + b.String() +
			`</Bucket><MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>`))
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// etagWriter rewrites the ETag header before the header is sent.
type etagWriter struct {
	http.ResponseWriter
	fix   func(string) string
	wrote bool
}

func (e *etagWriter) WriteHeader(code int) {
	if !e.wrote {
		e.wrote = true
		if et := e.Header().Get("ETag"); et != "" {
			e.Header().Set("ETag", e.fix(et))
		}
	}
	e.ResponseWriter.WriteHeader(code)
}

func (e *etagWriter) Write(p []byte) (int, error) {
	if !e.wrote {
		e.WriteHeader(http.StatusOK)
	}
	return e.ResponseWriter.Write(p)
}

// Flush passes flushes on, so streamed bodies stay streamed.
func (e *etagWriter) Flush() {
	if fl, ok := e.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}
