package gdd

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap at most one of them.
var (
	// ErrNoDevice: no usable GPU: the CUDA driver library could not be
	// loaded, lacks a required symbol, reports no device, or the ordinal
	// does not exist. The wrapped text carries the dlopen/driver message.
	ErrNoDevice = errors.New("no GPU device available")
	// ErrDevice: a device call failed (a CUDA driver error other than "no
	// device"); the text names the call and the driver's error string.
	ErrDevice = errors.New("device error")
	// ErrBadHandle: an IPC handle (CUDA IPC handle or simulated shared-memory
	// name) is malformed or could not be opened.
	ErrBadHandle = errors.New("bad IPC handle")
	// ErrNotFound: the requested file does not exist (returned by Resolve
	// functions; objclient.ErrNotFound and fs.ErrNotExist are treated alike).
	ErrNotFound = errors.New("no such file")
	// ErrPastEOF: the requested range extends past the end of the file.
	ErrPastEOF = errors.New("range past end of file")
	// ErrDstTooSmall: the destination buffer cannot hold the requested bytes.
	ErrDstTooSmall = errors.New("destination too small")
	// ErrInvalid: an argument is out of range (negative offset, bad options,
	// a buffer that belongs to another device).
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the Placer, Device or Client is closed.
	ErrClosed = errors.New("closed")
	// ErrChecksum: bytes read do not match the CRC32C recorded for them (a
	// corrupted object), or a tensor changed while it was being saved.
	ErrChecksum = errors.New("checksum mismatch")
)

// Device is a GPU (or a simulation of one) as seen by the placement path.
// All methods are safe for concurrent use.
type Device interface {
	// Kind is "cuda" or "sim"; it is also the destination kind a placement
	// request must name (see docs/gdd.md).
	Kind() string
	// Ordinal is the device index as this process sees it.
	Ordinal() int
	// AllocHost allocates n bytes of page-locked host memory.
	AllocHost(n int) (HostBuffer, error)
	// RegisterHost page-locks existing host memory p, which must not be Go
	// heap memory (use memory from mmap or C). Free on the result
	// unregisters it and leaves p itself alone.
	RegisterHost(p []byte) (HostBuffer, error)
	// NewStream creates a copy stream; copies on one stream run in order,
	// copies on different streams may overlap.
	NewStream() (Stream, error)
	// NewEvent creates an event, a marker recorded on a stream.
	NewEvent() (Event, error)
	// AllocDevice allocates n bytes of device memory (tests, benchmarks,
	// in-process use).
	AllocDevice(n int64) (DeviceBuffer, error)
	// OpenIPC maps memory exported by another process: for "cuda" a 64-byte
	// CUipcMemHandle (cudaIpcMemHandle_t), for "sim" the name of a file in the
	// simulator's shared-memory directory. The buffer spans the whole
	// exported allocation; Close unmaps it. ErrBadHandle if malformed.
	OpenIPC(handle []byte) (DeviceBuffer, error)
	// Close releases the device (streams and buffers must be released first).
	Close() error
}

// HostBuffer is page-locked host memory, a valid source for asynchronous
// copies.
type HostBuffer interface {
	// Bytes is the memory; its length is the size asked for.
	Bytes() []byte
	// Free releases (or unregisters) the memory; Bytes must not be used after.
	Free() error
}

// Stream is an ordered queue of asynchronous device operations.
type Stream interface {
	// CopyHtoDAsync enqueues a copy of src into dst at byte offset off. src
	// must stay unchanged until an event recorded after the copy has
	// completed. A src that is not pinned memory of this device is still
	// copied, but through a staging bounce (counted by the simulator; made
	// synchronous by CUDA).
	CopyHtoDAsync(dst DeviceBuffer, off int64, src []byte) error
	// CopyDtoHAsync enqueues a copy of len(dst) bytes of src, from byte
	// offset off, into host memory dst (the reverse of CopyHtoDAsync, for
	// saving device memory). dst must not be read before an event recorded
	// after the copy has completed. A dst that is not pinned memory of this
	// device is still filled, through a staging bounce (counted by the
	// simulator; made synchronous by CUDA). ErrInvalid if [off, off+len(dst))
	// is outside src.
	CopyDtoHAsync(dst []byte, src DeviceBuffer, off int64) error
	// Record enqueues e: it completes when everything enqueued before it has.
	Record(e Event) error
	// Synchronize waits for everything enqueued so far.
	Synchronize() error
	// Destroy releases the stream after its work completes.
	Destroy() error
}

// Event marks a point in a stream.
type Event interface {
	// Synchronize waits until the work before the last Record has completed.
	Synchronize() error
	// Destroy releases the event.
	Destroy() error
}

// DeviceBuffer is a range of device memory.
type DeviceBuffer interface {
	// Size is the buffer length in bytes.
	Size() int64
	// CopyToHost copies len(p) bytes starting at byte offset off into p,
	// synchronously (tests and verification; not on the placement path).
	CopyToHost(p []byte, off int64) error
	// Close frees the memory (AllocDevice) or unmaps it (OpenIPC).
	Close() error
}

// Slice returns the view [off, off+n) of b, itself a DeviceBuffer whose
// Close does nothing. ErrInvalid if the range is outside b.
func Slice(b DeviceBuffer, off, n int64) (DeviceBuffer, error) {
	if off < 0 || n < 0 || off > b.Size() || n > b.Size()-off {
		return nil, fmt.Errorf("%w: slice [%d,+%d) of a %d-byte buffer", ErrInvalid, off, n, b.Size())
	}
	if v, ok := b.(*view); ok {
		return &view{base: v.base, off: v.off + off, n: n}, nil
	}
	return &view{base: b, off: off, n: n}, nil
}

// view is a window onto another DeviceBuffer.
type view struct {
	base DeviceBuffer
	off  int64 // bytes into base
	n    int64 // bytes
}

var _ DeviceBuffer = (*view)(nil)

func (v *view) Size() int64 { return v.n }

func (v *view) CopyToHost(p []byte, off int64) error {
	if off < 0 || int64(len(p)) > v.n-off {
		return fmt.Errorf("%w: read [%d,+%d) of a %d-byte view", ErrInvalid, off, len(p), v.n)
	}
	return v.base.CopyToHost(p, v.off+off)
}

func (v *view) Close() error { return nil }

// unwrap returns the underlying buffer of b and the offset of b within it.
func unwrap(b DeviceBuffer) (DeviceBuffer, int64) {
	if v, ok := b.(*view); ok {
		return v.base, v.off
	}
	return b, 0
}

// checkRange validates a copy of n bytes at off into a buffer of size size.
func checkRange(size, off int64, n int) error {
	if off < 0 || int64(n) > size-off {
		return fmt.Errorf("%w: copy of %d bytes at offset %d into a %d-byte buffer", ErrDstTooSmall, n, off, size)
	}
	return nil
}
