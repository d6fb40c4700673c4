package gdd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

func TestDirCreator(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	create := DirCreator(root)
	ctx := context.Background()

	// Parts out of order, part 1 last, as a save sends them.
	w, err := create(ctx, "sub/a.bin")
	if err != nil {
		t.Fatal(err)
	}
	if w.PartSize(1<<30) != DirPartSize {
		t.Fatalf("part size %d", w.PartSize(1<<30))
	}
	first := bytes.Repeat([]byte("0123456789abcdef"), DirPartSize/16)
	if err := w.WritePart(ctx, 2, []byte("tail")); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePart(ctx, 1, first); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "a.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file visible before Complete: %v", err)
	}
	info, err := w.Complete(ctx, 2, DirPartSize+4)
	if err != nil || info.Size != DirPartSize+4 {
		t.Fatalf("Complete: %+v %v", info, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "a.bin")); !bytes.Equal(b, append(first, "tail"...)) {
		t.Errorf("file holds %d bytes, not part 1 then part 2", len(b))
	}
	if err := w.WritePart(ctx, 3, []byte("late")); err == nil {
		t.Error("WritePart after Complete succeeded")
	}

	// One request: Put.
	w, err = create(ctx, "sub/c.bin")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := w.Put(ctx, []byte("hello world")); err != nil || info.Size != 11 {
		t.Fatalf("Put: %+v %v", info, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "c.bin")); string(b) != "hello world" {
		t.Errorf("file holds %q", b)
	}

	// A Complete whose size is not the bytes written fails and leaves no file.
	w, err = create(ctx, "sub/d.bin")
	if err != nil {
		t.Fatal(err)
	}
	_ = w.WritePart(ctx, 2, []byte("tail"))
	if _, err := w.Complete(ctx, 2, DirPartSize+4); err == nil {
		t.Error("Complete with part 1 missing succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "d.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed Complete left a file: %v", err)
	}

	w, err = create(ctx, "/sub/b.bin")
	if err != nil {
		t.Fatal(err)
	}
	_ = w.WritePart(ctx, 1, []byte("partial"))
	if err := w.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "sub"))
	if len(entries) != 2 || entries[0].Name() != "a.bin" || entries[1].Name() != "c.bin" {
		t.Errorf("after Abort the directory holds %v; want a.bin and c.bin", entries)
	}

	for _, bad := range []string{"", "/", "missing/x.bin"} {
		if _, err := create(ctx, bad); err == nil {
			t.Errorf("create(%q) succeeded", bad)
		}
	}
	// ".." cannot leave the root: it is cleaned to a path inside it.
	if w, err := create(ctx, "../../escape.bin"); err == nil {
		_ = w.Abort(ctx)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.bin")); err == nil {
		t.Error("a save left the root directory")
	}
}

// TestSequentialUpload: parts out of order reach the writer in order; a
// part given twice, a bad number, or a Complete with a part missing is an
// error; a write error fails later parts too.
func TestSequentialUpload(t *testing.T) {
	ctx := context.Background()
	mem := objtest.NewMem()
	w, err := mem.Put(ctx, "k", objclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := SequentialUpload(w, 4)
	for _, p := range []struct {
		num  int
		data string
	}{{3, "ij"}, {2, "efgh"}} {
		if err := u.WritePart(ctx, p.num, []byte(p.data)); err != nil {
			t.Fatal(err)
		}
	}
	if w.Written() != 0 {
		t.Errorf("%d bytes written before part 1", w.Written())
	}
	if err := u.WritePart(ctx, 2, []byte("efgh")); err == nil {
		t.Error("part 2 given twice: no error")
	}
	if err := u.WritePart(ctx, 0, []byte("x")); err == nil {
		t.Error("part 0: no error")
	}
	if _, err := u.Complete(ctx, 3, 10); err == nil {
		t.Error("Complete with part 1 missing succeeded")
	}
	if err := u.WritePart(ctx, 1, []byte("abcd")); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Complete(ctx, 3, 10); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if n, err := mem.GetRange(ctx, "k", 0, got, ""); err != nil || string(got[:n]) != "abcdefghij" {
		t.Errorf("object %q, %v", got[:n], err)
	}

	fw, err := mem.Put(ctx, "f", objclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u = SequentialUpload(&failingWriter{Writer: fw, limit: 0, aborted: new(atomic.Bool)}, 4)
	if err := u.WritePart(ctx, 1, []byte("abcd")); err == nil {
		t.Fatal("write error not returned")
	}
	if err := u.WritePart(ctx, 2, []byte("efgh")); err == nil {
		t.Error("a part after a write error succeeded")
	}
	if err := u.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Stat(ctx, "f"); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("object after abort: %v", err)
	}
}
