// Package e2e runs the real os2g binary end to end: it builds cmd/os2g,
// starts versitygw, uploads a slice of Fashion-MNIST with "os2g upload",
// mounts it with "os2g mount" in the default background mode, reads it with
// an unmodified PyTorch DataLoader, round-trips a ResNet-18 checkpoint
// through the mount, and checks the command-line failure paths (wrong
// bucket, bad credentials, unreachable endpoint, bad mount points, stale
// mounts) and signal handling.
//
// The tests need root (or FUSE rights), /dev/fuse, fusermount3, versitygw,
// /usr/bin/python3 with torch and torchvision, and the Debian
// dataset-fashion-mnist package. Without them they skip, or fail when
// OS2G_REQUIRE_ALL=1.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

const (
	python     = "/usr/bin/python3"
	datasetDir = "/usr/share/datasets/fashion-mnist"
	// hangGuard bounds every command; none should come near it.
	hangGuard = 3 * time.Minute
)

// requirements skips (or fails under OS2G_REQUIRE_ALL=1) unless FUSE,
// fusermount3 and root are available.
func requireFUSE(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		objtest.SkipOrFail(t, "e2e: needs Linux")
	}
	if os.Geteuid() != 0 {
		objtest.SkipOrFail(t, "e2e: needs root to mount FUSE")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		objtest.SkipOrFail(t, "e2e: /dev/fuse missing")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		objtest.SkipOrFail(t, "e2e: fusermount3 not installed")
	}
}

func requireTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import torch, torchvision").Run(); err != nil {
		objtest.SkipOrFail(t, "e2e: "+python+" cannot import torch and torchvision")
	}
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
	buildDir  string
)

// os2gBinary builds cmd/os2g once per test binary run.
func os2gBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "os2g-e2e-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "os2g")
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", buildBin, "github.com/os2g/os2g/cmd/os2g").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// env is a test's S3 server plus the environment the binary runs with.
type env struct {
	t   *testing.T
	bin string
	srv *objtest.Server
	env []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	requireFUSE(t)
	bin := os2gBinary(t)
	srv := objtest.StartVersityServer(t)
	vars := []string{}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") && k != "AWS_CA_BUNDLE" {
			continue
		}
		vars = append(vars, kv)
	}
	vars = append(vars,
		"AWS_ACCESS_KEY_ID="+srv.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY="+srv.SecretAccessKey,
		"AWS_REGION=us-east-1",
		"AWS_ENDPOINT_URL="+srv.URL,
		"AWS_EC2_METADATA_DISABLED=true",
	)
	return &env{t: t, bin: bin, srv: srv, env: vars}
}

// result is one finished command.
type result struct {
	code           int
	stdout, stderr string
}

// run runs the os2g binary with args and extra environment variables
// (which override e.env) and returns its exit status and output.
func (e *env) run(extra []string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = append(append([]string{}, e.env...), extra...)
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	r := result{stdout: o.String(), stderr: er.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		e.t.Fatalf("os2g %q: %v", args, err)
	}
	if ctx.Err() != nil {
		e.t.Fatalf("os2g %q: hung (killed after %v); stderr: %s", args, hangGuard, r.stderr)
	}
	return r
}

// isMounted reports whether mp is a mount target in /proc/self/mounts.
func isMounted(t *testing.T, mp string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == mp {
			return true
		}
	}
	return false
}

// daemonPids returns the pids of os2g daemons (this test's binary) serving mp.
func daemonPids(t *testing.T, bin, mp string) []int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 3 || args[0] != bin || args[1] != "mount" {
			continue
		}
		if args[len(args)-1] == mp {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits until pid has exited (hang guard: 30 s).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A zombie still answers kill(0); its /proc state is Z.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running after 30 s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mountpoint returns a fresh empty directory and registers a cleanup that
// leaves nothing mounted and no daemon running, whatever the test did.
func (e *env) mountpoint() string {
	e.t.Helper()
	mp := filepath.Join(e.t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if isMounted(e.t, mp) {
			exec.Command("fusermount3", "-u", "-z", mp).Run()
		}
		for _, pid := range daemonPids(e.t, e.bin, mp) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return mp
}

// mount mounts the test bucket at mp in background mode and returns the
// daemon's pid.
func (e *env) mount(mp string, flags ...string) int {
	e.t.Helper()
	r := e.run(nil, append(append([]string{"mount"}, flags...), "s3://"+e.srv.Bucket, mp)...)
	if r.code != 0 {
		e.t.Fatalf("os2g mount: exit %d: %s", r.code, r.stderr)
	}
	if r.stdout != "" || r.stderr != "" {
		e.t.Errorf("a successful os2g mount printed: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if !isMounted(e.t, mp) {
		e.t.Fatalf("os2g mount exited 0 but %s is not in /proc/self/mounts", mp)
	}
	pids := daemonPids(e.t, e.bin, mp)
	if len(pids) != 1 {
		e.t.Fatalf("want 1 daemon for %s, found %v", mp, pids)
	}
	return pids[0]
}

// TestCLIErrors: every failure exits non-zero with one clear line and
// leaves nothing mounted and no daemon behind.
func TestCLIErrors(t *testing.T) {
	e := newEnv(t)
	mp := e.mountpoint()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	closedPort := objtest.FreePort(t) // nothing listens there
	tests := []struct {
		name  string
		extra []string
		args  []string
		check string // the mount point that must stay unmounted
		want  string
	}{
		{"wrong bucket", nil, []string{"mount", "s3://no-such-bucket-e2e", mp}, mp,
			`os2g: mount: bucket "no-such-bucket-e2e" does not exist at ` + e.srv.URL},
		{"bad credentials", []string{"AWS_SECRET_ACCESS_KEY=wrong-secret"}, []string{"mount", "s3://" + e.srv.Bucket, mp}, mp,
			"rejected the credentials for bucket"},
		{"unreachable endpoint", nil, []string{"mount", "--endpoint-url", "http://" + closedPort, "s3://" + e.srv.Bucket, mp}, mp,
			"os2g: mount: cannot reach the object store at http://" + closedPort},
		{"missing mount point", nil, []string{"mount", "s3://" + e.srv.Bucket, mp + "-missing"}, mp + "-missing",
			"mount point " + mp + "-missing does not exist"},
		{"mount point is a file", nil, []string{"mount", "s3://" + e.srv.Bucket, file}, file,
			"is not a directory"},
		{"non-empty mount point", nil, []string{"mount", "s3://" + e.srv.Bucket, full}, full,
			"is not empty"},
		{"invalid bucket name", nil, []string{"mount", "s3://ab", mp}, mp,
			`os2g: mount: ` + e.srv.URL + ` refused "ab" as a bucket name`},
		{"foreground wrong bucket", nil, []string{"mount", "--foreground", "s3://no-such-bucket-e2e", mp}, mp,
			`bucket "no-such-bucket-e2e" does not exist`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.run(tc.extra, tc.args...)
			if r.code != 1 {
				t.Errorf("exit %d, want 1; stderr: %s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.want)
			}
			if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 {
				t.Errorf("stderr has %d lines, want one: %q", lines, r.stderr)
			}
			if strings.Contains(r.stderr, "wrong-secret") || strings.Contains(r.stderr, e.srv.SecretAccessKey) {
				t.Errorf("stderr shows a secret: %q", r.stderr)
			}
			if isMounted(t, tc.check) {
				t.Errorf("%s is mounted after a failed mount", tc.check)
			}
			if pids := daemonPids(t, e.bin, tc.check); len(pids) > 0 {
				t.Errorf("daemons left running: %v", pids)
			}
		})
	}
	t.Run("upload to missing bucket", func(t *testing.T) {
		r := e.run(nil, "upload", full, "s3://no-such-bucket-e2e/x")
		if r.code != 1 || !strings.Contains(r.stderr, `bucket "no-such-bucket-e2e" does not exist`) {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("usage", func(t *testing.T) {
		r := e.run(nil, "mount", "s3://"+e.srv.Bucket)
		if r.code != 2 || !strings.Contains(r.stderr, "want 2 arguments") {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// TestSignalsAndStaleMount: SIGTERM unmounts cleanly; a daemon killed
// with SIGKILL leaves a stale mount that os2g mount reports (with the
// command that clears it) and os2g umount clears.
func TestSignalsAndStaleMount(t *testing.T) {
	e := newEnv(t)
	mp := e.mountpoint()

	pid := e.mount(mp)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if isMounted(t, mp) {
		t.Fatalf("%s still mounted after SIGTERM to the daemon", mp)
	}

	pid = e.mount(mp)
	r := e.run(nil, "mount", "s3://"+e.srv.Bucket, mp)
	if r.code != 1 || !strings.Contains(r.stderr, "is already mounted") {
		t.Errorf("second mount on a live mount: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if !isMounted(t, mp) {
		t.Fatalf("expected a stale mount at %s after SIGKILL", mp)
	}
	r = e.run(nil, "mount", "s3://"+e.srv.Bucket, mp)
	if r.code != 1 || !strings.Contains(r.stderr, "stale FUSE mount") || !strings.Contains(r.stderr, "fusermount3 -u "+mp) {
		t.Errorf("mount on a stale mount: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Fatalf("os2g umount of the stale mount: exit %d: %s", r.code, r.stderr)
	}
	if isMounted(t, mp) {
		t.Fatal("stale mount not cleared by os2g umount")
	}
	// And the mount point is usable again.
	pid = e.mount(mp)
	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Fatalf("os2g umount: exit %d: %s", r.code, r.stderr)
	}
	waitGone(t, pid)
	if isMounted(t, mp) {
		t.Fatal("still mounted after os2g umount")
	}
	if r := e.run(nil, "umount", mp); r.code != 1 || !strings.Contains(r.stderr, "is not mounted") {
		t.Errorf("umount of an unmounted dir: exit %d, stderr %q", r.code, r.stderr)
	}
}
