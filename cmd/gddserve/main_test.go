package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestDirResolver(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", "b.bin"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(root), "outside.bin")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(outside)
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	resolve := dirResolver(root)
	ctx := context.Background()
	src, err := resolve(ctx, "a/b.bin")
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 5)
	if n, err := src.ReadAt(ctx, p, 0); err != nil || n != 5 || string(p) != "hello" || src.Size() != 5 {
		t.Fatalf("read %q %d %v", p, n, err)
	}
	src.(*fileSource).Close()
	for _, path := range []string{"../outside.bin", "link", "a", "", "nope"} {
		if s, err := resolve(ctx, path); err == nil {
			s.(*fileSource).Close()
			t.Errorf("%q resolved; want an error", path)
		} else if path == "nope" && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing file: %v, want fs.ErrNotExist", err)
		}
	}
	// "../outside.bin" is cleaned to "outside.bin" inside root, which is absent.
	if _, err := resolve(ctx, "../outside.bin"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("escaping path: %v", err)
	}
}
