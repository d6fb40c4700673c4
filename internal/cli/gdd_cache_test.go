package cli

import (
	"bytes"
	"context"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/os2g/os2g/fusefs"
	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/objclient/objtest"
	"github.com/os2g/os2g/prefetch"
)

// TestGDDPlacementReadsThroughMountCache (issue 12 item 6): a file read
// through the mount and then placed by the gdd service (sim device) costs
// no second GET, and placing it again costs none either: the placement
// reads through the mount's prefetch cache.
func TestGDDPlacementReadsThroughMountCache(t *testing.T) {
	if os.Geteuid() != 0 {
		objtest.SkipOrFail(t, "FUSE test: not root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		objtest.SkipOrFail(t, "FUSE test: no /dev/fuse")
	}
	mem := objtest.NewMem()
	payload := make([]byte, 3<<20+777) // several 1 MiB parts and a tail
	for i := range payload {
		payload[i] = byte(i*7 + i>>11)
	}
	mem.PutObject("p/w/model.bin", payload, "", nil)
	store := objtest.NewCounting(mem)
	pm, err := prefetch.New(prefetch.Options{Getter: store, MaxMemory: 64 << 20, PartSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	mp := t.TempDir()
	srv, err := fusefs.Mount(mp, fusefs.Options{Store: store, Prefix: "p/", Prefetch: pm, ReadOnly: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	defer func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()

	path := filepath.Join(mp, "w", "model.bin")
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("read through the mount: %d bytes, %v", len(got), err)
	}
	getsAfterRead := store.Count("GetRange")
	if getsAfterRead == 0 {
		t.Fatal("the read through the mount made no GET")
	}

	dir := t.TempDir()
	shm := filepath.Join(dir, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shm, "dst"), make([]byte, len(payload)), 0o600); err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "gddc") // socket paths are limited to ~108 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	g := &gddFlags{socket: filepath.Join(sockDir, "gdd.sock"), device: "sim", simDir: shm}
	stop, err := startGDD(g, store, pm, mp, "p/", true, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := gdd.Dial(ctx, g.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli))
	for i := range 2 {
		res, err := c.Place(ctx, path, 0, -1, gdd.Dest{Kind: "sim", Handle: []byte("dst"), Size: int64(len(payload))})
		if err != nil {
			t.Fatalf("place %d: %v", i, err)
		}
		if res.Bytes != int64(len(payload)) || res.CRC32C != want {
			t.Errorf("place %d: %d bytes crc %08x; want %d, %08x", i, res.Bytes, res.CRC32C, len(payload), want)
		}
		if n := store.Count("GetRange"); n != getsAfterRead {
			t.Errorf("after placement %d: %d GETs; the read through the mount made %d, a placement must add none", i, n, getsAfterRead)
		}
	}
	placed, err := os.ReadFile(filepath.Join(shm, "dst"))
	if err != nil || !bytes.Equal(placed, payload) {
		t.Errorf("destination holds different bytes (%v)", err)
	}
	// The mount is read-only: a save is refused, and nothing is written.
	r, err := c.Do(ctx, gdd.Request{Op: gdd.OpSave, Path: filepath.Join(mp, "w", "ckpt.safetensors"), Tensors: []gdd.SaveTensor{
		{Name: "x", DType: "U8", Shape: []int64{16}, Src: gdd.Dest{Kind: "sim", Handle: []byte("dst"), Size: 16}}}})
	if err != nil || r.Error == nil || !strings.Contains(r.Error.Message, "read-only") {
		t.Errorf("save on a read-only mount: %v %+v; want an error saying read-only", err, r.Error)
	}
	if _, err := mem.Stat(ctx, "p/w/ckpt.safetensors"); err == nil {
		t.Error("a save on a read-only mount wrote an object")
	}
}

// TestGDDSaveThroughDaemon: a save_safetensors request to the mount's gdd
// service writes a safetensors object under the mount's prefix, replacing
// the older object.
func TestGDDSaveThroughDaemon(t *testing.T) {
	mem := objtest.NewMem()
	mem.PutObject("p/ckpt/a.safetensors", []byte("stale"), "", nil)
	pm, err := prefetch.New(prefetch.Options{Getter: mem, MaxMemory: 16 << 20, PartSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	dir := t.TempDir()
	shm := filepath.Join(dir, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 1000)
	if err := os.WriteFile(filepath.Join(shm, "t"), src, 0o600); err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "gdds")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	g := &gddFlags{socket: filepath.Join(sockDir, "gdd.sock"), device: "sim", simDir: shm}
	stop, err := startGDD(g, mem, pm, "/mnt/s3", "p/", false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := gdd.Dial(ctx, g.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Do(ctx, gdd.Request{Op: gdd.OpSave, Path: "/mnt/s3/ckpt/a.safetensors", Tensors: []gdd.SaveTensor{
		{Name: "w", DType: "I64", Shape: []int64{1000}, Src: gdd.Dest{Kind: "sim", Handle: []byte("t"), Size: int64(len(src))}}}})
	if err != nil || r.Error != nil {
		t.Fatalf("save: %v %+v", err, r.Error)
	}
	info, err := mem.Stat(ctx, "p/ckpt/a.safetensors")
	if err != nil || info.Size != r.Bytes || info.Size <= int64(len(src)) {
		t.Fatalf("saved object %+v, %v; reply %d bytes", info, err, r.Bytes)
	}
	obj := make([]byte, info.Size)
	if _, err := mem.GetRange(ctx, "p/ckpt/a.safetensors", 0, obj, ""); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(obj[len(obj)-len(src):], src) {
		t.Error("the saved object does not end with the tensor's bytes")
	}
}
