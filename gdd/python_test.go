//go:build linux

package gdd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/os2g/os2g/internal/pyenv"
	"github.com/os2g/os2g/objclient"
)

// runPythonTests installs the python/ package into a fresh venv and runs
// python/tests/<pattern> there against the sim daemon e, with env added.
func runPythonTests(t *testing.T, pattern string, env ...string) {
	t.Helper()
	py := pyenv.Install(t)
	root, err := pyenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tests := filepath.Join(root, "python", "tests")
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", tests, "-t", tests, "-p", pattern)
	cmd.Dir = t.TempDir() // "import os2g" must find the installed copy
	cmd.Env = append(append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1"), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("python output:\n%s", out)
	if err != nil {
		t.Fatalf("python tests %s failed: %v", pattern, err)
	}
}

// TestPythonClient runs python/tests/test_gdd.py (os2g.gdd, installed in
// a fresh venv) against a simulated-device daemon on a real socket.
func TestPythonClient(t *testing.T) {
	e := startSim(t, 4)
	const record = 3000
	data := randBytes(77, 40*record)
	e.mem.PutObject("shards/train-0.bin", data, "", nil)
	expect := filepath.Join(t.TempDir(), "expect.bin")
	if err := os.WriteFile(expect, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The fake CUDA driver, under the driver's own name, for the ctypes
	// binding test (skipped by the Python side when absent).
	fakeDir := ""
	if _, err := exec.LookPath("cc"); err == nil {
		fakeDir = filepath.Dir(buildFakeDriver(t, true))
	}
	runPythonTests(t, "test_gdd.py",
		"OS2G_GDD_SOCKET="+e.socket,
		"OS2G_GDD_SHM_DIR="+e.shmDir,
		"OS2G_GDD_KEY=shards/train-0.bin",
		"OS2G_GDD_EXPECT="+expect,
		"OS2G_GDD_RECORD=3000",
		"OS2G_GDD_FAKE_CUDA_DIR="+fakeDir,
	)
	if s := e.sim.Stats(); s.HostBounceCopies != 0 {
		t.Errorf("%d bounce copies", s.HostBounceCopies)
	}
}

// TestPythonSafetensors runs python/tests/test_safetensors.py (installed
// package) against a sim daemon that saves into its in-memory store (in 64 KiB
// parts); saves under "fail/" fail midway.
func TestPythonSafetensors(t *testing.T) {
	e := startSimWith(t, 4, func(o *ServeOptions, e *simEnv) {
		o.Create = func(ctx context.Context, path string) (Upload, error) {
			w, err := e.mem.Put(ctx, path, objclient.PutOptions{})
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(path, "fail/") {
				w = &failingWriter{Writer: w, limit: 1000, aborted: new(atomic.Bool)}
			}
			return SequentialUpload(w, 64<<10), nil
		}
	})
	file, _ := checkpoint(t)
	n := binary.LittleEndian.Uint64(file)
	flipped := bytes.Clone(file)
	flipped[8+int(n)+4321] ^= 0x01
	e.mem.PutObject("ckpt/flipped.safetensors", flipped, "", nil)
	js := bytes.Replace(file[8:8+n], []byte(`"data_offsets":[8,120008]`), []byte(`"data_offsets":[8,920008]`), 1)
	e.mem.PutObject("ckpt/malformed.safetensors", append(append(bytes.Clone(file[:8]), js...), file[8+n:]...), "", nil)
	runPythonTests(t, "test_safetensors.py",
		"OS2G_GDD_SOCKET="+e.socket,
		"OS2G_GDD_SHM_DIR="+e.shmDir,
		"OS2G_ST_FLIPPED=ckpt/flipped.safetensors",
		"OS2G_ST_MALFORMED=ckpt/malformed.safetensors",
	)
	if _, err := e.mem.Stat(context.Background(), "fail/ckpt.safetensors"); !errors.Is(err, objclient.ErrNotFound) {
		t.Errorf("failed save left an object: %v", err)
	}
}
