package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writeTree creates files (relative path -> size in bytes) under root.
func writeTree(t *testing.T, root string, files map[string]int) {
	t.Helper()
	for rel, n := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWarmAll(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]int{"a/1": 10, "a/2": 3 << 20, "b/3": 0, "top": 5})
	if err := os.Symlink("top", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var reported []string
	report := func(p string, err error) { reported = append(reported, p) }
	// Overlapping paths read each file once.
	files, nerr := collectWarm([]string{dir, filepath.Join(dir, "a"), filepath.Join(dir, "top")}, report)
	if nerr != 0 || len(reported) != 0 {
		t.Fatalf("collect errors %d: %q", nerr, reported)
	}
	var total int64
	for _, f := range files {
		total += f.size
	}
	if len(files) != 4 || total != 10+3<<20+5 {
		t.Fatalf("collected %d files, %d bytes: %+v", len(files), total, files)
	}

	// A file that vanished after the walk is reported; the rest are read.
	if err := os.Remove(filepath.Join(dir, "a", "1")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen atomic.Int64
	var prog warmProgress
	err := warmAll(context.Background(), files, 2, &prog, func(n int64) { seen.Add(n) }, func(p string, err error) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if prog.files.Load() != 3 || prog.failed.Load() != 1 || prog.bytes.Load() != 3<<20+5 || seen.Load() != 3<<20+5 {
		t.Errorf("files %d failed %d bytes %d seen %d; want 3, 1, %d", prog.files.Load(), prog.failed.Load(), prog.bytes.Load(), seen.Load(), 3<<20+5)
	}
	if len(reported) != 1 || reported[0] != filepath.Join(dir, "a", "1") {
		t.Errorf("reported %q", reported)
	}

	// A cancelled context stops the run.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := warmAll(ctx, files, 2, &warmProgress{}, func(int64) {}, func(string, error) {}); err == nil {
		t.Error("warmAll with a cancelled context: nil error")
	}
}

func TestRunWarm(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]int{"x/1": 1 << 20, "x/2": 1 << 20, "y": 7})
	code, out, errOut := runMain(t, nil, "warm", "--concurrency", "3", dir)
	if code != 0 || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Not an os2g mount: a warning, then the summary.
	if !strings.Contains(errOut, "os2g: warm: warning: "+dir+" is not on an os2g mount") {
		t.Errorf("no warning: %q", errOut)
	}
	if !regexp.MustCompile(`(?m)^warmed 3 files, 2\.0 MiB in [0-9.]+s \([0-9.]+ files/s, [0-9.]+ MiB/s\)$`).MatchString(errOut) {
		t.Errorf("summary: %q", errOut)
	}

	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"warm"}, 2, "want at least 1 argument"},
		{[]string{"warm", "--concurrency", "0", dir}, 2, "--concurrency must be at least 1"},
		{[]string{"warm", dir, filepath.Join(dir, "missing")}, 1, "os2g: warm: " + filepath.Join(dir, "missing") + " does not exist"},
		{[]string{"warm", "--help"}, 0, ""},
	}
	for _, tc := range tests {
		code, _, errOut := runMain(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("os2g %q: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, errOut, tc.want)
		}
		if tc.code == 1 && strings.Contains(errOut, "warmed") {
			t.Errorf("os2g %q read files before failing: %q", tc.args, errOut)
		}
	}
}

func TestWarmProgressLine(t *testing.T) {
	if got, want := warmProgressLine(120, 7000, 4*time.Second), "warming 120/7000 files, 30.0 files/s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
