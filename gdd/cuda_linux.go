//go:build linux && (amd64 || arm64)

package gdd

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuIpcMemHandle is CUipcMemHandle: struct { char reserved[64]; }. purego
// passes it by value per the platform ABI (on x86-64 System V a 64-byte
// aggregate goes on the stack; on AArch64 a copy is made and its address
// passed), which is how the C compiler passes it to cuIpcOpenMemHandle.
type cuIpcMemHandle struct {
	Reserved [IPCHandleSize]byte
}

// CUDA driver constants (cuda.h).
const (
	cudaSuccess               = 0
	cudaErrorNotInitialized   = 3
	cudaErrorStubLibrary      = 34
	cudaErrorNoDriver         = 35 // CUDA_ERROR_INSUFFICIENT_DRIVER
	cudaErrorNoDevice         = 100
	cudaErrorInvalidDevice    = 101
	cuStreamNonBlocking       = 0x1
	cuEventDisableTiming      = 0x2
	cuIpcLazyEnablePeerAccess = 0x1
)

// cudaAPI is the table of driver entry points, filled by purego.
type cudaAPI struct {
	cuInit                    func(flags uint32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuMemAllocHost            func(pp *unsafe.Pointer, n uintptr) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuMemHostRegister         func(p unsafe.Pointer, n uintptr, flags uint32) int32
	cuMemHostUnregister       func(p unsafe.Pointer) int32
	cuMemAlloc                func(dptr *uint64, n uintptr) int32
	cuMemFree                 func(dptr uint64) int32
	cuMemGetAddressRange      func(base *uint64, size *uintptr, dptr uint64) int32
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, n uintptr, stream uintptr) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uintptr) int32
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uint64, n uintptr, stream uintptr) int32
	cuStreamCreate            func(s *uintptr, flags uint32) int32
	cuStreamSynchronize       func(s uintptr) int32
	cuStreamDestroy           func(s uintptr) int32
	cuEventCreate             func(e *uintptr, flags uint32) int32
	cuEventRecord             func(e uintptr, s uintptr) int32
	cuEventSynchronize        func(e uintptr) int32
	cuEventDestroy            func(e uintptr) int32
	cuIpcGetMemHandle         func(h *cuIpcMemHandle, dptr uint64) int32
	cuIpcOpenMemHandle        func(dptr *uint64, h cuIpcMemHandle, flags uint32) int32
	cuIpcCloseMemHandle       func(dptr uint64) int32
	cuGetErrorName            func(r int32, s **byte) int32
	cuGetErrorString          func(r int32, s **byte) int32
}

// loadCUDA dlopens lib and resolves every entry point, checking each symbol
// first so that an old or stub driver is an error, never a panic.
func loadCUDA(lib string) (*cudaAPI, error) {
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "library not found or not loadable (is the NVIDIA driver installed?)"
		}
		return nil, fmt.Errorf("%w: dlopen %s: %s", ErrNoDevice, lib, msg)
	}
	a := &cudaAPI{}
	syms := []struct {
		names []string // first that resolves wins
		fn    any
	}{
		{[]string{"cuInit"}, &a.cuInit},
		{[]string{"cuDeviceGetCount"}, &a.cuDeviceGetCount},
		{[]string{"cuDeviceGet"}, &a.cuDeviceGet},
		{[]string{"cuDeviceGetName"}, &a.cuDeviceGetName},
		{[]string{"cuDevicePrimaryCtxRetain"}, &a.cuDevicePrimaryCtxRetain},
		{[]string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}, &a.cuDevicePrimaryCtxRelease},
		{[]string{"cuCtxSetCurrent"}, &a.cuCtxSetCurrent},
		{[]string{"cuMemAllocHost_v2"}, &a.cuMemAllocHost},
		{[]string{"cuMemFreeHost"}, &a.cuMemFreeHost},
		{[]string{"cuMemHostRegister_v2"}, &a.cuMemHostRegister},
		{[]string{"cuMemHostUnregister"}, &a.cuMemHostUnregister},
		{[]string{"cuMemAlloc_v2"}, &a.cuMemAlloc},
		{[]string{"cuMemFree_v2"}, &a.cuMemFree},
		{[]string{"cuMemGetAddressRange_v2"}, &a.cuMemGetAddressRange},
		{[]string{"cuMemcpyHtoDAsync_v2"}, &a.cuMemcpyHtoDAsync},
		{[]string{"cuMemcpyDtoH_v2"}, &a.cuMemcpyDtoH},
		{[]string{"cuMemcpyDtoHAsync_v2"}, &a.cuMemcpyDtoHAsync},
		{[]string{"cuStreamCreate"}, &a.cuStreamCreate},
		{[]string{"cuStreamSynchronize"}, &a.cuStreamSynchronize},
		{[]string{"cuStreamDestroy_v2"}, &a.cuStreamDestroy},
		{[]string{"cuEventCreate"}, &a.cuEventCreate},
		{[]string{"cuEventRecord"}, &a.cuEventRecord},
		{[]string{"cuEventSynchronize"}, &a.cuEventSynchronize},
		{[]string{"cuEventDestroy_v2"}, &a.cuEventDestroy},
		{[]string{"cuIpcGetMemHandle"}, &a.cuIpcGetMemHandle},
		{[]string{"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"}, &a.cuIpcOpenMemHandle},
		{[]string{"cuIpcCloseMemHandle"}, &a.cuIpcCloseMemHandle},
		{[]string{"cuGetErrorName"}, &a.cuGetErrorName},
		{[]string{"cuGetErrorString"}, &a.cuGetErrorString},
	}
	for _, s := range syms {
		var addr uintptr
		for _, n := range s.names {
			if p, err := purego.Dlsym(h, n); err == nil && p != 0 {
				addr = p
				break
			}
		}
		if addr == 0 {
			_ = purego.Dlclose(h)
			return nil, fmt.Errorf("%w: %s lacks %s (driver too old?)", ErrNoDevice, lib, s.names[0])
		}
		purego.RegisterFunc(s.fn, addr)
	}
	return a, nil
}

// CUDA is a Device on an NVIDIA GPU through the CUDA driver API. It uses the
// device's primary context (the one the CUDA runtime, and so PyTorch, uses)
// and makes it current on the calling OS thread for every call.
type CUDA struct {
	api     *cudaAPI
	ordinal int
	dev     int32
	ctx     uintptr
	name    string
	closed  atomic.Bool
	relOnce sync.Once
}

var _ Device = (*CUDA)(nil)

// OpenCUDA loads the driver and retains the primary context of device
// o.Ordinal. Without a driver or device it returns an error wrapping
// ErrNoDevice that carries the dlopen or driver message.
func OpenCUDA(o CUDAOptions) (*CUDA, error) {
	if o.Ordinal < 0 {
		return nil, fmt.Errorf("%w: CUDA ordinal %d", ErrInvalid, o.Ordinal)
	}
	lib := o.Library
	if lib == "" {
		lib = "libcuda.so.1"
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	api, err := loadCUDA(lib)
	if err != nil {
		return nil, err
	}
	d := &CUDA{api: api, ordinal: o.Ordinal}
	if r := api.cuInit(0); r != cudaSuccess {
		return nil, d.err("cuInit", r)
	}
	var n int32
	if r := api.cuDeviceGetCount(&n); r != cudaSuccess {
		return nil, d.err("cuDeviceGetCount", r)
	}
	if int(n) <= o.Ordinal {
		return nil, fmt.Errorf("%w: device %d requested, %d visible", ErrNoDevice, o.Ordinal, n)
	}
	if r := api.cuDeviceGet(&d.dev, int32(o.Ordinal)); r != cudaSuccess {
		return nil, d.err("cuDeviceGet", r)
	}
	var name [256]byte
	if r := api.cuDeviceGetName(&name[0], int32(len(name)), d.dev); r == cudaSuccess {
		d.name = cString(&name[0])
	}
	if r := api.cuDevicePrimaryCtxRetain(&d.ctx, d.dev); r != cudaSuccess {
		return nil, d.err("cuDevicePrimaryCtxRetain", r)
	}
	log.Info("gdd: CUDA device open", "ordinal", o.Ordinal, "name", d.name, "library", lib)
	return d, nil
}

// cString converts a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// err turns a CUresult into an error naming the call.
func (d *CUDA) err(call string, r int32) error {
	var name, desc string
	var p *byte
	if d.api.cuGetErrorName(r, &p) == cudaSuccess {
		name = cString(p)
	}
	p = nil
	if d.api.cuGetErrorString(r, &p) == cudaSuccess {
		desc = cString(p)
	}
	sentinel := ErrDevice
	switch r {
	case cudaErrorNoDevice, cudaErrorInvalidDevice, cudaErrorNoDriver, cudaErrorStubLibrary, cudaErrorNotInitialized:
		sentinel = ErrNoDevice
	}
	return fmt.Errorf("%w: %s: CUDA error %d %s: %s", sentinel, call, r, name, desc)
}

// do runs fn with the primary context current on a locked OS thread.
func (d *CUDA) do(call string, fn func() int32) error {
	if d.closed.Load() {
		return ErrClosed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := d.api.cuCtxSetCurrent(d.ctx); r != cudaSuccess {
		return d.err("cuCtxSetCurrent", r)
	}
	if r := fn(); r != cudaSuccess {
		return d.err(call, r)
	}
	return nil
}

// Kind returns "cuda".
func (d *CUDA) Kind() string { return "cuda" }

// Ordinal returns the device index.
func (d *CUDA) Ordinal() int { return d.ordinal }

// Name is the device name the driver reports (e.g. "NVIDIA H200").
func (d *CUDA) Name() string { return d.name }

// AllocHost allocates pinned memory with cuMemAllocHost.
func (d *CUDA) AllocHost(n int) (HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: host allocation of %d bytes", ErrInvalid, n)
	}
	var p unsafe.Pointer
	if err := d.do("cuMemAllocHost", func() int32 { return d.api.cuMemAllocHost(&p, uintptr(n)) }); err != nil {
		return nil, err
	}
	return &cudaHost{d: d, p: p, b: unsafe.Slice((*byte)(p), n), owned: true}, nil
}

// RegisterHost page-locks p with cuMemHostRegister (p must not be Go heap
// memory).
func (d *CUDA) RegisterHost(p []byte) (HostBuffer, error) {
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: registering an empty buffer", ErrInvalid)
	}
	ptr := unsafe.Pointer(unsafe.SliceData(p))
	if err := d.do("cuMemHostRegister", func() int32 { return d.api.cuMemHostRegister(ptr, uintptr(len(p)), 0) }); err != nil {
		return nil, err
	}
	return &cudaHost{d: d, p: ptr, b: p}, nil
}

type cudaHost struct {
	d     *CUDA
	p     unsafe.Pointer
	b     []byte
	owned bool // from cuMemAllocHost (else registered)
	freed atomic.Bool
}

var _ HostBuffer = (*cudaHost)(nil)

func (h *cudaHost) Bytes() []byte { return h.b }

func (h *cudaHost) Free() error {
	if h.freed.Swap(true) {
		return nil
	}
	if h.owned {
		return h.d.do("cuMemFreeHost", func() int32 { return h.d.api.cuMemFreeHost(h.p) })
	}
	return h.d.do("cuMemHostUnregister", func() int32 { return h.d.api.cuMemHostUnregister(h.p) })
}

// cudaBuf is device memory: allocated (cuMemAlloc) or IPC-mapped.
type cudaBuf struct {
	d      *CUDA
	ptr    uint64 // CUdeviceptr
	size   int64  // bytes
	ipc    bool
	closed atomic.Bool
}

var _ DeviceBuffer = (*cudaBuf)(nil)

func (b *cudaBuf) Size() int64 { return b.size }

// DevicePointer returns the CUdeviceptr of b (for in-process use).
func (b *cudaBuf) DevicePointer() uint64 { return b.ptr }

func (b *cudaBuf) CopyToHost(p []byte, off int64) error {
	if off < 0 || int64(len(p)) > b.size-off {
		return fmt.Errorf("%w: read [%d,+%d) of a %d-byte buffer", ErrInvalid, off, len(p), b.size)
	}
	if len(p) == 0 {
		return nil
	}
	// p may be Go memory: cuMemcpyDtoH is synchronous and pins nothing
	// beyond the call, so the cgo pointer rules are met.
	dst := unsafe.Pointer(unsafe.SliceData(p))
	err := b.d.do("cuMemcpyDtoH", func() int32 { return b.d.api.cuMemcpyDtoH(dst, b.ptr+uint64(off), uintptr(len(p))) })
	runtime.KeepAlive(p)
	return err
}

func (b *cudaBuf) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	if b.ipc {
		return b.d.do("cuIpcCloseMemHandle", func() int32 { return b.d.api.cuIpcCloseMemHandle(b.ptr) })
	}
	return b.d.do("cuMemFree", func() int32 { return b.d.api.cuMemFree(b.ptr) })
}

// AllocDevice allocates device memory with cuMemAlloc.
func (d *CUDA) AllocDevice(n int64) (DeviceBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: device allocation of %d bytes", ErrInvalid, n)
	}
	var p uint64
	if err := d.do("cuMemAlloc", func() int32 { return d.api.cuMemAlloc(&p, uintptr(n)) }); err != nil {
		return nil, err
	}
	return &cudaBuf{d: d, ptr: p, size: n}, nil
}

// OpenIPC opens a 64-byte CUDA IPC memory handle (cuIpcOpenMemHandle with
// lazy peer access) and sizes the mapping with cuMemGetAddressRange. A
// process cannot open a handle it exported itself (the driver refuses).
func (d *CUDA) OpenIPC(handle []byte) (DeviceBuffer, error) {
	if len(handle) != IPCHandleSize {
		return nil, fmt.Errorf("%w: CUDA IPC handle is %d bytes, want %d", ErrBadHandle, len(handle), IPCHandleSize)
	}
	var h cuIpcMemHandle
	copy(h.Reserved[:], handle)
	var p, base uint64
	var size uintptr
	if err := d.do("cuIpcOpenMemHandle", func() int32 { return d.api.cuIpcOpenMemHandle(&p, h, cuIpcLazyEnablePeerAccess) }); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHandle, err)
	}
	if err := d.do("cuMemGetAddressRange", func() int32 { return d.api.cuMemGetAddressRange(&base, &size, p) }); err != nil {
		_ = d.do("cuIpcCloseMemHandle", func() int32 { return d.api.cuIpcCloseMemHandle(p) })
		return nil, err
	}
	// The mapping starts at p; the allocation may start at base <= p.
	return &cudaBuf{d: d, ptr: p, size: int64(base + uint64(size) - p), ipc: true}, nil
}

// WrapDevicePointer returns a DeviceBuffer for size bytes of device memory
// at ptr that this process already owns (in-process use, e.g. a buffer of
// another CUDA library in the same primary context). Close does not free it.
func (d *CUDA) WrapDevicePointer(ptr uint64, size int64) (DeviceBuffer, error) {
	if ptr == 0 || size <= 0 {
		return nil, fmt.Errorf("%w: device pointer %#x of %d bytes", ErrInvalid, ptr, size)
	}
	b := &cudaBuf{d: d, ptr: ptr, size: size}
	b.closed.Store(true) // not ours to free; CopyToHost and copies still work
	return b, nil
}

// ExportIPC returns the 64-byte IPC handle of memory from AllocDevice, for
// another process to open (tests use it from a child process).
func (d *CUDA) ExportIPC(b DeviceBuffer) ([]byte, error) {
	cb, ok := b.(*cudaBuf)
	if !ok || cb.d != d {
		return nil, fmt.Errorf("%w: not memory of this CUDA device", ErrInvalid)
	}
	var h cuIpcMemHandle
	if err := d.do("cuIpcGetMemHandle", func() int32 { return d.api.cuIpcGetMemHandle(&h, cb.ptr) }); err != nil {
		return nil, err
	}
	return h.Reserved[:], nil
}

// NewStream creates a non-blocking stream.
func (d *CUDA) NewStream() (Stream, error) {
	var s uintptr
	if err := d.do("cuStreamCreate", func() int32 { return d.api.cuStreamCreate(&s, cuStreamNonBlocking) }); err != nil {
		return nil, err
	}
	return &cudaStream{d: d, s: s}, nil
}

type cudaStream struct {
	d *CUDA
	s uintptr // CUstream
}

var _ Stream = (*cudaStream)(nil)

func (s *cudaStream) CopyHtoDAsync(dst DeviceBuffer, off int64, src []byte) error {
	base, boff := unwrap(dst)
	cb, ok := base.(*cudaBuf)
	if !ok || cb.d != s.d {
		return fmt.Errorf("%w: destination is not memory of this CUDA device", ErrInvalid)
	}
	if err := checkRange(dst.Size(), off, len(src)); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(src))
	return s.d.do("cuMemcpyHtoDAsync", func() int32 {
		return s.d.api.cuMemcpyHtoDAsync(cb.ptr+uint64(boff+off), p, uintptr(len(src)), s.s)
	})
}

func (s *cudaStream) CopyDtoHAsync(dst []byte, src DeviceBuffer, off int64) error {
	base, boff := unwrap(src)
	cb, ok := base.(*cudaBuf)
	if !ok || cb.d != s.d {
		return fmt.Errorf("%w: source is not memory of this CUDA device", ErrInvalid)
	}
	if off < 0 || int64(len(dst)) > src.Size()-off {
		return fmt.Errorf("%w: copy of %d bytes at offset %d of a %d-byte buffer", ErrInvalid, len(dst), off, src.Size())
	}
	if len(dst) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(dst))
	return s.d.do("cuMemcpyDtoHAsync", func() int32 {
		return s.d.api.cuMemcpyDtoHAsync(p, cb.ptr+uint64(boff+off), uintptr(len(dst)), s.s)
	})
}

func (s *cudaStream) Record(e Event) error {
	ce, ok := e.(*cudaEvent)
	if !ok || ce.d != s.d {
		return fmt.Errorf("%w: event is not of this CUDA device", ErrInvalid)
	}
	return s.d.do("cuEventRecord", func() int32 { return s.d.api.cuEventRecord(ce.e, s.s) })
}

func (s *cudaStream) Synchronize() error {
	return s.d.do("cuStreamSynchronize", func() int32 { return s.d.api.cuStreamSynchronize(s.s) })
}

func (s *cudaStream) Destroy() error {
	return s.d.do("cuStreamDestroy", func() int32 { return s.d.api.cuStreamDestroy(s.s) })
}

// NewEvent creates an event without timing.
func (d *CUDA) NewEvent() (Event, error) {
	var e uintptr
	if err := d.do("cuEventCreate", func() int32 { return d.api.cuEventCreate(&e, cuEventDisableTiming) }); err != nil {
		return nil, err
	}
	return &cudaEvent{d: d, e: e}, nil
}

type cudaEvent struct {
	d *CUDA
	e uintptr // CUevent
}

var _ Event = (*cudaEvent)(nil)

func (e *cudaEvent) Synchronize() error {
	return e.d.do("cuEventSynchronize", func() int32 { return e.d.api.cuEventSynchronize(e.e) })
}

func (e *cudaEvent) Destroy() error {
	return e.d.do("cuEventDestroy", func() int32 { return e.d.api.cuEventDestroy(e.e) })
}

// Close releases the primary context.
func (d *CUDA) Close() error {
	var err error
	d.relOnce.Do(func() {
		if r := d.api.cuDevicePrimaryCtxRelease(d.dev); r != cudaSuccess {
			err = d.err("cuDevicePrimaryCtxRelease", r)
		}
		d.closed.Store(true)
	})
	return err
}
