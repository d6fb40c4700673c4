package gdd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// SimOptions configures a simulated device.
type SimOptions struct {
	// Ordinal is the device index the simulator reports (default 0).
	Ordinal int
	// ShmDir is the directory whose files OpenIPC maps as destinations
	// ("" means /dev/shm). An IPC handle is the base name of a regular file
	// in it; names with a slash, "." or ".." are refused.
	ShmDir string
}

// SimStats counts what a simulated device did. All byte counts are bytes.
type SimStats struct {
	// HostAllocs is the number of AllocHost/RegisterHost calls.
	HostAllocs int64
	// HostToDeviceCopies is the number of host-to-device copies executed.
	HostToDeviceCopies int64
	// BytesCopied is the number of bytes moved host-to-device.
	BytesCopied int64
	// HostBounceCopies counts host-to-device copies whose source was not
	// pinned memory of this device, so the bytes had to be staged through a
	// second host buffer first (an extra host crossing); HostBounceBytes is
	// their size.
	HostBounceCopies int64
	HostBounceBytes  int64
	// DeviceToHostCopies and BytesToHost count CopyToHost calls (tests).
	DeviceToHostCopies int64
	BytesToHost        int64
	// DtoHCopies and DtoHBytes count stream copies device-to-host
	// (CopyDtoHAsync): each byte saved crosses into host memory once, so
	// DtoHBytes equals the bytes saved. DtoHBounceCopies/DtoHBounceBytes
	// count those whose destination was not pinned memory of this device
	// (staged through a second host buffer: an extra crossing).
	DtoHCopies       int64
	DtoHBytes        int64
	DtoHBounceCopies int64
	DtoHBounceBytes  int64
	// IPCOpens is the number of successful OpenIPC calls.
	IPCOpens int64
}

// Sim is a simulated Device: pinned host memory is anonymous mmap memory,
// device memory is host memory (anonymous mmap, or a MAP_SHARED mapping of a
// shared-memory file for OpenIPC), and each stream is a goroutine that runs
// its copies in order, so copies really are asynchronous and a pinned block
// reused too early would be caught by tests.
type Sim struct {
	o SimOptions

	mu     sync.Mutex // guards pinned, closed
	pinned []span     // page-locked host ranges
	closed bool

	hostAllocs, h2dCopies, h2dBytes, bounceCopies, bounceBytes atomic.Int64
	d2hCopies, d2hBytes, ipcOpens                              atomic.Int64
	dtohCopies, dtohBytes, dtohBounceCopies, dtohBounceBytes   atomic.Int64
}

// span is a host address range [lo, hi).
type span struct{ lo, hi uintptr }

var _ Device = (*Sim)(nil)

// NewSim returns a simulated device.
func NewSim(o SimOptions) (*Sim, error) {
	if o.Ordinal < 0 {
		return nil, fmt.Errorf("%w: sim ordinal %d", ErrInvalid, o.Ordinal)
	}
	if o.ShmDir == "" {
		o.ShmDir = "/dev/shm"
	}
	return &Sim{o: o}, nil
}

// Kind returns "sim".
func (s *Sim) Kind() string { return "sim" }

// Ordinal returns the configured device index.
func (s *Sim) Ordinal() int { return s.o.Ordinal }

// Stats returns a snapshot of the counters.
func (s *Sim) Stats() SimStats {
	return SimStats{
		HostAllocs:         s.hostAllocs.Load(),
		HostToDeviceCopies: s.h2dCopies.Load(),
		BytesCopied:        s.h2dBytes.Load(),
		HostBounceCopies:   s.bounceCopies.Load(),
		HostBounceBytes:    s.bounceBytes.Load(),
		DeviceToHostCopies: s.d2hCopies.Load(),
		BytesToHost:        s.d2hBytes.Load(),
		IPCOpens:           s.ipcOpens.Load(),
		DtoHCopies:         s.dtohCopies.Load(),
		DtoHBytes:          s.dtohBytes.Load(),
		DtoHBounceCopies:   s.dtohBounceCopies.Load(),
		DtoHBounceBytes:    s.dtohBounceBytes.Load(),
	}
}

// IsPinned reports whether p lies wholly inside pinned memory of this device.
func (s *Sim) IsPinned(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	hi := lo + uintptr(len(p))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.pinned {
		if lo >= sp.lo && hi <= sp.hi {
			return true
		}
	}
	return false
}

func spanOf(p []byte) span {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	return span{lo, lo + uintptr(len(p))}
}

func (s *Sim) addPinned(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.pinned = append(s.pinned, spanOf(p))
	s.hostAllocs.Add(1)
	return nil
}

func (s *Sim) removePinned(p []byte) {
	sp := spanOf(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.pinned {
		if q == sp {
			s.pinned = append(s.pinned[:i], s.pinned[i+1:]...)
			return
		}
	}
}

// anonMap returns n bytes of zeroed anonymous memory outside the Go heap.
func anonMap(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: allocation of %d bytes", ErrInvalid, n)
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap %d bytes: %w", ErrDevice, n, err)
	}
	return b, nil
}

// AllocHost returns n bytes of simulated pinned memory.
func (s *Sim) AllocHost(n int) (HostBuffer, error) {
	b, err := anonMap(n)
	if err != nil {
		return nil, err
	}
	if err := s.addPinned(b); err != nil {
		_ = syscall.Munmap(b)
		return nil, err
	}
	return &simHost{s: s, b: b, owned: true}, nil
}

// RegisterHost marks p as pinned until the result is freed.
func (s *Sim) RegisterHost(p []byte) (HostBuffer, error) {
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: registering an empty buffer", ErrInvalid)
	}
	if err := s.addPinned(p); err != nil {
		return nil, err
	}
	return &simHost{s: s, b: p}, nil
}

type simHost struct {
	s     *Sim
	b     []byte
	owned bool // b came from anonMap
	freed atomic.Bool
}

var _ HostBuffer = (*simHost)(nil)

func (h *simHost) Bytes() []byte { return h.b }

func (h *simHost) Free() error {
	if h.freed.Swap(true) {
		return nil
	}
	h.s.removePinned(h.b)
	if h.owned {
		return syscall.Munmap(h.b)
	}
	return nil
}

// AllocDevice returns n bytes of simulated device memory.
func (s *Sim) AllocDevice(n int64) (DeviceBuffer, error) {
	if n <= 0 || n != int64(int(n)) {
		return nil, fmt.Errorf("%w: device allocation of %d bytes", ErrInvalid, n)
	}
	b, err := anonMap(int(n))
	if err != nil {
		return nil, err
	}
	return &simBuf{s: s, b: b}, nil
}

// OpenIPC maps the shared-memory file named by handle (a base name in
// ShmDir) read-write and shared, so bytes placed there are visible to the
// process that created it.
func (s *Sim) OpenIPC(handle []byte) (DeviceBuffer, error) {
	name := string(handle)
	if name == "" || name == "." || name == ".." || len(name) > 255 || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("%w: shared-memory name %q", ErrBadHandle, name)
	}
	path := filepath.Join(s.o.ShmDir, name)
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHandle, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: stat %s: %w", ErrBadHandle, path, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() <= 0 || fi.Size() != int64(int(fi.Size())) {
		return nil, fmt.Errorf("%w: %s is not a non-empty regular file", ErrBadHandle, path)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap %s: %w", ErrBadHandle, path, err)
	}
	s.ipcOpens.Add(1)
	return &simBuf{s: s, b: b}, nil
}

// Close marks the device closed; later allocations fail with ErrClosed.
func (s *Sim) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// simBuf is simulated device memory (an mmap'd range).
type simBuf struct {
	s *Sim

	mu     sync.RWMutex // guards b against Close while a copy runs
	b      []byte
	closed bool
}

var _ DeviceBuffer = (*simBuf)(nil)

func (b *simBuf) Size() int64 { return int64(len(b.b)) }

func (b *simBuf) CopyToHost(p []byte, off int64) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if off < 0 || int64(len(p)) > int64(len(b.b))-off {
		return fmt.Errorf("%w: read [%d,+%d) of a %d-byte buffer", ErrInvalid, off, len(p), len(b.b))
	}
	copy(p, b.b[off:])
	b.s.d2hCopies.Add(1)
	b.s.d2hBytes.Add(int64(len(p)))
	return nil
}

func (b *simBuf) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return syscall.Munmap(b.b)
}

// NewStream starts a stream goroutine.
func (s *Sim) NewStream() (Stream, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	st := &simStream{s: s, ops: make(chan func(), 64), done: make(chan struct{})}
	go st.run()
	return st, nil
}

type simStream struct {
	s    *Sim
	ops  chan func() // queued operations, run in order by run
	done chan struct{}

	mu     sync.Mutex // guards closed and sends on ops
	closed bool
}

var _ Stream = (*simStream)(nil)

func (st *simStream) run() {
	defer close(st.done)
	for op := range st.ops {
		op()
	}
}

func (st *simStream) enqueue(op func()) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return ErrClosed
	}
	st.ops <- op
	return nil
}

func (st *simStream) CopyHtoDAsync(dst DeviceBuffer, off int64, src []byte) error {
	base, boff := unwrap(dst)
	db, ok := base.(*simBuf)
	if !ok || db.s != st.s {
		return fmt.Errorf("%w: destination is not memory of this sim device", ErrInvalid)
	}
	if err := checkRange(dst.Size(), off, len(src)); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	if !st.s.IsPinned(src) {
		// Pageable source: stage it now, as a driver would, then copy.
		staged := make([]byte, len(src))
		copy(staged, src)
		st.s.bounceCopies.Add(1)
		st.s.bounceBytes.Add(int64(len(src)))
		src = staged
	}
	at := boff + off
	return st.enqueue(func() {
		db.mu.RLock()
		defer db.mu.RUnlock()
		if db.closed {
			return
		}
		copy(db.b[at:], src)
		st.s.h2dCopies.Add(1)
		st.s.h2dBytes.Add(int64(len(src)))
	})
}

func (st *simStream) CopyDtoHAsync(dst []byte, src DeviceBuffer, off int64) error {
	base, boff := unwrap(src)
	sb, ok := base.(*simBuf)
	if !ok || sb.s != st.s {
		return fmt.Errorf("%w: source is not memory of this sim device", ErrInvalid)
	}
	if off < 0 || int64(len(dst)) > src.Size()-off {
		return fmt.Errorf("%w: copy of %d bytes at offset %d of a %d-byte buffer", ErrInvalid, len(dst), off, src.Size())
	}
	if len(dst) == 0 {
		return nil
	}
	at := boff + off
	if !st.s.IsPinned(dst) {
		// Pageable destination: a driver copies into a staging buffer and
		// then into dst, synchronously.
		if err := st.Synchronize(); err != nil {
			return err
		}
		sb.mu.RLock()
		defer sb.mu.RUnlock()
		if sb.closed {
			return ErrClosed
		}
		staged := make([]byte, len(dst))
		copy(staged, sb.b[at:])
		copy(dst, staged)
		st.s.dtohCopies.Add(1)
		st.s.dtohBytes.Add(int64(len(dst)))
		st.s.dtohBounceCopies.Add(1)
		st.s.dtohBounceBytes.Add(int64(len(dst)))
		return nil
	}
	return st.enqueue(func() {
		sb.mu.RLock()
		defer sb.mu.RUnlock()
		if sb.closed {
			return
		}
		copy(dst, sb.b[at:])
		st.s.dtohCopies.Add(1)
		st.s.dtohBytes.Add(int64(len(dst)))
	})
}

func (st *simStream) Record(e Event) error {
	se, ok := e.(*simEvent)
	if !ok {
		return fmt.Errorf("%w: event is not a sim event", ErrInvalid)
	}
	ch := make(chan struct{})
	se.mu.Lock()
	prev := se.cur
	se.cur = ch
	se.mu.Unlock()
	if err := st.enqueue(func() { close(ch) }); err != nil {
		se.mu.Lock()
		se.cur = prev
		se.mu.Unlock()
		return err
	}
	return nil
}

func (st *simStream) Synchronize() error {
	ch := make(chan struct{})
	if err := st.enqueue(func() { close(ch) }); err != nil {
		return err
	}
	<-ch
	return nil
}

func (st *simStream) Destroy() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	st.closed = true
	close(st.ops)
	st.mu.Unlock()
	<-st.done
	return nil
}

// NewEvent returns a sim event.
func (s *Sim) NewEvent() (Event, error) { return &simEvent{}, nil }

type simEvent struct {
	mu  sync.Mutex    // guards cur
	cur chan struct{} // closed when the last recorded point is reached; nil if never recorded
}

var _ Event = (*simEvent)(nil)

func (e *simEvent) Synchronize() error {
	e.mu.Lock()
	ch := e.cur
	e.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return nil
}

func (e *simEvent) Destroy() error { return nil }
