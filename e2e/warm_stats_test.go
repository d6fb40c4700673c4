package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestWarmAndStats: os2g warm reads a mounted tree whole and reports the
// right counts; os2g stats finds the daemon from the mount point and shows
// what it fetched; both fail clearly on paths that are not os2g mounts; the
// control socket goes away with the mount.
func TestWarmAndStats(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	sizes := map[string]int{
		"train/a/0.bin": 0,
		"train/a/1.bin": 1234,
		"train/a/2.bin": 3<<20 + 17, // several read-ahead windows
		"train/b/3.bin": 100 << 10,
		"val/4.bin":     9 << 20,
		"top.txt":       12,
	}
	var total int64
	for rel, n := range sizes {
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		rand.Read(b)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		total += int64(n)
	}
	if r := e.run(nil, "upload", src, "s3://"+e.srv.Bucket); r.code != 0 {
		t.Fatalf("os2g upload: exit %d: %s", r.code, r.stderr)
	}
	mp := e.mountpoint()
	pid := e.mount(mp, "--read-only", "--cache-dir", t.TempDir())

	// warm: every file once, overlapping PATHs included.
	r := e.run(nil, "warm", "--concurrency", "4", mp, filepath.Join(mp, "train"))
	if r.code != 0 {
		t.Fatalf("os2g warm: exit %d: %s", r.code, r.stderr)
	}
	summary := regexp.MustCompile(`(?m)^warmed (\d+) files, (.+) in [0-9.]+s \([0-9.]+ files/s, [0-9.]+ MiB/s\)$`)
	m := summary.FindStringSubmatch(r.stderr)
	if m == nil || m[1] != strconv.Itoa(len(sizes)) || m[2] != "12.1 MiB" {
		t.Errorf("os2g warm summary: %q; want %d files, 12.1 MiB (%d bytes)", r.stderr, len(sizes), total)
	}
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("os2g warm on an os2g mount warned: %q", r.stderr)
	}
	if r := e.run(nil, "warm", filepath.Join(mp, "val", "4.bin")); r.code != 0 || !strings.Contains(r.stderr, "warmed 1 files, 9.0 MiB") {
		t.Errorf("os2g warm FILE: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.run(nil, "warm", filepath.Join(mp, "nope")); r.code != 1 || !strings.Contains(r.stderr, "os2g: warm: "+filepath.Join(mp, "nope")+" does not exist") {
		t.Errorf("os2g warm of a missing path: exit %d, stderr %q", r.code, r.stderr)
	}

	// stats: readable table and raw text, from the mount point or a path under it.
	r = e.run(nil, "stats", mp)
	if r.code != 0 {
		t.Fatalf("os2g stats: exit %d: %s", r.code, r.stderr)
	}
	fetchedLine := regexp.MustCompile(`(?m)^bytes fetched\s+(.+)$`).FindStringSubmatch(r.stdout)
	if fetchedLine == nil || fetchedLine[1] == "0 B" || fetchedLine[1] == "-" {
		t.Errorf("os2g stats shows no bytes fetched:\n%s", r.stdout)
	}
	for _, want := range []string{"mount ", mp + " (s3://" + e.srv.Bucket + "/)", "range GETs", "hit ratio", "memory budget", "epoch pre-read", "disk cache", "RSS "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("os2g stats output lacks %q:\n%s", want, r.stdout)
		}
	}
	t.Logf("os2g stats:\n%s", r.stdout)
	r = e.run(nil, "stats", "--raw", filepath.Join(mp, "train"))
	if r.code != 0 {
		t.Fatalf("os2g stats --raw: exit %d: %s", r.code, r.stderr)
	}
	rawFetched := regexp.MustCompile(`(?m)^os2g_prefetch_fetched_bytes_total (\S+)$`).FindStringSubmatch(r.stdout)
	if rawFetched == nil {
		t.Fatalf("os2g stats --raw lacks os2g_prefetch_fetched_bytes_total:\n%s", r.stdout)
	}
	if v, err := strconv.ParseFloat(rawFetched[1], 64); err != nil || v < float64(total) {
		t.Errorf("fetched %s bytes, want at least the %d bytes warmed", rawFetched[1], total)
	}

	// Not os2g mounts.
	plain := t.TempDir()
	if r := e.run(nil, "stats", plain); r.code != 1 || !strings.Contains(r.stderr, "os2g: stats: "+plain+" is not an os2g mount") {
		t.Errorf("os2g stats of a plain directory: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.run(nil, "stats", "/tmp/not-a-mount"); r.code != 1 || !strings.Contains(r.stderr, "os2g: stats: /tmp/not-a-mount does not exist") {
		t.Errorf("os2g stats /tmp/not-a-mount: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.run(nil, "warm", plain); r.code != 0 || !strings.Contains(r.stderr, "is not on an os2g mount") || !strings.Contains(r.stderr, "warmed 0 files") {
		t.Errorf("os2g warm of a plain directory: exit %d, stderr %q", r.code, r.stderr)
	}

	// The socket goes away with the mount.
	real, err := filepath.EvalSymlinks(mp)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(real))
	sock := filepath.Join("/run/os2g", hex.EncodeToString(sum[:])[:16]+".sock")
	t.Cleanup(func() { os.Remove(sock) }) // left by the SIGKILL below
	if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("control socket %s: %v, %v", sock, st, err)
	}
	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Fatalf("os2g umount: exit %d: %s", r.code, r.stderr)
	}
	waitGone(t, pid)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left after unmount: %v", err)
	}
	if r := e.run(nil, "stats", mp); r.code != 1 || !strings.Contains(r.stderr, "is not an os2g mount") {
		t.Errorf("os2g stats after unmount: exit %d, stderr %q", r.code, r.stderr)
	}

	// A daemon killed outright: stats says it cannot reach it and how to clear the mount.
	pid = e.mount(mp, "--read-only")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	r = e.run(nil, "stats", mp)
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the os2g daemon of "+mp) || !strings.Contains(r.stderr, "fusermount3 -u "+mp) {
		t.Errorf("os2g stats of a stale mount: exit %d, stderr %q", r.code, r.stderr)
	}
	if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 {
		t.Errorf("stale-mount message has %d lines: %q", lines, r.stderr)
	}
}
