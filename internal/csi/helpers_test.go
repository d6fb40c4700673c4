package csi

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// hangGuard bounds every wait of these tests; it is a hang guard, not a
// timing assertion.
const hangGuard = 3 * time.Minute

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// os2gBinary builds cmd/os2g once per test binary run.
func os2gBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "os2g-csi-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "os2g")
		// A build under a loaded CI machine can be slow: a generous guard.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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

// requireMounts skips (or, under OS2G_REQUIRE_ALL=1, fails) a test that
// needs root and /dev/fuse to mount.
func requireMounts(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		objtest.SkipOrFail(t, "csi: mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		objtest.SkipOrFail(t, "csi: /dev/fuse missing")
	}
}

// syncBuffer is a log sink safe for the daemons' output goroutines.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a Driver serving on a Unix socket, and a client of it.
type harness struct {
	t      *testing.T
	d      *Driver
	node   csipb.NodeClient
	id     csipb.IdentityClient
	sock   string
	logs   *syncBuffer
	tmp    string
	closed bool
}

// newHarness starts a Driver with binary bin (the real os2g, or a stand-in
// for tests that never mount) and a client on its socket. Cleanup closes
// both; the driver's log is printed if the test failed.
func newHarness(t *testing.T, bin string) *harness {
	t.Helper()
	// Unix socket paths are limited to 108 bytes: keep it short.
	tmp, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, logs: &syncBuffer{}, tmp: tmp, sock: filepath.Join(tmp, "csi.sock")}
	d, err := New(Options{
		NodeID:    "node-1",
		Os2gPath:  bin,
		StateDir:  filepath.Join(tmp, "state"),
		StopGrace: 20 * time.Second,
		Log:       slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	l, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, l) }()
	conn, err := grpc.NewClient("unix://"+h.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h.node = csipb.NewNodeClient(conn)
	h.id = csipb.NewIdentityClient(conn)
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		d.Close()
		if t.Failed() {
			t.Logf("driver log:\n%s", h.logs.String())
		}
		os.RemoveAll(tmp)
	})
	return h
}

// ctx is a request context bounded by the hang guard.
func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	h.t.Cleanup(cancel)
	return ctx
}

// target returns a fresh target path (its parent exists, as the CO
// guarantees; the target itself does not).
func (h *harness) target(name string) string {
	h.t.Helper()
	dir := filepath.Join(h.tmp, "pods", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	return filepath.Join(dir, "mount")
}

// daemonOf returns the volume's running daemon, or nil.
func (h *harness) daemonOf(id string) *daemon {
	h.d.mu.Lock()
	v := h.d.vols[id]
	h.d.mu.Unlock()
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.d
}

// s3Volume is a bucket with objects on a real server, and the attributes
// and secret of a volume naming it.
type s3Volume struct {
	srv     *objtest.Server
	attrs   map[string]string
	secrets map[string]string
}

// newS3Volume starts (or reuses, with OS2G_S3_ENDPOINT) a real S3 server
// with a fresh bucket holding objects (key -> content) under prefix
// "data/"; the volume mounts s3://BUCKET/data.
func newS3Volume(t *testing.T, objects map[string]string) *s3Volume {
	t.Helper()
	srv := objtest.StartVersityServer(t)
	store := objtest.NewS3(t, srv.Options())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for k, v := range objects {
		w, err := store.Put(ctx, "data/"+k, objclient.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(v)); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return &s3Volume{
		srv: srv,
		attrs: map[string]string{
			AttrSource:    "s3://" + srv.Bucket + "/data",
			"endpointURL": srv.URL,
			"region":      "us-east-1",
		},
		secrets: map[string]string{
			SecretAccessKeyID:     srv.AccessKeyID,
			SecretSecretAccessKey: srv.SecretAccessKey,
		},
	}
}

// mountCap is a file system volume capability with the access mode.
func mountCap(mode csipb.VolumeCapability_AccessMode_Mode, flags ...string) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

// isMounted reports whether path is a mount point now.
func isMounted(t *testing.T, path string) bool {
	t.Helper()
	_, ok, err := mountedAt(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// waitExited waits for d's process to be gone.
func waitExited(t *testing.T, d *daemon) {
	t.Helper()
	select {
	case <-d.exited:
	case <-time.After(hangGuard):
		t.Fatalf("daemon pid %d still running after %v", d.cmd.Process.Pid, hangGuard)
	}
}

// noSecretIn fails if any secret value appears in s.
func noSecretIn(t *testing.T, what, s string, secrets map[string]string) {
	t.Helper()
	for k, v := range secrets {
		if v != "" && strings.Contains(s, v) {
			t.Errorf("%s contains the value of secret key %s", what, k)
		}
	}
}
