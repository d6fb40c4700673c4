package gdd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/os2g/os2g/gdd/safetensors"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

func TestS3PartSize(t *testing.T) {
	for _, tc := range []struct{ size, want int64 }{
		{0, 8 << 20},
		{80000 << 20, 8 << 20},
		{80000<<20 + 1, 9 << 20},
		{1 << 40, 105 << 20}, // 1 TiB / 10,000 = 104.9 MiB
	} {
		if got := s3PartSize(tc.size); got != tc.want || (tc.size+got-1)/got > 10000 {
			t.Errorf("s3PartSize(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

// TestS3UploadPartsAnyOrder: against a real S3 server (versitygw), parts
// sent last-to-first make the object in part-number order; a one-part
// object is one Put; an abort or an incomplete Complete leaves no object
// and no multipart upload.
func TestS3UploadPartsAnyOrder(t *testing.T) {
	store := objtest.StartVersity(t)
	ctx := ctx30(t)
	p1, p2, p3 := randBytes(1, 5<<20), randBytes(2, 5<<20), randBytes(3, 1000)
	u, err := StoreUpload(ctx, store, "ckpt/a.bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		num  int
		data []byte
	}{{3, p3}, {2, p2}, {1, p1}} {
		if err := u.WritePart(ctx, p.num, p.data); err != nil {
			t.Fatalf("part %d: %v", p.num, err)
		}
	}
	size := int64(len(p1) + len(p2) + len(p3))
	if info, err := u.Complete(ctx, 3, size); err != nil || info.Size != size {
		t.Fatalf("Complete: %+v %v", info, err)
	}
	got := make([]byte, size)
	if n, err := store.GetRange(ctx, "ckpt/a.bin", 0, got, ""); err != nil || int64(n) != size {
		t.Fatalf("read back: %d %v", n, err)
	}
	if !bytes.Equal(got, append(append(append([]byte{}, p1...), p2...), p3...)) {
		t.Error("object is not parts 1, 2, 3 in order")
	}

	u, err = StoreUpload(ctx, store, "ckpt/small.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Put(ctx, p3); err != nil {
		t.Fatal(err)
	}
	if info, err := store.Stat(ctx, "ckpt/small.bin"); err != nil || info.Size != int64(len(p3)) {
		t.Fatalf("small object: %+v %v", info, err)
	}

	for _, complete := range []bool{false, true} {
		u, err = StoreUpload(ctx, store, "ckpt/gone.bin")
		if err != nil {
			t.Fatal(err)
		}
		if err := u.WritePart(ctx, 2, p3); err != nil {
			t.Fatal(err)
		}
		if complete {
			if _, err := u.Complete(ctx, 2, int64(len(p3))); err == nil {
				t.Fatal("Complete without part 1 succeeded")
			}
		} else if err := u.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Stat(ctx, "ckpt/gone.bin"); !errors.Is(err, objclient.ErrNotFound) {
			t.Errorf("object after a failed upload (complete %v): %v", complete, err)
		}
		if ids, err := store.ListUploads(ctx, "ckpt/"); err != nil || len(ids) != 0 {
			t.Errorf("multipart uploads left (complete %v): %v %v", complete, ids, err)
		}
	}
}

// TestSafetensorsSaveToS3: a save of about 20 MiB (three 8 MiB parts) from
// the sim device to a real S3 server reads each byte from the device once
// and gives an object that parses with the right bytes and CRCs.
func TestSafetensorsSaveToS3(t *testing.T) {
	store := objtest.StartVersity(t)
	e := startSimWith(t, 4, func(o *ServeOptions, e *simEnv) {
		o.Create = func(ctx context.Context, path string) (Upload, error) { return StoreUpload(ctx, store, path) }
	})
	w := randBytes(11, 20<<20)
	e.shm(t, "src", len(w))
	if err := os.WriteFile(filepath.Join(e.shmDir, "src"), w, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx30(t), e.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := e.sim.Stats()
	r, err := c.Do(ctx30(t), Request{Op: OpSave, Path: "ckpt/big.safetensors", Tensors: []SaveTensor{
		{Name: "w", DType: "U8", Shape: []int64{int64(len(w))}, Src: Dest{Kind: "sim", Handle: []byte("src"), Size: int64(len(w))}}}})
	if err != nil || r.Error != nil {
		t.Fatalf("save: %v %+v", err, r.Error)
	}
	if d := e.sim.Stats().DtoHBytes - before.DtoHBytes; d != int64(len(w)) {
		t.Errorf("%d bytes device-to-host, want %d", d, len(w))
	}
	ctx := ctx30(t)
	info, err := store.Stat(ctx, "ckpt/big.safetensors")
	if err != nil || info.Size != r.Bytes {
		t.Fatalf("object %+v %v; reply %d bytes", info, err, r.Bytes)
	}
	obj := make([]byte, info.Size)
	if _, err := store.GetRange(ctx, "ckpt/big.safetensors", 0, obj, ""); err != nil {
		t.Fatal(err)
	}
	n, err := safetensors.HeaderLen(obj, info.Size)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.Parse(obj[8:8+n], info.Size)
	if err != nil {
		t.Fatal(err)
	}
	if crc, ok, _ := h.CRC("w"); !ok || crc != castagnoli(w) {
		t.Errorf("recorded CRC %08x (%v), want %08x", crc, ok, castagnoli(w))
	}
	if !bytes.Equal(obj[h.DataStart:], w) {
		t.Error("saved bytes differ")
	}
}
