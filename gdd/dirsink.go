package gdd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/os2g/os2g/objclient"
)

// DirCreator returns a ServeOptions.Create that saves into files under the
// directory root (cmd/gddserve -dir, benchmarks): request paths are taken
// relative to root and may not leave it (os.Root). A file is written under
// a temporary name beside its target, renamed into place by Commit and
// removed by Abort, so a failed save leaves no file. Missing parent
// directories are not created: ErrNotFound.
func DirCreator(root *os.Root) func(ctx context.Context, path string) (objclient.Writer, error) {
	var seq atomic.Uint64 // distinct temporary names for concurrent saves
	return func(ctx context.Context, path string) (objclient.Writer, error) {
		rel := filepath.Clean("/" + path)[1:]
		if rel == "" {
			return nil, fmt.Errorf("%w: %q names the root directory", ErrInvalid, path)
		}
		tmp := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+".tmp"+strconv.FormatUint(seq.Add(1), 10))
		f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return &dirWriter{root: root, name: rel, tmp: tmp, f: f}, nil
	}
}

// dirWriter is an objclient.Writer onto a file of a local directory.
type dirWriter struct {
	root      *os.Root
	name, tmp string // paths relative to root
	f         *os.File
	n         int64 // bytes written
	done      bool  // Commit or Abort was called
}

var _ objclient.Writer = (*dirWriter)(nil)

func (w *dirWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("%w: write after commit or abort", ErrInvalid)
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *dirWriter) Written() int64 { return w.n }

func (w *dirWriter) Commit(ctx context.Context) (objclient.ObjectInfo, error) {
	if w.done {
		return objclient.ObjectInfo{}, fmt.Errorf("%w: commit after commit or abort", ErrInvalid)
	}
	w.done = true
	err := w.f.Close()
	if err == nil {
		err = w.root.Rename(w.tmp, w.name)
	}
	if err != nil {
		_ = w.root.Remove(w.tmp)
		return objclient.ObjectInfo{}, err
	}
	return objclient.ObjectInfo{Key: w.name, Size: w.n}, nil
}

func (w *dirWriter) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	_ = w.f.Close()
	return w.root.Remove(w.tmp)
}
