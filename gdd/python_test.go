//go:build linux

package gdd

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonClient runs gdd/python/test_os2g_gdd.py (the pure-Python client)
// against a simulated-device daemon on a real socket.
func TestPythonClient(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("%s not available: %v", py, err)
	}
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
	cmd := exec.Command(py, "python/test_os2g_gdd.py", "-v")
	cmd.Env = append(os.Environ(),
		"OS2G_GDD_SOCKET="+e.socket,
		"OS2G_GDD_SHM_DIR="+e.shmDir,
		"OS2G_GDD_KEY=shards/train-0.bin",
		"OS2G_GDD_EXPECT="+expect,
		"OS2G_GDD_RECORD=3000",
		"PYTHONDONTWRITEBYTECODE=1",
		"OS2G_GDD_FAKE_CUDA_DIR="+fakeDir,
	)
	out, err := cmd.CombinedOutput()
	t.Logf("python output:\n%s", out)
	if err != nil {
		t.Fatalf("python client tests failed: %v", err)
	}
	if s := e.sim.Stats(); s.HostBounceCopies != 0 {
		t.Errorf("%d bounce copies", s.HostBounceCopies)
	}
}
