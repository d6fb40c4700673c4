package gdd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/os2g/os2g/objclient"
)

// DirPartSize is the part size of DirCreator's uploads, bytes.
const DirPartSize = 8 << 20

// DirCreator returns a ServeOptions.Create that saves into files under the
// directory root (cmd/gddserve -dir, benchmarks): request paths are taken
// relative to root and may not leave it (os.Root). A file is written under
// a temporary name beside its target (each part at its offset, in any
// order), renamed into place by Complete or Put and removed by Abort, so a
// failed save leaves no file. Missing parent directories are not created:
// ErrNotFound.
func DirCreator(root *os.Root) func(ctx context.Context, path string) (Upload, error) {
	var seq atomic.Uint64 // distinct temporary names for concurrent saves
	return func(ctx context.Context, path string) (Upload, error) {
		rel := filepath.Clean("/" + path)[1:]
		if rel == "" {
			return nil, fmt.Errorf("%w: %q names the root directory", ErrInvalid, path)
		}
		tmp := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+".tmp"+strconv.FormatUint(seq.Add(1), 10))
		f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return &dirUpload{root: root, name: rel, tmp: tmp, f: f, parts: map[int]bool{}}, nil
	}
}

// dirUpload is an Upload onto a file of a local directory.
type dirUpload struct {
	root      *os.Root
	name, tmp string // paths relative to root
	f         *os.File

	mu    sync.Mutex
	done  bool         // GUARDED_BY(mu): Complete, Put or Abort was called
	parts map[int]bool // GUARDED_BY(mu): the numbers of the parts written
}

var _ Upload = (*dirUpload)(nil)

func (w *dirUpload) PartSize(int64) int64 { return DirPartSize }

func (w *dirUpload) WritePart(ctx context.Context, num int, p []byte) error {
	if num < 1 {
		return fmt.Errorf("%w: part number %d", ErrInvalid, num)
	}
	w.mu.Lock()
	done := w.done
	w.mu.Unlock()
	if done {
		return fmt.Errorf("%w: write after complete or abort", ErrInvalid)
	}
	if _, err := w.f.WriteAt(p, int64(num-1)*DirPartSize); err != nil {
		return err
	}
	w.mu.Lock()
	w.parts[num] = true
	w.mu.Unlock()
	return nil
}

func (w *dirUpload) Complete(ctx context.Context, n int, size int64) (objclient.ObjectInfo, error) {
	return w.finish(func() error {
		for k := 1; k <= n; k++ {
			if !w.parts[k] {
				return fmt.Errorf("%w: complete of %d parts: part %d was not written", ErrInvalid, n, k)
			}
		}
		fi, err := w.f.Stat()
		if err == nil && fi.Size() != size {
			err = fmt.Errorf("%w: complete of %d parts, %d bytes: the file holds %d", ErrInvalid, n, size, fi.Size())
		}
		return err
	}, size)
}

func (w *dirUpload) Put(ctx context.Context, p []byte) (objclient.ObjectInfo, error) {
	return w.finish(func() error {
		_, err := w.f.WriteAt(p, 0)
		return err
	}, int64(len(p)))
}

// finish runs last, then closes the file and renames it into place; on any
// error it removes the file.
func (w *dirUpload) finish(last func() error, size int64) (objclient.ObjectInfo, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return objclient.ObjectInfo{}, fmt.Errorf("%w: commit after commit or abort", ErrInvalid)
	}
	w.done = true
	err := last()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.root.Rename(w.tmp, w.name)
	}
	if err != nil {
		_ = w.root.Remove(w.tmp)
		return objclient.ObjectInfo{}, err
	}
	return objclient.ObjectInfo{Key: w.name, Size: size}, nil
}

func (w *dirUpload) Abort(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil
	}
	w.done = true
	_ = w.f.Close()
	return w.root.Remove(w.tmp)
}
