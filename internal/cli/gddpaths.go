package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

// gddResolver maps a placement request's path to an object of store: an
// absolute path must lie under the mount point mp; a relative one is taken
// relative to the mount's root (that is, a key under prefix). With pm
// non-nil the object is read through the mount's prefetch cache (block
// cache, budget, read-ahead, the version pinned by ETag), so a file read
// through the mount and then placed, or placed twice, is fetched once; with
// pm nil it is read by ranged GETs straight into the pinned blocks.
func gddResolver(store objclient.Store, pm *prefetch.Manager, mp, prefix string) func(ctx context.Context, path string) (gdd.Source, error) {
	return func(ctx context.Context, p string) (gdd.Source, error) {
		key, err := gddKey(p, mp, prefix)
		if err != nil {
			return nil, err
		}
		info, err := store.Stat(ctx, key)
		if err != nil {
			return nil, err
		}
		if pm != nil {
			return &cachedSource{r: pm.Open(prefetch.File{Key: info.Key, Size: info.Size, ETag: info.ETag})}, nil
		}
		return gdd.KeySource(store, info.Key, info.ETag, info.Size), nil
	}
}

// gddCreator starts the upload of a save request's path (mapped to a key
// as gddResolver maps it) with gdd.StoreUpload. After a commit, cached bytes of the key's older
// versions are dropped from pm. The mount's directory listing shows the
// new object once its metadata TTL has passed.
func gddCreator(store objclient.Store, pm *prefetch.Manager, mp, prefix string, readOnly bool) func(ctx context.Context, path string) (gdd.Upload, error) {
	return func(ctx context.Context, p string) (gdd.Upload, error) {
		if readOnly {
			return nil, fmt.Errorf("%w: cannot save %s: the mount %s is read-only", gdd.ErrInvalid, p, mp)
		}
		key, err := gddKey(p, mp, prefix)
		if err != nil {
			return nil, err
		}
		u, err := gdd.StoreUpload(ctx, store, key)
		if err != nil {
			return nil, err
		}
		return &invalidatingUpload{Upload: u, pm: pm, key: key}, nil
	}
}

// invalidatingUpload drops pm's cached bytes of key once the upload
// commits.
type invalidatingUpload struct {
	gdd.Upload
	pm  *prefetch.Manager
	key string
}

var _ gdd.Upload = (*invalidatingUpload)(nil)

func (w *invalidatingUpload) Complete(ctx context.Context, n int, size int64) (objclient.ObjectInfo, error) {
	info, err := w.Upload.Complete(ctx, n, size)
	if err == nil && w.pm != nil {
		w.pm.Invalidate(w.key)
	}
	return info, err
}

func (w *invalidatingUpload) Put(ctx context.Context, p []byte) (objclient.ObjectInfo, error) {
	info, err := w.Upload.Put(ctx, p)
	if err == nil && w.pm != nil {
		w.pm.Invalidate(w.key)
	}
	return info, err
}

// cachedSource is a gdd.Source reading through a prefetch.Reader; the
// server closes it after the request.
type cachedSource struct{ r *prefetch.Reader }

var (
	_ gdd.Source = (*cachedSource)(nil)
	_ io.Closer  = (*cachedSource)(nil)
)

func (c *cachedSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return c.r.ReadAt(ctx, p, off)
}

func (c *cachedSource) Size() int64 { return c.r.File().Size }

func (c *cachedSource) Close() error { return c.r.Close() }
