package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/os2g/os2g/objclient/objtest"
)

// gddScript places a file of the mount into a shared-memory destination
// through the daemon's socket with the Python client, as training code would
// with a CUDA tensor, and compares the bytes with a read() through the mount.
const gddScript = `
import os, sys
sys.path.insert(0, sys.argv[1])
from os2g import gdd as os2g_gdd
sock, shm, path = sys.argv[2], sys.argv[3], sys.argv[4]
size = os.path.getsize(path)
with open(os.path.join(shm, "dst"), "wb") as f:
    f.truncate(size)
n, crc = os2g_gdd.load_into_shm("dst", path, socket=sock, shm_dir=shm)
with open(os.path.join(shm, "dst"), "rb") as f:
    placed = f.read()
with open(path, "rb") as f:
    read = f.read()
print(n, size, placed == read)
`

// TestGDDSocket: os2g mount --gdd-socket with the simulated device serves
// placements of files under the mount to the Python client.
func TestGDDSocket(t *testing.T) {
	requireFUSE(t)
	if err := exec.Command(python, "-c", "import json, socket, base64").Run(); err != nil {
		objtest.SkipOrFail(t, "e2e: "+python+" not usable")
	}
	e := newEnv(t)
	_, self, _, _ := runtime.Caller(0)
	pyDir := filepath.Join(filepath.Dir(self), "..", "python") // the os2g package's source

	src := t.TempDir()
	data := make([]byte, 20<<20+12345) // several 8 MiB blocks and a tail
	rand.Read(data)
	if err := os.MkdirAll(filepath.Join(src, "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "shards", "s0.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.run(nil, "upload", src, "s3://"+e.srv.Bucket); r.code != 0 {
		t.Fatalf("os2g upload: exit %d: %s", r.code, r.stderr)
	}
	mp := e.mountpoint()
	shm := t.TempDir()
	sock := filepath.Join(t.TempDir(), "run", "os2g", "gdd.sock") // a directory that does not exist yet, like /run/os2g on a fresh machine
	pid := e.mount(mp, "--read-only", "--gdd-socket", sock, "--gdd-device", "sim", "--gdd-sim-dir", shm)
	if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, %v", sock, st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", gddScript, pyDir, sock, shm, filepath.Join(mp, "shards", "s0.bin")).CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "20983865 20983865 True"; got != want {
		t.Errorf("client printed %q, want %q", got, want)
	}
	placed, _ := os.ReadFile(filepath.Join(shm, "dst"))
	if !bytes.Equal(placed, data) {
		t.Error("placed bytes differ from the uploaded file")
	}
	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Fatalf("os2g umount: exit %d: %s", r.code, r.stderr)
	}
	waitGone(t, pid)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind after unmount: %v", err)
	}
}
