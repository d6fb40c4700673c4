package cli

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/objclient/objtest"
)

// TestGDDService places an object into a simulated device's shared-memory
// destination through the daemon's socket, as a client process would.
func TestGDDService(t *testing.T) {
	store := objtest.NewMem()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	store.PutObject("p/tensors/w.bin", payload, "", nil)
	dir := t.TempDir()
	shm := filepath.Join(dir, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shm, "dst"), make([]byte, len(payload)), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &gddFlags{socket: filepath.Join(dir, "gdd.sock"), device: "sim", simDir: shm}
	if err := g.validate(); err != nil {
		t.Fatal(err)
	}
	stop, err := startGDD(g, store, nil, "/mnt/s3", "p/", false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	st, err := os.Stat(g.socket)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, %v; want mode 0600", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := gdd.Dial(ctx, g.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Place(ctx, "/mnt/s3/tensors/w.bin", 0, -1, gdd.Dest{Kind: "sim", Handle: []byte("dst"), Size: int64(len(payload))})
	if err != nil {
		t.Fatal(err)
	}
	want := crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli))
	if res.Bytes != int64(len(payload)) || res.CRC32C != want {
		t.Errorf("placed %d bytes crc %08x; want %d, %08x", res.Bytes, res.CRC32C, len(payload), want)
	}
	got, err := os.ReadFile(filepath.Join(shm, "dst"))
	if err != nil || !bytes.Equal(got, payload) {
		t.Errorf("destination holds different bytes (err %v)", err)
	}
	if _, err := c.Place(ctx, "tensors/nope.bin", 0, -1, gdd.Dest{Kind: "sim", Handle: []byte("dst"), Size: 1}); !errors.Is(err, gdd.ErrNotFound) {
		t.Errorf("missing file: %v; want ErrNotFound", err)
	}
	if err := (&gddFlags{socket: "x", device: "tpu"}).validate(); err == nil {
		t.Error("--gdd-device=tpu accepted")
	}
}
