package objtest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
)

// specialKeys are C05's names plus brackets and unicode: each must reach the
// server byte-exact in the path, in the copy source header, and in list
// markers.
var specialKeys = []string{
	"sp/a b.txt",
	"sp/a+b.txt",
	"sp/100%.csv",
	"sp/%2F.txt",
	"sp/trail ",
	"sp/ lead",
	"sp/c++.h",
	"sp/q?x=1&y=2",
	"sp/hash#1",
	"sp/tilde~",
	"sp/[br]ack[et]",
	"sp/ünïcödé-日本語.txt",
	"sp/semi;colon=eq,comma@at!bang$'quote'",
	"sp/run books/x.txt",
}

func testSpecialKeys(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	content := func(k string) []byte { return []byte("content of " + k) }
	for _, k := range specialKeys {
		put(t, s, k, content(k), 0, objclient.PutOptions{})
	}
	want := slices.Clone(specialKeys)
	sort.Strings(want)
	for _, max := range []int32{0, 3} {
		keys, _, _ := listAll(t, s, objclient.ListRequest{Prefix: "sp/", MaxKeys: max})
		if !slices.Equal(keys, want) {
			t.Errorf("List sp/ (MaxKeys %d) = %q, want %q", max, keys, want)
		}
	}
	keys, _, prefixes := listAll(t, s, objclient.ListRequest{Prefix: "sp/", Delimiter: "/", MaxKeys: 2})
	if !slices.Equal(prefixes, []string{"sp/run books/"}) || len(keys) != len(specialKeys)-1 {
		t.Errorf("List sp/ with delimiter = %q %q", keys, prefixes)
	}
	keys, _, _ = listAll(t, s, objclient.ListRequest{Prefix: "sp/a+"})
	if !slices.Equal(keys, []string{"sp/a+b.txt"}) {
		t.Errorf("List prefix sp/a+ = %q, want [sp/a+b.txt]", keys)
	}
	keys, _, _ = listAll(t, s, objclient.ListRequest{Prefix: "sp/", StartAfter: "sp/a b.txt"})
	if i := slices.Index(want, "sp/a b.txt"); !slices.Equal(keys, want[i+1:]) {
		t.Errorf("List StartAfter %q = %q, want %q", "sp/a b.txt", keys, want[i+1:])
	}
	for _, k := range specialKeys {
		c := content(k)
		st, err := s.Stat(ctx, k)
		if err != nil || st.Size != int64(len(c)) || st.Key != k {
			t.Errorf("Stat(%q) = %+v, %v; want size %d", k, st, err, len(c))
			continue
		}
		if got := readAll(t, s, k, st.Size, 7); !bytes.Equal(got, c) {
			t.Errorf("GetRange(%q) = %q, want %q", k, got, c)
		}
	}
	for _, k := range specialKeys {
		if err := s.Delete(ctx, k); err != nil {
			t.Errorf("Delete(%q): %v", k, err)
		}
	}
	if keys, _, _ := listAll(t, s, objclient.ListRequest{Prefix: "sp/"}); len(keys) != 0 {
		t.Errorf("List sp/ after Delete = %q", keys)
	}
}

// testSpecialKeysCopy copies every special key: the source travels in the
// x-amz-copy-source header, percent-encoded, where "+" means a space to
// servers that form-decode it.
func testSpecialKeysCopy(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	content := func(k string) []byte { return []byte("content of " + k) }
	for _, k := range specialKeys {
		put(t, s, k, content(k), 0, objclient.PutOptions{})
	}
	for _, k := range specialKeys {
		c := content(k)
		st := mustStat(t, s, k)
		dst := "copy/" + strings.TrimPrefix(k, "sp/")
		if _, err := s.Copy(ctx, k, dst, st.ETag); err != nil {
			t.Errorf("Copy(%q, %q): %v", k, dst, err)
			continue
		}
		if got := readAll(t, s, dst, st.Size, 64); !bytes.Equal(got, c) {
			t.Errorf("copy of %q = %q, want %q", k, got, c)
		}
	}
	keys, _, _ := listAll(t, s, objclient.ListRequest{Prefix: "copy/"})
	var want []string
	for _, k := range specialKeys {
		want = append(want, "copy/"+strings.TrimPrefix(k, "sp/"))
	}
	sort.Strings(want)
	if !slices.Equal(keys, want) {
		t.Errorf("List copy/ = %q, want %q", keys, want)
	}
}

// testVerbatimKeys needs a store that holds keys as opaque strings: a file
// "v/a" beside "v/a/b", an empty path component "v//x", and "v/" itself.
func testVerbatimKeys(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	keys := []string{"v/", "v//x", "v/a", "v/a/b", "v/a/b/c", "v/./d", "v/../e"}
	for _, k := range keys {
		put(t, s, k, []byte(k), 0, objclient.PutOptions{})
	}
	for _, k := range keys {
		st, err := s.Stat(ctx, k)
		if err != nil || st.Size != int64(len(k)) {
			t.Errorf("Stat(%q) = %+v, %v", k, st, err)
			continue
		}
		if got := readAll(t, s, k, st.Size, 64); string(got) != k {
			t.Errorf("GetRange(%q) = %q", k, got)
		}
	}
	got, _, _ := listAll(t, s, objclient.ListRequest{Prefix: "v/"})
	want := slices.Clone(keys)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("flat List v/ = %q, want %q", got, want)
	}
	objs, _, prefixes := listAll(t, s, objclient.ListRequest{Prefix: "v/", Delimiter: "/"})
	if !slices.Equal(objs, []string{"v/", "v/a"}) || !slices.Equal(prefixes, []string{"v/../", "v/./", "v//", "v/a/"}) {
		t.Errorf("List v/ with delimiter = %q %q", objs, prefixes)
	}
	if _, err := s.Copy(ctx, "v/a", "v//copy", ""); err != nil {
		t.Errorf("Copy v/a -> v//copy: %v", err)
	} else if got := readAll(t, s, "v//copy", 3, 8); string(got) != "v/a" {
		t.Errorf("v//copy = %q", got)
	}
	if err := s.Delete(ctx, "v/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "v/a/b"); err != nil {
		t.Errorf("Delete(v/a) removed v/a/b: %v", err)
	}
}

func testCancel(t *testing.T, s objclient.Store) {
	put(t, s, "c/obj", []byte("cancel me"), 0, objclient.PutOptions{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		target error
	}{{"cancelled", cancelled, context.Canceled}, {"expired", expired, context.DeadlineExceeded}} {
		ctx := tc.ctx
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, tc.target) {
				t.Errorf("%s with a %s context: %v, want an error wrapping %v", op, tc.name, err, tc.target)
			}
			if errors.Is(err, objclient.ErrNotFound) {
				t.Errorf("%s with a %s context looks like ErrNotFound: %v", op, tc.name, err)
			}
		}
		_, err := s.Stat(ctx, "c/obj")
		check("Stat", err)
		_, err = s.List(ctx, objclient.ListRequest{Prefix: "c/"})
		check("List", err)
		_, err = s.GetRange(ctx, "c/obj", 0, make([]byte, 4), "")
		check("GetRange", err)
		check("Delete", s.Delete(ctx, "c/obj"))
		_, err = s.Copy(ctx, "c/obj", "c/copy", "")
		check("Copy", err)
		_, err = tryPut(ctx, s, "c/new", []byte("x"), 0, objclient.PutOptions{})
		check("Put+Commit", err)
	}
	// Nothing changed.
	if got := readAll(t, s, "c/obj", 9, 16); string(got) != "cancel me" {
		t.Errorf("c/obj after cancelled calls = %q", got)
	}
	for _, k := range []string{"c/copy", "c/new"} {
		if _, err := s.Stat(ctxT(t), k); !errors.Is(err, objclient.ErrNotFound) {
			t.Errorf("a cancelled call created %q (Stat: %v)", k, err)
		}
	}
}

func testInvalidArgument(t *testing.T, s objclient.Store) {
	ctx := ctxT(t)
	put(t, s, "ia", []byte("abc"), 0, objclient.PutOptions{})
	_, err := s.GetRange(ctx, "ia", -1, make([]byte, 2), "")
	wantErr(t, "GetRange at offset -1", err, objclient.ErrInvalidArgument)
	_, err = tryPut(ctx, s, "", []byte("x"), 0, objclient.PutOptions{})
	wantErr(t, "Put of an empty key", err, objclient.ErrInvalidArgument)
}
