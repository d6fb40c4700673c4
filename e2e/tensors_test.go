package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/os2g/os2g/objclient/objtest"
)

// tensorsScript saves a checkpoint through the mount's gdd service (the
// daemon uploads it to the bucket as a multipart upload), loads it back,
// and reads the saved file through the mount as any safetensors reader
// would.
const tensorsScript = `
import json, os, struct, sys
sys.path.insert(0, sys.argv[1])
import torch
from os2g import safetensors as st
sock, shm, path = sys.argv[2], sys.argv[3], sys.argv[4]
g = torch.Generator(); g.manual_seed(5)
tensors = {"w": torch.randn(2048, 1500, generator=g), "b": torch.randn(1500, generator=g).half(),
           "step": torch.tensor(7)}
size = st.save_safetensors(tensors, path, metadata={"epoch": "2"}, socket=sock, shm_dir=shm)
back = st.load_safetensors(path, device="sim", socket=sock, shm_dir=shm)
ok = sorted(back) == sorted(tensors) and all(torch.equal(back[k], v) for k, v in tensors.items())
with open(path, "rb") as f:
    raw = f.read()
(n,) = struct.unpack("<Q", raw[:8])
h = json.loads(raw[8:8 + n])
b0, b1 = h["w"]["data_offsets"]
w = torch.frombuffer(bytearray(raw[8 + n + b0:8 + n + b1]), dtype=torch.float32).reshape(2048, 1500)
print(size == len(raw), ok, torch.equal(w, tensors["w"]), h["__metadata__"]["epoch"])
`

// TestGDDSafetensorsRoundTrip: os2g.safetensors through a read-write
// mount's gdd service (sim device) against the real S3 server: save (a
// 12 MiB checkpoint, so a multipart upload), load back equal, and the
// object read through the mount is a standard safetensors file.
func TestGDDSafetensorsRoundTrip(t *testing.T) {
	requireFUSE(t)
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		objtest.SkipOrFail(t, "e2e: "+python+" has no torch")
	}
	e := newEnv(t)
	_, self, _, _ := runtime.Caller(0)
	pyDir := filepath.Join(filepath.Dir(self), "..", "python")
	mp := e.mountpoint()
	shm := t.TempDir()
	sock := filepath.Join(t.TempDir(), "gdd.sock")
	pid := e.mount(mp, "--gdd-socket", sock, "--gdd-device", "sim", "--gdd-sim-dir", shm)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", tensorsScript, pyDir, sock, shm, filepath.Join(mp, "ckpt", "model.safetensors")).CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "True True True 2"; got != want {
		t.Errorf("client printed %q, want %q", got, want)
	}
	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Fatalf("os2g umount: exit %d: %s", r.code, r.stderr)
	}
	waitGone(t, pid)
	if left, _ := os.ReadDir(shm); len(left) != 0 {
		t.Errorf("shared-memory files left behind: %v", left)
	}
}
