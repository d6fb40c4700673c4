package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMountCPUs: os2g mount --cpus 0 pins every thread of the daemon to
// CPU 0 (Cpus_allowed_list of each /proc/PID/task/*/status), sets
// GOMAXPROCS to 1, and os2g stats reports the daemon's CPU per GiB and per
// file; a CPU that is not online fails at mount time with exit 2 naming
// the flag and leaves nothing mounted.
func TestMountCPUs(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d.bin", i)), make([]byte, 100<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.run(nil, "upload", src, "s3://"+e.srv.Bucket); r.code != 0 {
		t.Fatalf("os2g upload: exit %d: %s", r.code, r.stderr)
	}

	bad := e.mountpoint()
	r := e.run(nil, "mount", "--cpus", "1000", "s3://"+e.srv.Bucket, bad)
	if r.code != 2 || !strings.Contains(r.stderr, "-cpus") || !strings.Contains(r.stderr, "CPU 1000 not online") {
		t.Errorf("mount --cpus 1000: exit %d, stderr %q; want exit 2 naming -cpus", r.code, r.stderr)
	}
	if isMounted(t, bad) {
		t.Errorf("a failed --cpus mount left %s mounted", bad)
	}

	mp := e.mountpoint()
	pid := e.mount(mp, "--read-only", "--cpus", "0")
	for i := range 4 {
		b, err := os.ReadFile(filepath.Join(mp, fmt.Sprintf("f%d.bin", i)))
		if err != nil || len(b) != 100<<10 {
			t.Fatalf("read f%d.bin: %d bytes, %v", i, len(b), err)
		}
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) < 2 {
		t.Fatalf("daemon %d threads: %v %v", pid, tasks, err)
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited meanwhile
		}
		m := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)$`).FindSubmatch(b)
		if m == nil || string(m[1]) != "0" {
			t.Errorf("%s: Cpus_allowed_list %q, want \"0\"", p, m)
		}
	}
	r = e.run(nil, "stats", "--raw", mp)
	if r.code != 0 {
		t.Fatalf("os2g stats --raw: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"go_sched_gomaxprocs_threads 1\n", "os2g_prefetch_opens_total 4\n", "os2g_cpu_seconds_total "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stats --raw lacks %q", want)
		}
	}
	r = e.run(nil, "stats", mp)
	if !regexp.MustCompile(`(?m)^daemon CPU\s+[0-9.]+ s; [0-9.]+ s per GiB read, [0-9.]+ [µm]?s per file opened$`).MatchString(r.stdout) {
		t.Errorf("os2g stats lacks the daemon CPU line:\n%s", r.stdout)
	}
}
