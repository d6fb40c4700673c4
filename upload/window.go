// Package upload holds the write window of a streaming upload: the last
// bytes written to a file that is being uploaded, in order, as one
// object. A writer that seeks back a little (to patch a header, as
// torch.save's zip writer does) or reads back what it just wrote is
// served from the window; bytes older than the window have been handed to
// the upload and can no longer change.
//
// A Window knows nothing of FUSE or of the store: it is given a push
// function that takes the oldest bytes away (in fusefs, the Writer of a
// Store.Put upload) and reports the offsets it cannot honour with the
// sentinel errors below, which the front end maps to errnos.
//
// The rules, with W the window size in bytes:
//
//   - A write (or read) at or after the window's start (Base) is served;
//     one before it fails with ErrBeforeWindow (ErrPushed for reads).
//   - A write past the end zero-fills the gap (Extend), as a sparse file
//     would read.
//   - When more than W bytes are held, all but the newest W/2 are pushed,
//     so at least the last W/2 bytes written stay changeable.
//   - Truncate to a size within the window cuts it; beyond the end it
//     zero-fills; before Base it fails with ErrNotHeld.
package upload

import (
	"errors"
	"fmt"
)

// Errors of a Window. Each names an offset the window cannot honour.
var (
	// ErrBeforeWindow: a write starts before Base (those bytes were
	// pushed).
	ErrBeforeWindow = errors.New("upload: write before the window")
	// ErrPushed: a read starts before Base.
	ErrPushed = errors.New("upload: bytes already pushed")
	// ErrNotHeld: a truncate to a size before Base.
	ErrNotHeld = errors.New("upload: truncate before the window")
)

// MinSize is the smallest window size (bytes) New accepts: two bytes, so
// that half a window is at least one byte.
const MinSize = 2

// Window is the held tail [Base, End) of an upload. It is not safe for
// concurrent use: the owner (an upload handle) serialises calls.
type Window struct {
	size int64              // bytes held at most before a push
	push func([]byte) error // takes the oldest bytes; errors are returned as is
	buf  []byte             // bytes [base, base+len(buf))
	base int64
}

// New returns an empty window of size bytes (at least MinSize) whose
// pushed bytes go to push, in order and each byte once. push must not
// keep the slice it is given. A push error is returned unchanged by the
// call that caused it; the window's contents are then unspecified and the
// owner should give the upload up.
func New(size int64, push func(p []byte) error) (*Window, error) {
	if size < MinSize {
		return nil, fmt.Errorf("upload: window size %d below %d bytes", size, MinSize)
	}
	if push == nil {
		return nil, errors.New("upload: nil push function")
	}
	return &Window{size: size, push: push}, nil
}

// Base is the offset (bytes) of the first held byte: everything before it
// has been pushed.
func (w *Window) Base() int64 { return w.base }

// End is the logical size of the upload in bytes: Base plus the bytes
// held.
func (w *Window) End() int64 { return w.base + int64(len(w.buf)) }

// Held returns the held bytes [Base, End), to be pushed by the owner at
// commit. The slice is the window's own: valid until the next call.
func (w *Window) Held() []byte { return w.buf }

// Discard drops the held bytes (after a commit or an abort): End becomes
// Base, so later reads at or after Base read nothing and those before it
// still fail with ErrPushed.
func (w *Window) Discard() { w.buf = nil }

// Write stores p at offset off (bytes), zero-filling any gap after End,
// and pushes the oldest bytes when more than the window size is held.
// Errors: ErrBeforeWindow when off < Base; a push error.
func (w *Window) Write(p []byte, off int64) error {
	if off < w.base {
		return ErrBeforeWindow
	}
	if err := w.Extend(off); err != nil {
		return err
	}
	rel := int(off - w.base)
	if end := rel + len(p); end > len(w.buf) {
		w.buf = append(w.buf, make([]byte, end-len(w.buf))...)
	}
	copy(w.buf[rel:], p)
	return w.trim()
}

// Extend zero-fills up to end (bytes; a no-op when end <= End), pushing
// as it goes so that no more than the window size plus one byte is ever
// held. Errors: a push error.
func (w *Window) Extend(end int64) error {
	for cur := w.End(); cur < end; cur = w.End() {
		k := min(end-cur, w.size-int64(len(w.buf))+1)
		w.buf = append(w.buf, make([]byte, k)...)
		if err := w.trim(); err != nil {
			return err
		}
	}
	return nil
}

// trim pushes all but the newest size/2 bytes when more than size are
// held.
func (w *Window) trim() error {
	if int64(len(w.buf)) <= w.size {
		return nil
	}
	k := len(w.buf) - int(w.size/2)
	if err := w.push(w.buf[:k]); err != nil {
		return err
	}
	rest := copy(w.buf, w.buf[k:])
	w.buf = w.buf[:rest]
	w.base += int64(k)
	return nil
}

// Truncate sets End to size (bytes): cutting held bytes, or zero-filling
// past the end. Errors: ErrNotHeld when size < Base; a push error.
func (w *Window) Truncate(size int64) error {
	switch cur := w.End(); {
	case size < w.base:
		return ErrNotHeld
	case size <= cur:
		w.buf = w.buf[:size-w.base]
		return nil
	}
	return w.Extend(size)
}

// ReadAt copies held bytes from offset off (bytes) into dest and returns
// how many: fewer than len(dest) at the end, 0 at or after End. Errors:
// ErrPushed when off < Base (never a short read of pushed bytes).
func (w *Window) ReadAt(dest []byte, off int64) (int, error) {
	switch {
	case off >= w.End():
		return 0, nil
	case off < w.base:
		return 0, ErrPushed
	}
	return copy(dest, w.buf[off-w.base:]), nil
}
