package gddpath

import (
	"context"
	"errors"
	"testing"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

func TestResolver(t *testing.T) {
	store := objtest.NewMem()
	store.PutObject("data/train/a.bin", []byte("hello"), "", nil)
	resolve := Resolver(store, nil, "/mnt/s3", "data/")
	ctx := context.Background()
	for _, p := range []string{"/mnt/s3/train/a.bin", "train/a.bin", "/mnt/s3/train/../train/a.bin", "./train/a.bin"} {
		src, err := resolve(ctx, p)
		if err != nil || src.Size() != 5 {
			t.Errorf("resolve(%q) = %v, %v; want a 5-byte source", p, src, err)
		}
	}
	for _, p := range []string{"/mnt/other/a.bin", "/mnt/s3", "../x", "/mnt/s3/../s3x/a"} {
		if _, err := resolve(ctx, p); !errors.Is(err, gdd.ErrNotFound) {
			t.Errorf("resolve(%q) error %v; want gdd.ErrNotFound", p, err)
		}
	}
	if _, err := resolve(ctx, "train/missing.bin"); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("missing key: %v; want objclient.ErrNotFound", err)
	}
}

// Without a mount (cmd/gddserve: root "/"), absolute and relative paths
// both name keys under the prefix, and no path leaves it.
func TestKeyWithoutMount(t *testing.T) {
	for _, tc := range []struct{ p, key string }{
		{"/train/a.bin", "data/train/a.bin"},
		{"train/a.bin", "data/train/a.bin"},
		{"/train/../val/b", "data/val/b"},
		{"./x", "data/x"},
	} {
		if got, err := Key(tc.p, "/", "data/"); err != nil || got != tc.key {
			t.Errorf("Key(%q) = %q, %v; want %q", tc.p, got, err, tc.key)
		}
	}
	for _, p := range []string{"/", "..", "../x", "."} {
		if got, err := Key(p, "/", "data/"); !errors.Is(err, gdd.ErrNotFound) {
			t.Errorf("Key(%q) = %q, %v; want gdd.ErrNotFound", p, got, err)
		}
	}
}

// A save on a read-only mount is refused before any upload starts.
func TestCreatorReadOnly(t *testing.T) {
	store := objtest.NewMem()
	create := Creator(store, nil, "/mnt/s3", "data/", true)
	if _, err := create(context.Background(), "x.bin"); !errors.Is(err, gdd.ErrInvalid) {
		t.Errorf("create on a read-only mount: %v; want gdd.ErrInvalid", err)
	}
	if _, err := store.Stat(context.Background(), "data/x.bin"); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("after a refused save: Stat %v; want objclient.ErrNotFound", err)
	}
}
