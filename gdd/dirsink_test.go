package gdd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
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
