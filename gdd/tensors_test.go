package gdd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/os2g/os2g/gdd/safetensors"
	"github.com/os2g/os2g/objclient"
)

// checkpoint builds a safetensors file of three tensors with os2g's CRC
// metadata, returning the file and each tensor's bytes by name.
func checkpoint(t *testing.T) ([]byte, map[string][]byte) {
	t.Helper()
	specs := []safetensors.Spec{{Name: "w", DType: "F32", Shape: []int64{300, 100}}, {Name: "b", DType: "F16", Shape: []int64{100}}, {Name: "step", DType: "I64", Shape: nil}}
	layout, size, err := safetensors.Layout(specs)
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(5, int(size))
	meta := map[string]string{"format": "pt"}
	byName := map[string][]byte{}
	for _, x := range layout {
		byName[x.Name] = data[x.Begin:x.End]
		meta[safetensors.CRCKey(x.Name)] = fmt.Sprintf("%08x", castagnoli(data[x.Begin:x.End]))
	}
	prefix, err := safetensors.Encode(layout, meta)
	if err != nil {
		t.Fatal(err)
	}
	return append(prefix, data...), byName
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// loadBatch asks for the header of key, then places every tensor into one
// shm file (each at its data offset) with one place_batch.
func loadBatch(t *testing.T, e *simEnv, c *Client, key, shm string) (*safetensors.Header, *Reply, error) {
	t.Helper()
	ctx := ctx30(t)
	r, err := c.Do(ctx, Request{Op: OpHeader, Path: key})
	if err != nil {
		t.Fatal(err)
	}
	if r.Error != nil {
		return nil, r, nil
	}
	h := r.Header
	e.shm(t, shm, int(max(h.DataSize, 1)))
	var items []BatchItem
	for _, x := range h.Tensors {
		items = append(items, BatchItem{Offset: h.DataStart + x.Begin, Length: x.Size(),
			Dst: Dest{Kind: "sim", Handle: []byte(shm), Offset: x.Begin, Size: x.Size()}})
	}
	r, err = c.Do(ctx, Request{Op: OpPlaceBatch, Path: key, Items: items, Safetensors: true})
	return h, r, err
}

func TestSafetensorsLoadBatch(t *testing.T) {
	e := startSim(t, 4)
	file, tensors := checkpoint(t)
	e.mem.PutObject("ckpt/model.safetensors", file, "", nil)
	c, err := Dial(ctx30(t), e.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := e.sim.Stats()
	h, r, err := loadBatch(t, e, c, "ckpt/model.safetensors", "dst")
	if err != nil || r.Error != nil {
		t.Fatalf("place_batch: %v %v", err, r.Error)
	}
	if len(h.Tensors) != 3 || len(r.Items) != 3 {
		t.Fatalf("%d tensors, %d results", len(h.Tensors), len(r.Items))
	}
	got, _ := os.ReadFile(filepath.Join(e.shmDir, "dst"))
	for i, x := range h.Tensors {
		if !bytes.Equal(got[x.Begin:x.End], tensors[x.Name]) {
			t.Errorf("tensor %s: wrong bytes", x.Name)
		}
		if r.Items[i].Bytes != x.Size() || r.Items[i].CRC32C != castagnoli(tensors[x.Name]) {
			t.Errorf("tensor %s: result %+v", x.Name, r.Items[i])
		}
	}
	// One host crossing per tensor byte: every byte copied to the device
	// once from pinned memory, no bounce.
	s := e.sim.Stats()
	if d := s.BytesCopied - before.BytesCopied; d != h.DataSize {
		t.Errorf("%d bytes copied to the device, want %d", d, h.DataSize)
	}
	if s.HostBounceCopies != before.HostBounceCopies {
		t.Errorf("%d bounce copies", s.HostBounceCopies-before.HostBounceCopies)
	}
	// An item that is not one tensor's bytes is refused before anything is placed.
	r, err = c.Do(ctx30(t), Request{Op: OpPlaceBatch, Path: "ckpt/model.safetensors", Safetensors: true,
		Items: []BatchItem{{Offset: h.DataStart + 1, Length: 4, Dst: Dest{Kind: "sim", Handle: []byte("dst"), Size: 4}}}})
	if err != nil || r.Error == nil || r.Error.Code != CodeBadRequest {
		t.Errorf("misaligned item: %v %+v; want bad_request", err, r.Error)
	}
}

func TestSafetensorsFlippedByteDetected(t *testing.T) {
	e := startSim(t, 4)
	file, _ := checkpoint(t)
	n := binary.LittleEndian.Uint64(file)
	file[8+int(n)+1234] ^= 0x10 // inside the first tensor's data
	e.mem.PutObject("bad.safetensors", file, "", nil)
	c, err := Dial(ctx30(t), e.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, r, err := loadBatch(t, e, c, "bad.safetensors", "dst")
	if err != nil {
		t.Fatal(err)
	}
	if r.Error == nil || r.Error.Code != CodeChecksum || !errors.Is(r.Error, ErrChecksum) {
		t.Fatalf("flipped byte: reply error %+v; want code checksum", r.Error)
	}
	if !bytes.Contains([]byte(r.Error.Message), []byte(`tensor "w"`)) {
		t.Errorf("message %q does not name the tensor", r.Error.Message)
	}
}

func TestSafetensorsMalformedPlacesNothing(t *testing.T) {
	e := startSim(t, 4)
	file, _ := checkpoint(t)
	n := binary.LittleEndian.Uint64(file)
	// Make the first tensor's end offset run past the data.
	js := bytes.Replace(file[8:8+n], []byte(`"data_offsets":[8,120008]`), []byte(`"data_offsets":[8,920008]`), 1)
	if bytes.Equal(js, file[8:8+n]) {
		t.Fatal("test header does not hold the expected offsets")
	}
	bad := append(append(append([]byte{}, file[:8]...), js...), file[8+n:]...)
	e.mem.PutObject("bad.safetensors", bad, "", nil)
	e.shm(t, "dst", 200000)
	c, err := Dial(ctx30(t), e.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Do(ctx30(t), Request{Op: OpHeader, Path: "bad.safetensors"})
	if err != nil || r.Error == nil || r.Error.Code != CodeMalformed || !errors.Is(r.Error, safetensors.ErrMalformed) {
		t.Fatalf("header of a malformed file: %v %+v; want code malformed", err, r.Error)
	}
	before := e.sim.Stats()
	r, err = c.Do(ctx30(t), Request{Op: OpPlaceBatch, Path: "bad.safetensors", Safetensors: true,
		Items: []BatchItem{{Offset: int64(8 + n), Length: 1000, Dst: Dest{Kind: "sim", Handle: []byte("dst"), Size: 1000}}}})
	if err != nil || r.Error == nil || r.Error.Code != CodeMalformed {
		t.Fatalf("place_batch of a malformed file: %v %+v", err, r.Error)
	}
	if s := e.sim.Stats(); s.HostToDeviceCopies != before.HostToDeviceCopies {
		t.Errorf("%d copies to the device for a malformed file", s.HostToDeviceCopies-before.HostToDeviceCopies)
	}
	got, _ := os.ReadFile(filepath.Join(e.shmDir, "dst"))
	if !bytes.Equal(got, make([]byte, 200000)) {
		t.Error("destination written for a malformed file")
	}
}

// failingWriter fails its Write once more than limit bytes were written.
type failingWriter struct {
	objclient.Writer
	limit   int64
	n       int64
	aborted *atomic.Bool
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if w.n > w.limit {
		return 0, errors.New("injected upload failure")
	}
	return w.Writer.Write(p)
}

func (w *failingWriter) Abort(ctx context.Context) error {
	w.aborted.Store(true)
	return w.Writer.Abort(ctx)
}

// partSpy wraps an Upload: it fails WritePart of part number failPart
// (0: none), and records the part numbers in the order written and whether
// Abort was called.
type partSpy struct {
	Upload
	failPart int
	aborted  *atomic.Bool
	order    *partOrder
}

// partOrder is the order of the parts a partSpy saw.
type partOrder struct {
	mu  sync.Mutex
	num []int // GUARDED_BY(mu)
}

func (o *partOrder) get() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.num...)
}

func (u *partSpy) WritePart(ctx context.Context, num int, p []byte) error {
	u.order.mu.Lock()
	u.order.num = append(u.order.num, num)
	u.order.mu.Unlock()
	if num == u.failPart {
		return errors.New("injected part failure")
	}
	return u.Upload.WritePart(ctx, num, p)
}

func (u *partSpy) Abort(ctx context.Context) error {
	u.aborted.Store(true)
	return u.Upload.Abort(ctx)
}

// TestSafetensorsSaveRoundTrip saves three tensors (one empty) at part
// sizes that make one part (a single Put), several parts, and a header
// spanning several parts; checks the bytes, the recorded CRCs, one
// device-to-host crossing per byte, part 1 sent last; then failures.
func TestSafetensorsSaveRoundTrip(t *testing.T) {
	var failAfter, failPart, partSize atomic.Int64
	failAfter.Store(-1)
	var aborted atomic.Bool
	var parts partOrder
	e := startSimWith(t, 4, func(o *ServeOptions, e *simEnv) {
		o.Create = func(ctx context.Context, path string) (Upload, error) {
			w, err := e.mem.Put(ctx, path, objclient.PutOptions{})
			if err != nil {
				return nil, err
			}
			if failAfter.Load() >= 0 {
				w = &failingWriter{Writer: w, limit: failAfter.Load(), aborted: &aborted}
			}
			parts.mu.Lock()
			parts.num = nil
			parts.mu.Unlock()
			return &partSpy{Upload: SequentialUpload(w, partSize.Load()), failPart: int(failPart.Load()), aborted: &aborted, order: &parts}, nil
		}
	})
	// The "device memory" of the tensors: one shm file, back to back.
	w, b := randBytes(9, 4*300*100), randBytes(10, 2*100)
	e.shm(t, "src", len(w)+len(b))
	if err := os.WriteFile(filepath.Join(e.shmDir, "src"), append(append([]byte{}, w...), b...), 0o600); err != nil {
		t.Fatal(err)
	}
	req := Request{Op: OpSave, Path: "out/ckpt.safetensors", Metadata: map[string]string{"step": "100"}, Tensors: []SaveTensor{
		{Name: "b", DType: "F16", Shape: []int64{100}, Src: Dest{Kind: "sim", Handle: []byte("src"), Offset: int64(len(w)), Size: int64(len(b))}},
		{Name: "w", DType: "F32", Shape: []int64{300, 100}, Src: Dest{Kind: "sim", Handle: []byte("src"), Size: int64(len(w))}},
		{Name: "none", DType: "U8", Shape: []int64{0}, Src: Dest{Kind: "sim", Handle: []byte("src"), Size: 0}},
	}}
	c, err := Dial(ctx30(t), e.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		partSize int64
		parts    int // 1: one Put, no part written
	}{{1 << 20, 1}, {16 << 10, 8}, {64, 0}} {
		partSize.Store(tc.partSize)
		before := e.sim.Stats()
		r, err := c.Do(ctx30(t), req)
		if err != nil || r.Error != nil {
			t.Fatalf("save, %d-byte parts: %v %+v", tc.partSize, err, r.Error)
		}
		info, err := e.mem.Stat(context.Background(), "out/ckpt.safetensors")
		if err != nil || r.Bytes != info.Size {
			t.Fatalf("saved object: %+v %v; reply %d bytes", info, err, r.Bytes)
		}
		nparts := int((info.Size + tc.partSize - 1) / tc.partSize)
		order := parts.get()
		switch {
		case tc.parts == 1 && len(order) != 0:
			t.Errorf("%d-byte parts: parts %v written for a one-part object", tc.partSize, order)
		case tc.parts > 1 && nparts != tc.parts:
			t.Errorf("%d-byte parts: %d parts, want %d", tc.partSize, nparts, tc.parts)
		case nparts > 1 && (len(order) != nparts || order[len(order)-1] != 1):
			t.Errorf("%d-byte parts: parts written in order %v; want all %d, part 1 last", tc.partSize, order, nparts)
		}
		obj := make([]byte, info.Size)
		if _, err := e.mem.GetRange(context.Background(), "out/ckpt.safetensors", 0, obj, ""); err != nil {
			t.Fatal(err)
		}
		n, err := safetensors.HeaderLen(obj, int64(len(obj)))
		if err != nil {
			t.Fatal(err)
		}
		if tc.parts == 0 && 8+n <= 2*tc.partSize {
			t.Fatalf("%d-byte header does not span 3 parts of %d bytes", 8+n, tc.partSize)
		}
		h, err := safetensors.Parse(obj[8:8+n], int64(len(obj)))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]byte{"w": w, "b": b, "none": {}}
		for _, x := range h.Tensors {
			if !bytes.Equal(obj[h.DataStart+x.Begin:h.DataStart+x.End], want[x.Name]) {
				t.Errorf("tensor %s: wrong bytes saved", x.Name)
			}
			if c, ok, _ := h.CRC(x.Name); !ok || c != castagnoli(want[x.Name]) {
				t.Errorf("tensor %s: recorded CRC %08x (%v)", x.Name, c, ok)
			}
		}
		if len(h.Tensors) != 3 || h.Metadata["step"] != "100" {
			t.Errorf("%d tensors, metadata %v", len(h.Tensors), h.Metadata)
		}
		// Device-to-host: one pass, each byte crossing once through pinned
		// blocks, no bounce.
		s := e.sim.Stats()
		if d := s.DtoHBytes - before.DtoHBytes; d != int64(len(w)+len(b)) {
			t.Errorf("%d-byte parts: %d bytes device-to-host, want %d (one crossing per byte)", tc.partSize, d, len(w)+len(b))
		}
		if s.DtoHBounceCopies != before.DtoHBounceCopies {
			t.Errorf("%d device-to-host bounce copies", s.DtoHBounceCopies-before.DtoHBounceCopies)
		}
	}
	// Loading it back through place_batch gives the same bytes.
	want := map[string][]byte{"w": w, "b": b, "none": {}}
	h2, r2, err := loadBatch(t, e, c, "out/ckpt.safetensors", "back")
	if err != nil || r2.Error != nil {
		t.Fatalf("load of the saved file: %v %+v", err, r2.Error)
	}
	back, _ := os.ReadFile(filepath.Join(e.shmDir, "back"))
	for _, x := range h2.Tensors {
		if !bytes.Equal(back[x.Begin:x.End], want[x.Name]) {
			t.Errorf("tensor %s: round trip differs", x.Name)
		}
	}

	// A part in flight fails: an error to the caller, the upload aborted,
	// no object.
	partSize.Store(16 << 10)
	failPart.Store(3)
	req.Path = "out/failed-part.safetensors"
	r, err := c.Do(ctx30(t), req)
	if err != nil || r.Error == nil || !strings.Contains(r.Error.Message, "injected part failure") {
		t.Fatalf("save with a failing part: %v %+v; want an error reply naming it", err, r.Error)
	}
	if !aborted.Load() {
		t.Error("the upload with a failed part was not aborted")
	}
	if _, err := e.mem.Stat(context.Background(), req.Path); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("object after a failed part: %v; want ErrNotFound", err)
	}
	failPart.Store(0)
	aborted.Store(false)

	// A failure midway: an error to the caller, the upload aborted, no object.
	failAfter.Store(50000)
	req.Path = "out/failed.safetensors"
	r, err = c.Do(ctx30(t), req)
	if err != nil || r.Error == nil {
		t.Fatalf("save with a failing upload: %v %+v; want an error reply", err, r.Error)
	}
	if !aborted.Load() {
		t.Error("the failed upload was not aborted")
	}
	if _, err := e.mem.Stat(context.Background(), "out/failed.safetensors"); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("object after a failed save: %v; want ErrNotFound", err)
	}

	// Bad requests are refused before any upload starts.
	failAfter.Store(-1)
	for _, bad := range []Request{
		{Op: OpSave, Path: "out/x", Tensors: []SaveTensor{{Name: "w", DType: "F32", Shape: []int64{7}, Src: Dest{Kind: "sim", Handle: []byte("src"), Size: 4}}}},
		{Op: OpSave, Path: "out/x", Tensors: []SaveTensor{{Name: "w", DType: "Q4", Shape: []int64{1}, Src: Dest{Kind: "sim", Handle: []byte("src"), Size: 1}}}},
		{Op: OpSave, Path: "out/x", Tensors: []SaveTensor{{Name: "w", DType: "U8", Shape: []int64{1}, Src: Dest{Kind: "sim", Handle: []byte("absent"), Size: 1}}}},
		{Op: OpSave, Path: "out/x", Metadata: map[string]string{"crc32c:w": "0"}, Tensors: []SaveTensor{{Name: "w", DType: "U8", Shape: []int64{1}, Src: Dest{Kind: "sim", Handle: []byte("src"), Size: 1}}}},
	} {
		r, err := c.Do(ctx30(t), bad)
		if err != nil || r.Error == nil {
			t.Errorf("bad save %+v: %v %+v; want an error", bad.Tensors, err, r.Error)
		}
	}
	if _, err := e.mem.Stat(context.Background(), "out/x"); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("object after refused saves: %v", err)
	}
}

// TestDrainErrorsReturnBlocks: an error from fn midway, or a cancelled
// context, ends Drain with that error and every pinned block back in the
// pool (a later full Drain, which needs them all, completes).
func TestDrainErrorsReturnBlocks(t *testing.T) {
	sim, err := NewSim(SimOptions{ShmDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlacer(PlacerOptions{Device: sim, BlockSize: 4096, Blocks: 2, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 10*4096 + 3
	buf, err := sim.AllocDevice(n)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	data := randBytes(3, n)
	if _, err := p.Place(ctx30(t), ReaderAtSource(bytes.NewReader(data), n), 0, -1, buf); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	calls := 0
	_, err = p.Drain(ctx30(t), buf, func(b []byte) error {
		calls++
		if calls == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 3 {
		t.Fatalf("Drain with fn failing at block 3: %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Drain(ctx, buf, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain with a cancelled context: %v", err)
	}
	var got []byte
	crc, err := p.Drain(ctx30(t), buf, func(b []byte) error { got = append(got, b...); return nil })
	if err != nil || !bytes.Equal(got, data) || crc != castagnoli(data) {
		t.Fatalf("Drain after errors: %v, %d bytes, crc %08x", err, len(got), crc)
	}
	if s := sim.Stats(); s.DtoHBounceCopies != 0 {
		t.Errorf("%d device-to-host bounces into pinned blocks", s.DtoHBounceCopies)
	}
}
