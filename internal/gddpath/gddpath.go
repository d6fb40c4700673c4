// Package gddpath maps the path of a GPU direct placement (or save)
// request to an object key and opens it, for both the mount's gdd service
// (os2g mount --gdd-socket) and cmd/gddserve: one resolver, so the two
// agree on which paths name which keys.
package gddpath

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

// Key maps a request path p to its object key: an absolute path must lie
// under root (the mount point; "/" for a server without a mount, such as
// cmd/gddserve), a relative one is taken relative to root; the key is
// prefix (the mount's key prefix, "" or ending in "/") plus the cleaned
// relative path. Errors wrap gdd.ErrNotFound for a path outside root or
// naming root itself.
func Key(p, root, prefix string) (string, error) {
	rel := p
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(root, filepath.Clean(p))
		if err != nil || r == "." || r == ".." || strings.HasPrefix(r, "../") {
			return "", fmt.Errorf("%s is not a file under the mount %s: %w", p, root, gdd.ErrNotFound)
		}
		rel = r
	}
	rel = filepath.ToSlash(filepath.Clean(rel))
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("%q does not name a file under the mount: %w", p, gdd.ErrNotFound)
	}
	return prefix + rel, nil
}

// Resolver maps a placement request's path to an object of store (the
// key as Key maps it, with root and prefix), pinned to the ETag that
// Stat saw so that a replaced object fails instead of mixing versions. With pm
// non-nil the object is read through the mount's prefetch cache (block
// cache, budget, read-ahead, the version pinned by ETag), so a file read
// through the mount and then placed, or placed twice, is fetched once; with
// pm nil it is read by ranged GETs straight into the pinned blocks.
func Resolver(store objclient.Store, pm *prefetch.Manager, root, prefix string) func(ctx context.Context, path string) (gdd.Source, error) {
	return func(ctx context.Context, p string) (gdd.Source, error) {
		key, err := Key(p, root, prefix)
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

// Creator starts the upload of a save request's path (mapped to a key
// as Key maps it, with root and prefix); with readOnly every save fails
// with gdd.ErrInvalid. After a commit, cached bytes of the key's older
// versions are dropped from pm. The mount's directory listing shows the
// new object once its metadata TTL has passed.
func Creator(store objclient.Store, pm *prefetch.Manager, root, prefix string, readOnly bool) func(ctx context.Context, path string) (gdd.Upload, error) {
	return func(ctx context.Context, p string) (gdd.Upload, error) {
		if readOnly {
			return nil, fmt.Errorf("%w: cannot save %s: the mount %s is read-only", gdd.ErrInvalid, p, root)
		}
		key, err := Key(p, root, prefix)
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
