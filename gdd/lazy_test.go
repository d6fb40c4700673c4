package gdd

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// lazyDev is a Sim whose copies run as late as the Stream/Event contract
// allows: only when an event recorded after them, or the stream, is
// synchronised. A Placer that refilled a pinned block before waiting for
// its copy would place the wrong bytes.
type lazyDev struct{ *Sim }

func (d lazyDev) NewStream() (Stream, error) {
	inner, err := d.Sim.NewStream()
	if err != nil {
		return nil, err
	}
	return &lazyStream{inner: inner}, nil
}

func (d lazyDev) NewEvent() (Event, error) { return &lazyEvent{}, nil }

type lazyStream struct {
	inner Stream

	mu   sync.Mutex // guards ops, done
	ops  []func() error
	done int // ops[:done] have run
}

func (s *lazyStream) CopyHtoDAsync(dst DeviceBuffer, off int64, src []byte) error {
	if err := checkRange(dst.Size(), off, len(src)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, func() error {
		if err := s.inner.CopyHtoDAsync(dst, off, src); err != nil {
			return err
		}
		return s.inner.Synchronize()
	})
	return nil
}

func (s *lazyStream) CopyDtoHAsync(dst []byte, src DeviceBuffer, off int64) error {
	if off < 0 || int64(len(dst)) > src.Size()-off {
		return fmt.Errorf("%w: copy of %d bytes at %d of %d", ErrInvalid, len(dst), off, src.Size())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, func() error {
		if err := s.inner.CopyDtoHAsync(dst, src, off); err != nil {
			return err
		}
		return s.inner.Synchronize()
	})
	return nil
}

func (s *lazyStream) flush(upto int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; s.done < upto; s.done++ {
		if err := s.ops[s.done](); err != nil {
			return err
		}
	}
	return nil
}

func (s *lazyStream) Record(e Event) error {
	le := e.(*lazyEvent)
	s.mu.Lock()
	n := len(s.ops)
	s.mu.Unlock()
	le.mu.Lock()
	le.s, le.upto = s, n
	le.mu.Unlock()
	return nil
}

func (s *lazyStream) Synchronize() error {
	s.mu.Lock()
	n := len(s.ops)
	s.mu.Unlock()
	return s.flush(n)
}

func (s *lazyStream) Destroy() error {
	if err := s.Synchronize(); err != nil {
		return err
	}
	return s.inner.Destroy()
}

type lazyEvent struct {
	mu   sync.Mutex // guards s, upto
	s    *lazyStream
	upto int
}

func (e *lazyEvent) Synchronize() error {
	e.mu.Lock()
	s, upto := e.s, e.upto
	e.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.flush(upto)
}

func (e *lazyEvent) Destroy() error { return nil }

func TestPlacerWaitsBeforeReusingBlocks(t *testing.T) {
	sim, _ := NewSim(SimOptions{})
	p, err := NewPlacer(PlacerOptions{Device: lazyDev{sim}, BlockSize: 4096, Blocks: 2, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	data := randBytes(8, 10*4096+1)
	dst, _ := sim.AllocDevice(int64(len(data)))
	defer dst.Close()
	res, err := p.Place(testCtx(t), ReaderAtSource(bytes.NewReader(data), int64(len(data))), 0, -1, dst)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := dst.CopyToHost(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || res.CRC32C != castagnoli(data) {
		t.Fatal("bytes placed through a lazily copying device differ: a pinned block was reused before its copy ran")
	}
}
