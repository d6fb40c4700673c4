package gdd

import (
	"context"
	"fmt"
	"sync"

	"github.com/os2g/os2g/objclient"
)

// Upload is the target of a save: an object written as numbered parts that
// may arrive in any order, as S3 multipart uploads allow. A save streams
// parts 2..N while the device memory is read and sends part 1 (the header,
// whose CRC32C values are known only then, and the first data bytes) last,
// so each byte crosses from the device once. An object of one part goes in
// one request (Put) instead.
//
// WritePart may be called from several goroutines at once; the other
// methods are called once the parts are in. A failure before Complete or
// Put makes the save call Abort, which must leave no object and no stored
// parts; Complete and Put clean up after their own failures (Abort is not
// called after them).
type Upload interface {
	// PartSize returns the size in bytes of every part but the last of an
	// object of size bytes (for S3, at least 5 MiB and at most 10,000
	// parts). Called once, before any part.
	PartSize(size int64) int64
	// WritePart stores part num (1-based) of the object; p is valid only
	// during the call.
	WritePart(ctx context.Context, num int, p []byte) error
	// Complete makes the object of parts 1..n, size bytes in all.
	Complete(ctx context.Context, n int, size int64) (objclient.ObjectInfo, error)
	// Put stores p as the whole object in one request (no part was
	// written).
	Put(ctx context.Context, p []byte) (objclient.ObjectInfo, error)
	// Abort discards the upload and its parts.
	Abort(ctx context.Context) error
}

// SequentialUpload adapts w, a writer that takes an object's bytes in
// order (objclient.Writer), to Upload with parts of partSize bytes: a part
// that arrives before its predecessors is copied and held until they are
// in. With a save's order (part 1 last) that holds the whole object in
// memory: it is meant for small objects, fakes and tests, not for
// checkpoints of GiBs.
func SequentialUpload(w objclient.Writer, partSize int64) Upload {
	return &seqUpload{w: w, partSize: partSize, next: 1, held: map[int][]byte{}}
}

type seqUpload struct {
	w        objclient.Writer
	partSize int64 // bytes

	mu   sync.Mutex
	next int            // GUARDED_BY(mu): the number of the next part to write to w
	held map[int][]byte // GUARDED_BY(mu): parts past next, copied
	err  error          // GUARDED_BY(mu): the first write error; later parts fail with it
}

var _ Upload = (*seqUpload)(nil)

func (u *seqUpload) PartSize(int64) int64 { return u.partSize }

func (u *seqUpload) WritePart(ctx context.Context, num int, p []byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case num < 1:
		return fmt.Errorf("%w: part number %d", ErrInvalid, num)
	case u.err != nil:
		return u.err
	case num < u.next || u.held[num] != nil:
		return fmt.Errorf("%w: part %d written twice", ErrInvalid, num)
	case num > u.next:
		u.held[num] = append([]byte(nil), p...)
		return nil
	}
	for {
		if _, err := u.w.Write(p); err != nil {
			u.err = err
			return err
		}
		u.next++
		var ok bool
		if p, ok = u.held[u.next]; !ok {
			return nil
		}
		delete(u.held, u.next)
	}
}

func (u *seqUpload) Complete(ctx context.Context, n int, size int64) (objclient.ObjectInfo, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.next != n+1 || len(u.held) != 0 || u.w.Written() != size {
		return objclient.ObjectInfo{}, fmt.Errorf("%w: complete of %d parts, %d bytes: parts up to %d written in order, %d held, %d bytes", ErrInvalid, n, size, u.next-1, len(u.held), u.w.Written())
	}
	return u.w.Commit(ctx)
}

func (u *seqUpload) Put(ctx context.Context, p []byte) (objclient.ObjectInfo, error) {
	if _, err := u.w.Write(p); err != nil {
		return objclient.ObjectInfo{}, err
	}
	return u.w.Commit(ctx)
}

func (u *seqUpload) Abort(ctx context.Context) error { return u.w.Abort(ctx) }
