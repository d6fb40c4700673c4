package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSecretsInDebugLog: with --debug (every FUSE request logged) and a
// read, a write and a failed lookup, the daemon's log never contains the
// secret key (issue 2: secrets never appear in logs or debug output).
func TestNoSecretsInDebugLog(t *testing.T) {
	e := newEnv(t)
	mp := e.mountpoint()
	logFile := filepath.Join(t.TempDir(), "os2g.log")
	e.mount(mp, "--debug", "--log-file", logFile)
	if err := os.WriteFile(filepath.Join(mp, "s.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(mp, "s.txt"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("read back: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(mp, "missing")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing name: %v, want ENOENT", err)
	}
	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Fatalf("os2g umount: exit %d: %s", r.code, r.stderr)
	}
	log, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "LOOKUP") {
		t.Fatalf("the --debug log has no FUSE requests; the test would prove nothing:\n%s", log)
	}
	if strings.Contains(string(log), e.srv.SecretAccessKey) {
		t.Errorf("the daemon log contains the secret access key")
	}
}
