package gdd

import (
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

	w, err := create(ctx, "sub/a.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("hello ")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "a.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file visible before Commit: %v", err)
	}
	info, err := w.Commit(ctx)
	if err != nil || info.Size != 11 || w.Written() != 11 {
		t.Fatalf("Commit: %+v %v", info, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "a.bin")); string(b) != "hello world" {
		t.Errorf("file holds %q", b)
	}

	w, err = create(ctx, "/sub/b.bin")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("partial"))
	if err := w.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "sub"))
	if len(entries) != 1 || entries[0].Name() != "a.bin" {
		t.Errorf("after Abort the directory holds %v; want only a.bin", entries)
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
