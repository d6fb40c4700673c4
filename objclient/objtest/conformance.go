package objtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
)

// Conformance configures RunConformance for what a store cannot do. The
// zero value expects everything (Mem, gofakes3, AWS S3).
type Conformance struct {
	// NoVerbatimKeys: the store maps keys to files (versitygw posix) and
	// cannot hold a key "a" beside "a/b", nor keys with "//", "." or ".."
	// components. Skips the subtests that need them.
	NoVerbatimKeys bool
	// IgnoresIfNoneMatch: Commit with IfNoneMatch "*" may overwrite an
	// existing key. Skips the IfNoneMatch subtests.
	IgnoresIfNoneMatch bool
	// Skip names subtests to skip, with the reason (a known bug being
	// fixed), e.g. {"SpecialKeysCopy": "objclient bug: ..."}.
	Skip map[string]string
}

// RunConformance runs the Store suite against fresh stores from newStore
// (called once per subtest, with the subtest's t) and expects every
// capability; see Conformance.Run.
func RunConformance(t *testing.T, newStore func(t *testing.T) objclient.Store) {
	Conformance{}.Run(t, newStore)
}

// uploadLister is implemented by *objclient.S3: keys with multipart uploads
// in progress.
type uploadLister interface {
	ListUploads(ctx context.Context, prefix string) ([]string, error)
}

// Run runs the suite. Each subtest gets its own store from newStore, so
// stores need not be empty-able; the whole suite writes about 30 MiB and
// 1,300 small objects.
//
// Covered: Stat of a missing key (ErrNotFound); small Put with content type
// and metadata; ranges at start, middle and end, across, at and past EOF;
// empty objects; If-Match on GetRange and Copy (ErrChanged), overwrite;
// streaming multipart Put across part boundaries (ETag "-N"), Abort;
// IfNoneMatch; Delete; Copy; listing with paging past 1,000 keys (page
// sizes 1000 and 7, keys with spaces), StartAfter, delimiter listings with
// CommonPrefixes counted toward MaxKeys; keys with special characters
// (space, unicode, [ ] + % ? # ~); verbatim keys; cancelled and expired
// contexts; invalid arguments.
func (c Conformance) Run(t *testing.T, newStore func(t *testing.T) objclient.Store) {
	tests := []struct {
		name     string
		verbatim bool
		fn       func(t *testing.T, s objclient.Store)
	}{
		{"StatMissing", false, testStatMissing},
		{"PutSmall", false, testPutSmall},
		{"Ranges", false, testRanges},
		{"Empty", false, testEmpty},
		{"IfMatch", false, testIfMatch},
		{"Multipart", false, testMultipart},
		{"Abort", false, testAbort},
		{"IfNoneMatch", false, func(t *testing.T, s objclient.Store) {
			if c.IgnoresIfNoneMatch {
				t.Skip("store ignores If-None-Match")
			}
			testIfNoneMatch(t, s)
		}},
		{"IfNoneMatchMultipart", false, func(t *testing.T, s objclient.Store) {
			if c.IgnoresIfNoneMatch {
				t.Skip("store ignores If-None-Match")
			}
			testIfNoneMatchMultipart(t, s)
		}},
		{"Delete", false, testDelete},
		{"Copy", false, testCopy},
		{"Paging", false, testPaging},
		{"Delimiter", false, testDelimiter},
		{"SpecialKeys", false, testSpecialKeys},
		{"SpecialKeysCopy", false, testSpecialKeysCopy},
		{"VerbatimKeys", true, testVerbatimKeys},
		{"Cancel", false, testCancel},
		{"InvalidArgument", false, testInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if why, ok := c.Skip[tc.name]; ok {
				t.Skip(why)
			}
			if tc.verbatim && c.NoVerbatimKeys {
				t.Skip("store cannot hold verbatim keys (a beside a/b, //)")
			}
			tc.fn(t, newStore(t))
		})
	}
}

// ctxT returns a context with a hang guard of one minute.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pattern returns n deterministic bytes that differ per seed and offset.
func pattern(seed string, n int) []byte {
	b := make([]byte, n)
	h := uint32(2166136261)
	for i := 0; i < len(seed); i++ {
		h = (h ^ uint32(seed[i])) * 16777619
	}
	for i := range b {
		h ^= h << 13
		h ^= h >> 17
		h ^= h << 5
		b[i] = byte(h)
	}
	return b
}

// put writes data under key through the Store's Writer in chunks of chunk
// bytes (0: one Write) and returns Commit's info.
func put(t *testing.T, s objclient.Store, key string, data []byte, chunk int, opts objclient.PutOptions) objclient.ObjectInfo {
	t.Helper()
	info, err := tryPut(ctxT(t), s, key, data, chunk, opts)
	if err != nil {
		t.Fatalf("put %q (%d bytes): %v", key, len(data), err)
	}
	return info
}

func tryPut(ctx context.Context, s objclient.Store, key string, data []byte, chunk int, opts objclient.PutOptions) (objclient.ObjectInfo, error) {
	w, err := s.Put(ctx, key, opts)
	if err != nil {
		return objclient.ObjectInfo{}, err
	}
	if chunk <= 0 {
		chunk = max(len(data), 1)
	}
	for rest := data; len(rest) > 0; {
		n := min(chunk, len(rest))
		m, err := w.Write(rest[:n])
		if err != nil || m != n {
			_ = w.Abort(ctx)
			return objclient.ObjectInfo{}, fmt.Errorf("write returned %d of %d: %v", m, n, err)
		}
		rest = rest[n:]
	}
	if w.Written() != int64(len(data)) {
		_ = w.Abort(ctx)
		return objclient.ObjectInfo{}, fmt.Errorf("Written() = %d, want %d", w.Written(), len(data))
	}
	return w.Commit(ctx)
}

// readAll reads the whole object of size bytes with GetRange in pieces
// of piece bytes.
func readAll(t *testing.T, s objclient.Store, key string, size int64, piece int) []byte {
	t.Helper()
	ctx := ctxT(t)
	out := make([]byte, 0, size)
	buf := make([]byte, piece)
	for off := int64(0); ; {
		n, err := s.GetRange(ctx, key, off, buf, "")
		if err != nil {
			t.Fatalf("GetRange(%q, %d, %d): %v", key, off, len(buf), err)
		}
		if n == 0 {
			break
		}
		out = append(out, buf[:n]...)
		off += int64(n)
		if n < len(buf) {
			if off != size {
				t.Fatalf("GetRange(%q) short read of %d at %d before the end (%d)", key, n, off-int64(n), size)
			}
			break
		}
	}
	return out
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

func mustStat(t *testing.T, s objclient.Store, key string) objclient.ObjectInfo {
	t.Helper()
	info, err := s.Stat(ctxT(t), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	return info
}

// listAll lists every page of req and returns objects and common prefixes
// in the order received, checking that pages never exceed MaxKeys.
func listAll(t *testing.T, s objclient.Store, req objclient.ListRequest) (keys []string, infos []objclient.ObjectInfo, prefixes []string) {
	t.Helper()
	ctx := ctxT(t)
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatalf("List(%+v): more than 10,000 pages, the continuation token does not advance", req)
		}
		page, err := s.List(ctx, req)
		if err != nil {
			t.Fatalf("List(%+v): %v", req, err)
		}
		if got := len(page.Objects) + len(page.CommonPrefixes); req.MaxKeys > 0 && got > int(req.MaxKeys) {
			t.Fatalf("List(%+v): %d entries in one page, more than MaxKeys", req, got)
		}
		for _, o := range page.Objects {
			keys = append(keys, o.Key)
			infos = append(infos, o)
		}
		prefixes = append(prefixes, page.CommonPrefixes...)
		if !page.IsTruncated {
			return keys, infos, prefixes
		}
		if page.NextContinuationToken == "" {
			t.Fatalf("List(%+v): truncated page without NextContinuationToken", req)
		}
		req.ContinuationToken = page.NextContinuationToken
	}
}

func testStatMissing(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	_, err := s.Stat(ctx, "missing/key.bin")
	wantErr(t, "Stat of a missing key", err, objclient.ErrNotFound)
	_, err = s.GetRange(ctx, "missing/key.bin", 0, make([]byte, 10), "")
	wantErr(t, "GetRange of a missing key", err, objclient.ErrNotFound)
	put(t, s, "dir/file", []byte("x"), 0, objclient.PutOptions{})
	for _, k := range []string{"dir", "dir/", "di", "dir/fil"} {
		_, err = s.Stat(ctx, k)
		wantErr(t, fmt.Sprintf("Stat(%q) beside dir/file", k), err, objclient.ErrNotFound)
	}
}

func testPutSmall(t *testing.T, s objclient.Store) {
	data := []byte("hello, os2g\n")
	meta := map[string]string{"color": "blue", "uid": "1000"}
	info := put(t, s, "small.txt", data, 5, objclient.PutOptions{ContentType: "text/plain", Metadata: meta})
	if info.Size != int64(len(data)) || info.ETag == "" {
		t.Fatalf("Commit info = %+v, want Size %d and an ETag", info, len(data))
	}
	if info.Key != "small.txt" {
		t.Errorf("Commit info Key = %q, want small.txt", info.Key)
	}
	if strings.Contains(info.ETag, "-") {
		t.Errorf("small object ETag %s has a multipart suffix: it should be one PutObject", info.ETag)
	}
	st := mustStat(t, s, "small.txt")
	if st.Size != int64(len(data)) || st.ETag != info.ETag {
		t.Errorf("Stat = size %d ETag %s, want %d %s", st.Size, st.ETag, len(data), info.ETag)
	}
	if st.ContentType != "text/plain" {
		t.Errorf("Stat ContentType = %q, want text/plain", st.ContentType)
	}
	for k, v := range meta {
		if st.Metadata[k] != v {
			t.Errorf("Stat Metadata[%q] = %q, want %q (all: %v)", k, st.Metadata[k], v, st.Metadata)
		}
	}
	if st.LastModified.IsZero() || time.Since(st.LastModified) > time.Hour || time.Until(st.LastModified) > time.Hour {
		t.Errorf("Stat LastModified = %v, want about now", st.LastModified)
	}
	if got := readAll(t, s, "small.txt", st.Size, 64); !bytes.Equal(got, data) {
		t.Errorf("read back %q, want %q", got, data)
	}
	_, infos, _ := listAll(t, s, objclient.ListRequest{})
	if len(infos) != 1 || infos[0].Key != "small.txt" || infos[0].Size != int64(len(data)) || infos[0].ETag != info.ETag {
		t.Errorf("List = %+v, want small.txt, size %d, ETag %s", infos, len(data), info.ETag)
	}
	if len(infos) == 1 && infos[0].LastModified.IsZero() {
		t.Errorf("List LastModified is zero")
	}
}

func testRanges(t *testing.T, s objclient.Store) {
	const size = 1000
	data := pattern("ranges", size)
	put(t, s, "r.bin", data, 0, objclient.PutOptions{})
	ctx := ctxT(t)
	for _, tc := range []struct {
		off  int64
		n    int
		want int // bytes expected
	}{
		{0, 100, 100},        // start
		{0, 1, 1},            // first byte
		{400, 100, 100},      // middle
		{900, 100, 100},      // end, exactly
		{999, 1, 1},          // last byte
		{950, 100, 50},       // crosses EOF: short count
		{0, 4096, size},      // whole object into a bigger buffer
		{size, 10, 0},        // at EOF
		{size + 4000, 10, 0}, // past EOF
		{1 << 33, 10, 0},     // far past EOF, offset past 2^32
	} {
		buf := bytes.Repeat([]byte{0xAA}, tc.n)
		n, err := s.GetRange(ctx, "r.bin", tc.off, buf, "")
		if err != nil || n != tc.want {
			t.Errorf("GetRange(off %d, len %d) = %d, %v; want %d, nil", tc.off, tc.n, n, err, tc.want)
			continue
		}
		if tc.want > 0 && !bytes.Equal(buf[:n], data[tc.off:tc.off+int64(n)]) {
			t.Errorf("GetRange(off %d, len %d): wrong bytes", tc.off, tc.n)
		}
		if !bytes.Equal(buf[n:], bytes.Repeat([]byte{0xAA}, tc.n-n)) {
			t.Errorf("GetRange(off %d, len %d) wrote past the count it returned", tc.off, tc.n)
		}
	}
	n, err := s.GetRange(ctx, "r.bin", 10, nil, "")
	if err != nil || n != 0 {
		t.Errorf("GetRange with an empty buffer = %d, %v; want 0, nil", n, err)
	}
}

func testEmpty(t *testing.T, s objclient.Store) {
	info := put(t, s, "empty", nil, 0, objclient.PutOptions{})
	if info.Size != 0 || info.ETag == "" {
		t.Errorf("Commit of empty object = %+v, want Size 0 and an ETag", info)
	}
	st := mustStat(t, s, "empty")
	if st.Size != 0 {
		t.Errorf("Stat(empty).Size = %d", st.Size)
	}
	ctx := ctxT(t)
	for _, off := range []int64{0, 1, 100} {
		n, err := s.GetRange(ctx, "empty", off, make([]byte, 10), "")
		if n != 0 || err != nil {
			t.Errorf("GetRange(empty, %d) = %d, %v; want 0, nil", off, n, err)
		}
	}
	n, err := s.GetRange(ctx, "empty", 0, make([]byte, 10), st.ETag)
	if n != 0 || err != nil {
		t.Errorf("GetRange(empty, If-Match its ETag) = %d, %v; want 0, nil", n, err)
	}
	keys, infos, _ := listAll(t, s, objclient.ListRequest{})
	if !slices.Equal(keys, []string{"empty"}) || infos[0].Size != 0 {
		t.Errorf("List = %+v, want one empty object", infos)
	}
}

func testIfMatch(t *testing.T, s objclient.Store) {
	v1 := pattern("v1", 300)
	info := put(t, s, "m.bin", v1, 0, objclient.PutOptions{})
	ctx := ctxT(t)
	buf := make([]byte, 100)
	n, err := s.GetRange(ctx, "m.bin", 100, buf, info.ETag)
	if err != nil || n != 100 || !bytes.Equal(buf, v1[100:200]) {
		t.Fatalf("GetRange If-Match the right ETag = %d, %v (bytes equal %v); want 100, nil", n, err, bytes.Equal(buf, v1[100:200]))
	}
	wrong := `"0123456789abcdef0123456789abcdef"`
	_, err = s.GetRange(ctx, "m.bin", 0, buf, wrong)
	wantErr(t, "GetRange If-Match a wrong ETag", err, objclient.ErrChanged)
	_, err = s.Copy(ctx, "m.bin", "m-copy.bin", wrong)
	wantErr(t, "Copy If-Match a wrong ETag", err, objclient.ErrChanged)
	if _, err := s.Stat(ctx, "m-copy.bin"); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("a failed conditional Copy created the destination (Stat: %v)", err)
	}
	if _, err := s.Copy(ctx, "m.bin", "m-copy.bin", info.ETag); err != nil {
		t.Errorf("Copy If-Match the right ETag: %v", err)
	}

	// Overwrite: the new content is visible and the old ETag no longer matches.
	v2 := pattern("v2", 200)
	info2 := put(t, s, "m.bin", v2, 0, objclient.PutOptions{})
	if info2.ETag == info.ETag {
		t.Fatalf("overwrite kept ETag %s", info.ETag)
	}
	st := mustStat(t, s, "m.bin")
	if st.Size != 200 || st.ETag != info2.ETag {
		t.Errorf("Stat after overwrite = %d %s, want 200 %s", st.Size, st.ETag, info2.ETag)
	}
	_, err = s.GetRange(ctx, "m.bin", 0, buf, info.ETag)
	wantErr(t, "GetRange If-Match the ETag before an overwrite", err, objclient.ErrChanged)
	n, err = s.GetRange(ctx, "m.bin", 150, buf, info2.ETag)
	if err != nil || n != 50 || !bytes.Equal(buf[:n], v2[150:]) {
		t.Errorf("GetRange after overwrite = %d, %v; want 50 new bytes", n, err)
	}
	_, err = s.GetRange(ctx, "missing", 0, buf, info.ETag)
	wantErr(t, "GetRange If-Match of a missing key", err, objclient.ErrNotFound)
}

// Multipart sizes: 5 MiB parts (the S3 minimum), 11 MiB + 3 bytes of data
// make 3 parts, the last of 1 MiB + 3 bytes.
const (
	mpPart = 5 << 20
	mpSize = 11<<20 + 3
)

func testMultipart(t *testing.T, s objclient.Store) {
	data := pattern("multipart", mpSize)
	info := put(t, s, "big/mp.bin", data, 777_777, objclient.PutOptions{PartSize: mpPart, ContentType: "application/x-test"})
	if info.Size != mpSize {
		t.Errorf("Commit Size = %d, want %d", info.Size, mpSize)
	}
	if !strings.HasSuffix(strings.Trim(info.ETag, `"`), "-3") {
		t.Errorf("multipart ETag %s does not end in -3", info.ETag)
	}
	st := mustStat(t, s, "big/mp.bin")
	if st.Size != mpSize || st.ContentType != "application/x-test" {
		t.Errorf("Stat = size %d type %q, want %d application/x-test", st.Size, st.ContentType, mpSize)
	}
	if st.ETag != info.ETag {
		t.Errorf("Stat ETag %s differs from Commit's %s", st.ETag, info.ETag)
	}
	// Whole object in pieces that do not divide the part size.
	if got := readAll(t, s, "big/mp.bin", mpSize, 1<<20+1); !bytes.Equal(got, data) {
		t.Fatalf("multipart object read back differs (got %d bytes, want %d)", len(got), len(data))
	}
	// Reads straddling each part boundary.
	ctx := ctxT(t)
	for _, b := range []int64{mpPart, 2 * mpPart} {
		buf := make([]byte, 20)
		n, err := s.GetRange(ctx, "big/mp.bin", b-10, buf, st.ETag)
		if err != nil || n != 20 || !bytes.Equal(buf, data[b-10:b+10]) {
			t.Errorf("GetRange across part boundary %d = %d, %v", b, n, err)
		}
	}
	// An object of exactly one part may go up either way; it must round-trip.
	exact := data[:mpPart]
	put(t, s, "big/exact.bin", exact, mpPart, objclient.PutOptions{PartSize: mpPart})
	if got := readAll(t, s, "big/exact.bin", mpPart, 3<<20); !bytes.Equal(got, exact) {
		t.Errorf("exact-part object read back differs (%d bytes)", len(got))
	}
	if lu, ok := s.(uploadLister); ok {
		ups, err := lu.ListUploads(ctx, "big/")
		if err != nil || len(ups) != 0 {
			t.Errorf("ListUploads after Commit = %v, %v; want none", ups, err)
		}
	}
}

func testAbort(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	// Large enough to have started a multipart upload before Abort.
	w, err := s.Put(ctx, "ab/big", objclient.PutOptions{PartSize: mpPart})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(pattern("abort", mpPart+mpPart/2)); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := w.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	// Small, never sent.
	w, err = s.Put(ctx, "ab/small", objclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("tiny")); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	for _, k := range []string{"ab/big", "ab/small"} {
		_, err := s.Stat(ctx, k)
		wantErr(t, "Stat after Abort of "+k, err, objclient.ErrNotFound)
	}
	if keys, _, _ := listAll(t, s, objclient.ListRequest{Prefix: "ab/"}); len(keys) != 0 {
		t.Errorf("List after Abort = %v", keys)
	}
	if lu, ok := s.(uploadLister); ok {
		ups, err := lu.ListUploads(ctx, "ab/")
		if err != nil || len(ups) != 0 {
			t.Errorf("ListUploads after Abort = %v, %v; want none", ups, err)
		}
	}
}

func testIfNoneMatch(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	put(t, s, "inm", []byte("first"), 0, objclient.PutOptions{IfNoneMatch: "*"})
	_, err := tryPut(ctx, s, "inm", []byte("second"), 0, objclient.PutOptions{IfNoneMatch: "*"})
	wantErr(t, "Commit with IfNoneMatch * over an existing key", err, objclient.ErrChanged)
	if got := readAll(t, s, "inm", 5, 16); string(got) != "first" {
		t.Errorf("content after refused overwrite = %q, want first", got)
	}
}

func testIfNoneMatchMultipart(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	big := pattern("inm-new", mpPart+1)
	put(t, s, "inm-new", big, 1<<20, objclient.PutOptions{IfNoneMatch: "*", PartSize: mpPart})
	if st := mustStat(t, s, "inm-new"); st.Size != mpPart+1 {
		t.Errorf("multipart Put with IfNoneMatch of a new key: size %d", st.Size)
	}
	put(t, s, "inm", []byte("first"), 0, objclient.PutOptions{})
	big = pattern("inm-big", mpPart+1)
	_, err := tryPut(ctx, s, "inm", big, 1<<20, objclient.PutOptions{IfNoneMatch: "*", PartSize: mpPart})
	wantErr(t, "multipart Commit with IfNoneMatch * over an existing key", err, objclient.ErrChanged)
	if st := mustStat(t, s, "inm"); st.Size != 5 {
		t.Errorf("size after refused multipart overwrite = %d, want 5", st.Size)
	}
}

func testDelete(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	put(t, s, "del/a", []byte("aaa"), 0, objclient.PutOptions{})
	put(t, s, "del/b", []byte("bbb"), 0, objclient.PutOptions{})
	if err := s.Delete(ctx, "del/a"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err := s.Stat(ctx, "del/a")
	wantErr(t, "Stat after Delete", err, objclient.ErrNotFound)
	_, err = s.GetRange(ctx, "del/a", 0, make([]byte, 3), "")
	wantErr(t, "GetRange after Delete", err, objclient.ErrNotFound)
	if err := s.Delete(ctx, "del/a"); err != nil {
		t.Errorf("Delete of a deleted key: %v, want nil", err)
	}
	if err := s.Delete(ctx, "never/existed"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	if keys, _, _ := listAll(t, s, objclient.ListRequest{}); !slices.Equal(keys, []string{"del/b"}) {
		t.Errorf("List after Delete = %v, want [del/b]", keys)
	}
}

func testCopy(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	data := pattern("copy", 4321)
	src := put(t, s, "cp/src", data, 1000, objclient.PutOptions{ContentType: "image/png", Metadata: map[string]string{"k": "v"}})
	info, err := s.Copy(ctx, "cp/src", "cp/dst", "")
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if info.Size != int64(len(data)) || info.ETag == "" {
		t.Errorf("Copy info = %+v, want size %d and an ETag", info, len(data))
	}
	st := mustStat(t, s, "cp/dst")
	if st.Size != int64(len(data)) || st.ETag != info.ETag || st.ETag != src.ETag {
		t.Errorf("Stat(dst) = %d %s, want %d, ETag %s (= Copy's %s)", st.Size, st.ETag, len(data), src.ETag, info.ETag)
	}
	if st.ContentType != "image/png" || st.Metadata["k"] != "v" {
		t.Errorf("Copy lost content type or metadata: %q %v", st.ContentType, st.Metadata)
	}
	if got := readAll(t, s, "cp/dst", st.Size, 1000); !bytes.Equal(got, data) {
		t.Errorf("copied content differs")
	}
	// Copy over an existing object replaces it.
	put(t, s, "cp/other", []byte("other"), 0, objclient.PutOptions{})
	if _, err := s.Copy(ctx, "cp/other", "cp/dst", ""); err != nil {
		t.Fatalf("Copy over existing: %v", err)
	}
	if got := readAll(t, s, "cp/dst", 5, 100); string(got) != "other" {
		t.Errorf("Copy over existing: dst = %q", got)
	}
	_, err = s.Copy(ctx, "cp/missing", "cp/x", "")
	wantErr(t, "Copy of a missing source", err, objclient.ErrNotFound)
	if _, err := s.Stat(ctx, "cp/x"); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("failed Copy created its destination (Stat: %v)", err)
	}
}

// pagingKeys are keys with a space, so that a page boundary falls on one
// (C07: a marker fed back URL-encoded skips every later key).
func pagingKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("p/a %04d.txt", i)
	}
	return keys
}

// putMany writes each key with content "Hello\n" from 8 goroutines.
func putMany(t *testing.T, s objclient.Store, keys []string) {
	t.Helper()
	ctx := ctxT(t)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan string)
	for range 8 {
		wg.Go(func() {
			for k := range next {
				if _, err := tryPut(ctx, s, k, []byte("Hello\n"), 0, objclient.PutOptions{}); err != nil {
					once.Do(func() { first = fmt.Errorf("put %q: %w", k, err) })
				}
			}
		})
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func testPaging(t *testing.T, s objclient.Store) {
	const n = 1100
	want := pagingKeys(n)
	putMany(t, s, want)
	for _, max := range []int32{0, 1000, 7} {
		keys, infos, prefixes := listAll(t, s, objclient.ListRequest{Prefix: "p/", MaxKeys: max})
		if len(prefixes) != 0 {
			t.Errorf("MaxKeys %d: flat listing returned prefixes %v", max, prefixes[:min(3, len(prefixes))])
		}
		if !slices.Equal(keys, want) {
			t.Errorf("MaxKeys %d: listed %d keys, want %d in order; %s", max, len(keys), n, firstDiff(keys, want))
			continue
		}
		for _, o := range infos {
			if o.Size != 6 {
				t.Errorf("MaxKeys %d: %q size %d, want 6", max, o.Key, o.Size)
				break
			}
		}
	}
	// The first default page holds exactly 1,000 keys, ending on a key with a space.
	page, err := s.List(ctxT(t), objclient.ListRequest{Prefix: "p/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 1000 || !page.IsTruncated || page.Objects[999].Key != "p/a 0999.txt" {
		t.Errorf("first page: %d objects, truncated %v; want 1000 ending at p/a 0999.txt", len(page.Objects), page.IsTruncated)
	}
	keys, _, _ := listAll(t, s, objclient.ListRequest{Prefix: "p/", StartAfter: "p/a 0999.txt", MaxKeys: 30})
	if !slices.Equal(keys, want[1000:]) {
		t.Errorf("StartAfter a key with a space: %s", firstDiff(keys, want[1000:]))
	}
	if keys, _, _ := listAll(t, s, objclient.ListRequest{Prefix: "p/a 105"}); !slices.Equal(keys, want[1050:1060]) {
		t.Errorf("Prefix p/a 105: got %v", keys)
	}
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at %d: got %q, want %q", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

func testDelimiter(t *testing.T, s objclient.Store) {
	// C07's q/: files and sub-prefixes interleaved, prefixes count toward MaxKeys.
	var files, dirs, all []string
	for i := range 9 {
		files = append(files, fmt.Sprintf("q/f%03d", i))
	}
	for i := range 6 {
		dirs = append(dirs, fmt.Sprintf("q/d%03d/", i))
		all = append(all, fmt.Sprintf("q/d%03d/x", i), fmt.Sprintf("q/d%03d/y/z", i))
	}
	all = append(all, files...)
	all = append(all, "top.txt")
	putMany(t, s, all)
	put(t, s, "q/m/", nil, 0, objclient.PutOptions{}) // a zero-byte directory marker
	wantDirs := append(slices.Clone(dirs), "q/m/")
	for _, max := range []int32{0, 1, 4} {
		keys, _, prefixes := listAll(t, s, objclient.ListRequest{Prefix: "q/", Delimiter: "/", MaxKeys: max})
		if !slices.Equal(keys, files) {
			t.Errorf("MaxKeys %d: objects %v, want %v", max, keys, files)
		}
		if !slices.Equal(prefixes, wantDirs) {
			t.Errorf("MaxKeys %d: prefixes %v, want %v", max, prefixes, wantDirs)
		}
	}
	keys, _, prefixes := listAll(t, s, objclient.ListRequest{Delimiter: "/"})
	if !slices.Equal(keys, []string{"top.txt"}) || !slices.Equal(prefixes, []string{"q/"}) {
		t.Errorf("root listing = %v %v, want [top.txt] [q/]", keys, prefixes)
	}
	keys, _, prefixes = listAll(t, s, objclient.ListRequest{Prefix: "q/d003/", Delimiter: "/"})
	if !slices.Equal(keys, []string{"q/d003/x"}) || !slices.Equal(prefixes, []string{"q/d003/y/"}) {
		t.Errorf("q/d003/ listing = %v %v", keys, prefixes)
	}
	// A prefix that is not a directory: string prefix only.
	keys, _, prefixes = listAll(t, s, objclient.ListRequest{Prefix: "q/d00", Delimiter: "/", MaxKeys: 1})
	if len(keys) != 0 || !slices.Equal(prefixes, dirs) {
		t.Errorf("q/d00 listing = %v %v, want no objects and %v", keys, prefixes, dirs)
	}
	// The marker lists as an object of its own directory.
	keys, infos, prefixes := listAll(t, s, objclient.ListRequest{Prefix: "q/m/", Delimiter: "/"})
	if !slices.Equal(keys, []string{"q/m/"}) || infos[0].Size != 0 || len(prefixes) != 0 {
		t.Errorf("q/m/ listing = %v %v, want the marker alone", keys, prefixes)
	}
	// MaxKeys 1 with a one-entry directory: not truncated, or truncated with an empty next page.
	keys, _, _ = listAll(t, s, objclient.ListRequest{Prefix: "q/d001/y/", Delimiter: "/", MaxKeys: 1})
	if !slices.Equal(keys, []string{"q/d001/y/z"}) {
		t.Errorf("q/d001/y/ listing = %v", keys)
	}
	page, err := s.List(ctxT(t), objclient.ListRequest{Prefix: "nothing/", Delimiter: "/"})
	if err != nil || len(page.Objects)+len(page.CommonPrefixes) != 0 || page.IsTruncated {
		t.Errorf("listing of an absent prefix = %+v, %v; want empty", page, err)
	}
}
