package gdd

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"sync"
)

// PlacerOptions configures a Placer.
type PlacerOptions struct {
	// Device receives the bytes. Required.
	Device Device
	// BlockSize is the size of each pinned block and so of each source read
	// and each host-to-device copy, in bytes (default 8 MiB).
	BlockSize int
	// Blocks is the number of pinned blocks in the pool, shared by all
	// concurrent placements (default 4, at least 2 so fetch and copy
	// overlap). Pinned memory used is BlockSize*Blocks bytes.
	Blocks int
	// Streams is the number of copy streams blocks rotate over (default 2).
	Streams int
	// Logger receives debug lines (nil: discarded).
	Logger *slog.Logger
}

// Result is the outcome of one placement.
type Result struct {
	// Bytes is the number of bytes placed.
	Bytes int64
	// CRC32C is the CRC-32 (Castagnoli polynomial, as in iSCSI and S3's
	// x-amz-checksum-crc32c) of the bytes placed, computed on the pinned
	// blocks before their copies.
	CRC32C uint32
}

// Placer moves file bytes into device memory through a bounded pool of
// pinned blocks. It is safe for concurrent use; concurrent placements share
// the pool and the streams.
type Placer struct {
	dev       Device
	blockSize int
	log       *slog.Logger
	table     *crc32.Table
	streams   []Stream
	free      chan *block // idle pinned blocks
	all       []*block

	mu     sync.Mutex     // guards closed, rr and adds to active
	closed bool           // no new placements
	rr     int            // next stream, round robin
	active sync.WaitGroup // placements in progress
}

// block is one pinned buffer and the event recorded after its copy.
type block struct {
	host HostBuffer
	ev   Event
}

// NewPlacer allocates the pinned pool, streams and events.
func NewPlacer(o PlacerOptions) (*Placer, error) {
	if o.Device == nil {
		return nil, fmt.Errorf("%w: PlacerOptions.Device is nil", ErrInvalid)
	}
	if o.BlockSize == 0 {
		o.BlockSize = 8 << 20
	}
	if o.Blocks == 0 {
		o.Blocks = 4
	}
	if o.Streams == 0 {
		o.Streams = 2
	}
	if o.BlockSize < 4096 {
		return nil, fmt.Errorf("%w: BlockSize %d bytes, want at least 4096", ErrInvalid, o.BlockSize)
	}
	if o.Blocks < 2 {
		return nil, fmt.Errorf("%w: Blocks %d, want at least 2", ErrInvalid, o.Blocks)
	}
	if o.Streams < 1 {
		return nil, fmt.Errorf("%w: Streams %d, want at least 1", ErrInvalid, o.Streams)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Placer{
		dev:       o.Device,
		blockSize: o.BlockSize,
		log:       log,
		table:     crc32.MakeTable(crc32.Castagnoli),
		free:      make(chan *block, o.Blocks),
	}
	for range o.Streams {
		s, err := o.Device.NewStream()
		if err != nil {
			p.release()
			return nil, err
		}
		p.streams = append(p.streams, s)
	}
	for range o.Blocks {
		h, err := o.Device.AllocHost(o.BlockSize)
		if err != nil {
			p.release()
			return nil, err
		}
		ev, err := o.Device.NewEvent()
		if err != nil {
			_ = h.Free()
			p.release()
			return nil, err
		}
		b := &block{host: h, ev: ev}
		p.all = append(p.all, b)
		p.free <- b
	}
	return p, nil
}

// Device returns the device the Placer copies to.
func (p *Placer) Device() Device { return p.dev }

// BlockSize returns the pinned block size in bytes.
func (p *Placer) BlockSize() int { return p.blockSize }

// release frees streams and blocks (no placement may be running).
func (p *Placer) release() {
	for _, s := range p.streams {
		_ = s.Destroy()
	}
	for _, b := range p.all {
		_ = b.ev.Destroy()
		_ = b.host.Free()
	}
	p.streams, p.all = nil, nil
}

// Close waits for running placements and frees the pool. Later Place calls
// fail with ErrClosed.
func (p *Placer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.active.Wait()
	p.release()
	return nil
}

// job is one block of one placement.
type job struct {
	k    int    // block index within the placement
	b    *block // its pinned block
	n    int    // bytes to read into it
	err  error
	done chan struct{} // closed when the read finished
}

// Place reads bytes [off, off+n) of src into dst, starting at dst's byte 0
// (use Slice for an offset). n < 0 means "to the end of src". The bytes land
// in pinned blocks straight from src, are checksummed there and copied by
// the device; Place returns once every copy has completed. Errors:
// ErrInvalid (negative off), ErrPastEOF (the range ends past src.Size()),
// ErrDstTooSmall (n > dst.Size()), io.ErrUnexpectedEOF (src was shorter
// than its Size), ErrClosed, device errors, or src's error. On error the
// destination may hold part of the range.
func (p *Placer) Place(ctx context.Context, src Source, off, n int64, dst DeviceBuffer) (Result, error) {
	size := src.Size()
	if off < 0 {
		return Result{}, fmt.Errorf("%w: offset %d", ErrInvalid, off)
	}
	if off > size {
		return Result{}, fmt.Errorf("%w: offset %d of a %d-byte file", ErrPastEOF, off, size)
	}
	if n < 0 {
		n = size - off
	}
	if n > size-off {
		return Result{}, fmt.Errorf("%w: [%d,+%d) of a %d-byte file", ErrPastEOF, off, n, size)
	}
	if n > dst.Size() {
		return Result{}, fmt.Errorf("%w: %d bytes into a %d-byte buffer", ErrDstTooSmall, n, dst.Size())
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return Result{}, ErrClosed
	}
	p.active.Add(1)
	first := p.rr
	p.rr = (p.rr + 1) % len(p.streams)
	p.mu.Unlock()
	defer p.active.Done()
	if n == 0 {
		return Result{}, nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bs := int64(p.blockSize)
	nb := int((n + bs - 1) / bs)

	// Producer: take blocks in order (so every placement's lowest pending
	// block always has its buffer: no deadlock between placements) and
	// start a read into each.
	order := make(chan *job, nb)
	go func() {
		defer close(order)
		for k := range nb {
			var b *block
			select {
			case b = <-p.free:
			case <-ctx.Done():
				return
			}
			jn := int(min(bs, n-int64(k)*bs))
			j := &job{k: k, b: b, n: jn, done: make(chan struct{})}
			order <- j
			go func() {
				defer close(j.done)
				j.err = readFull(ctx, src, j.b.host.Bytes()[:j.n], off+int64(j.k)*bs)
			}()
		}
	}()

	// Completer: return each block to the pool once its copy is done.
	issued := make(chan *block, nb)
	completed := make(chan error, 1)
	go func() {
		var err error
		for b := range issued {
			if e := b.ev.Synchronize(); e != nil && err == nil {
				err = e
			}
			p.free <- b
		}
		completed <- err
	}()

	// Consumer (here): checksum in file order, then issue the copy.
	crc := uint32(0)
	var placed int64
	var firstErr error
	for j := range order {
		<-j.done
		if firstErr == nil && j.err != nil {
			firstErr = j.err
			cancel()
		}
		if firstErr != nil {
			p.free <- j.b // never copied: free at once
			continue
		}
		data := j.b.host.Bytes()[:j.n]
		crc = crc32.Update(crc, p.table, data)
		s := p.streams[(first+j.k)%len(p.streams)]
		err := s.CopyHtoDAsync(dst, int64(j.k)*bs, data)
		if err == nil {
			err = s.Record(j.b.ev)
			if err != nil {
				_ = s.Synchronize() // the copy may be queued: let it finish before reuse
			}
		}
		if err != nil {
			firstErr = err
			cancel()
			p.free <- j.b
			continue
		}
		issued <- j.b
		placed += int64(j.n)
	}
	close(issued)
	if err := <-completed; err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return Result{}, firstErr
	}
	return Result{Bytes: placed, CRC32C: crc}, nil
}

// readFull fills p from src at off; a source that ends early is
// io.ErrUnexpectedEOF.
func readFull(ctx context.Context, src Source, p []byte, off int64) error {
	for got := 0; got < len(p); {
		m, err := src.ReadAt(ctx, p[got:], off+int64(got))
		got += m
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if got < len(p) && (m == 0 || err != nil) {
			return fmt.Errorf("%w: source ended at byte %d, %d bytes short of its size", io.ErrUnexpectedEOF, off+int64(got), len(p)-got)
		}
	}
	return nil
}

// Drain copies all of device memory src into pinned blocks, block by block
// (device-to-host DMA on the Placer's streams, the copy of block k+1 in
// flight while block k is handed on), computes the CRC32C of the bytes in
// order and, if fn is not nil, calls fn with each block in order. A block
// passed to fn is valid only during the call. Each byte crosses into host
// memory once. Returns the CRC32C; errors of the device, of fn (returned
// as is), ErrClosed, or ctx's.
func (p *Placer) Drain(ctx context.Context, src DeviceBuffer, fn func(b []byte) error) (uint32, error) {
	n := src.Size()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, ErrClosed
	}
	p.active.Add(1)
	first := p.rr
	p.rr = (p.rr + 1) % len(p.streams)
	p.mu.Unlock()
	defer p.active.Done()
	if n == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bs := int64(p.blockSize)
	nb := int((n + bs - 1) / bs)

	// Producer: take blocks in order and enqueue each copy with its event.
	type djob struct {
		b   *block
		n   int
		err error
	}
	order := make(chan djob, nb)
	go func() {
		defer close(order)
		for k := range nb {
			var b *block
			select {
			case b = <-p.free:
			case <-ctx.Done():
				return
			}
			jn := int(min(bs, n-int64(k)*bs))
			s := p.streams[(first+k)%len(p.streams)]
			err := s.CopyDtoHAsync(b.host.Bytes()[:jn], src, int64(k)*bs)
			if err == nil {
				err = s.Record(b.ev)
			}
			if err != nil {
				_ = s.Synchronize() // the copy may be queued: let it finish before reuse
			}
			order <- djob{b: b, n: jn, err: err}
			if err != nil {
				return
			}
		}
	}()

	// Consumer: wait for each copy, checksum, hand on, free the block.
	crc := uint32(0)
	var firstErr error
	for j := range order {
		err := j.err
		if err == nil && firstErr == nil {
			err = j.b.ev.Synchronize()
		}
		if err == nil && firstErr == nil {
			data := j.b.host.Bytes()[:j.n]
			crc = crc32.Update(crc, p.table, data)
			if fn != nil {
				err = fn(data)
			}
		}
		if err != nil && firstErr == nil {
			firstErr = err
			cancel()
		}
		if firstErr != nil && j.err == nil {
			_ = j.b.ev.Synchronize() // never hand a block back with a copy pending
		}
		p.free <- j.b
	}
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return crc, nil
}
