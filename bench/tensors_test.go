package main

import (
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/os2g/os2g/gdd/safetensors"
)

// TestWriteCheckpoint: the tensors workload's generated checkpoint is a
// valid safetensors file of about the size asked for, and the CRC-32C it
// records for each tensor is that of the tensor's bytes (so the gdd load
// it is measured with checks real checksums).
func TestWriteCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	const size = 3<<20 + 12
	if err := writeCheckpoint(path, size); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := safetensors.HeaderLen(b, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.Parse(b[8:8+n], int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if h.DataSize < size || h.DataSize > size+16<<10 {
		t.Errorf("data of %d bytes for a %d-byte checkpoint", h.DataSize, size)
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	for _, x := range h.Tensors {
		want, ok, err := h.CRC(x.Name)
		got := crc32.Checksum(b[h.DataStart+x.Begin:h.DataStart+x.End], table)
		if !ok || err != nil || got != want {
			t.Errorf("tensor %s: recorded CRC %08x (%v %v), bytes have %08x", x.Name, want, ok, err, got)
		}
	}
}

func TestTensorsMedian(t *testing.T) {
	rs := []tensorsResult{{Bytes: 1 << 30, Seconds: 1, CPU: 0.5}, {Bytes: 1 << 30, Seconds: 4, CPU: 0.1}, {Bytes: 1 << 30, Seconds: 2, CPU: 0.2}}
	m := medianOf(rs)
	if got := fmt.Sprintf("%.2f %.2f", m.rate, m.cpu); got != "0.50 0.20" {
		t.Errorf("median %s, want 0.50 GiB/s and 0.20 s/GiB", got)
	}
}
