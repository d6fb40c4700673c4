package gdd

import (
	"context"
	"fmt"
	"io"

	"github.com/os2g/os2g/objclient"
)

// Source is a readable file for placement: the cmd layer adapts an object
// key ([KeySource]) or a prefetch.Reader. ReadAt reads into p, which is a
// pinned block, so the bytes land in host memory once. Like
// prefetch.Reader.ReadAt, it is short only at the end of the file and
// returns 0, nil (or io.EOF) at or past it. A Source that is also an
// io.Closer is closed by the server after the request.
type Source interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	// Size is the file length in bytes.
	Size() int64
}

// KeySource returns a Source reading object key of store with GetRange
// straight into the caller's (pinned) buffer. etag, if not "", is sent as
// If-Match so a replaced object fails with objclient.ErrChanged instead of
// mixing versions; size is the object length in bytes.
func KeySource(store objclient.Store, key, etag string, size int64) Source {
	return &keySource{store: store, key: key, etag: etag, size: size}
}

type keySource struct {
	store objclient.Store
	key   string
	etag  string
	size  int64 // bytes
}

var _ Source = (*keySource)(nil)

func (k *keySource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= k.size {
		return 0, nil
	}
	if rem := k.size - off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := k.store.GetRange(ctx, k.key, off, p, k.etag)
	if err != nil {
		return n, fmt.Errorf("gdd: read %s at %d: %w", k.key, off, err)
	}
	return n, nil
}

func (k *keySource) Size() int64 { return k.size }

// ReaderAtSource adapts an io.ReaderAt of known size (an *os.File, a
// bytes.Reader) to Source; ctx is checked before each read.
func ReaderAtSource(r io.ReaderAt, size int64) Source {
	return &readerAtSource{r: r, size: size}
}

type readerAtSource struct {
	r    io.ReaderAt
	size int64 // bytes
}

var _ Source = (*readerAtSource)(nil)

func (s *readerAtSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := s.r.ReadAt(p, off)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (s *readerAtSource) Size() int64 { return s.size }
