package gdd

import (
	"bytes"
	"testing"
)

// TestCUDAFakeDriverDrain: Placer.Drain on the CUDA backend reads device
// memory with one cuMemcpyDtoHAsync_v2 per pinned block (the fake driver
// counts them) and hands back the bytes and their CRC32C in order.
func TestCUDAFakeDriverDrain(t *testing.T) {
	lib := buildFakeDriver(t, false)
	d, err := OpenCUDA(CUDAOptions{Library: lib})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const n = 5*4096 + 77
	data := randBytes(12, n)
	buf, err := d.AllocDevice(n + 64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	p, err := NewPlacer(PlacerOptions{Device: d, BlockSize: 4096, Blocks: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	view, err := Slice(buf, 64, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Place(testCtx(t), ReaderAtSource(bytes.NewReader(data), n), 0, -1, view); err != nil {
		t.Fatal(err)
	}
	d2h := fakeCounter(t, lib, "fake_d2h_calls")
	d2hBytes := fakeCounter(t, lib, "fake_d2h_bytes")
	calls, nbytes := *d2h, *d2hBytes
	var got []byte
	crc, err := p.Drain(testCtx(t), view, func(b []byte) error {
		got = append(got, b...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || crc != castagnoli(data) {
		t.Fatalf("drained %d bytes crc %08x; want the %d placed, %08x", len(got), crc, n, castagnoli(data))
	}
	if c, b := *d2h-calls, *d2hBytes-nbytes; c != 6 || b != n {
		t.Errorf("%d cuMemcpyDtoHAsync calls of %d bytes; want 6 (one per 4096-byte block) of %d", c, b, n)
	}
}
