package csi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var objects = map[string]string{
	"hello.txt":         "hello from s3\n",
	"train/cls_a/0.bin": "zero",
}

// publish publishes volume id at target with the volume's attributes and
// secret, and fails the test on error.
func (h *harness) publish(v *s3Volume, id, target string, readonly bool) {
	h.t.Helper()
	_, err := h.node.NodePublishVolume(h.ctx(), &csipb.NodePublishVolumeRequest{
		VolumeId:         id,
		TargetPath:       target,
		VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
		Readonly:         readonly,
		VolumeContext:    v.attrs,
		Secrets:          v.secrets,
	})
	if err != nil {
		h.t.Fatalf("NodePublishVolume(%s, %s): %v", id, target, err)
	}
}

func (h *harness) unpublish(id, target string) {
	h.t.Helper()
	if _, err := h.node.NodeUnpublishVolume(h.ctx(), &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		h.t.Fatalf("NodeUnpublishVolume(%s, %s): %v", id, target, err)
	}
}

// statsErr returns the error of NodeGetVolumeStats for the target.
func (h *harness) statsErr(id, target string) error {
	_, err := h.node.NodeGetVolumeStats(h.ctx(), &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	return err
}

func readFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if string(b) != want {
		t.Fatalf("read %s = %q, want %q", path, b, want)
	}
}

// TestPublishUnpublish: a publish mounts the bucket's prefix at the target
// through a live daemon; writes go through to the bucket; unpublish
// unmounts, removes the target, stops the daemon and leaves nothing
// mounted; a second unpublish succeeds.
func TestPublishUnpublish(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, objects)
	target := h.target("pod-a")

	h.publish(v, "vol-1", target, false)
	readFile(t, filepath.Join(target, "hello.txt"), objects["hello.txt"])
	readFile(t, filepath.Join(target, "train/cls_a/0.bin"), "zero")
	if err := os.WriteFile(filepath.Join(target, "ckpt.pt"), []byte("weights"), 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	dm := h.daemonOf("vol-1")
	if dm == nil || !dm.alive() {
		t.Fatal("no live daemon after publish")
	}
	staging := dm.staging
	if !isMounted(t, staging) || !isMounted(t, target) {
		t.Fatalf("staging mounted %v, target mounted %v; want both", isMounted(t, staging), isMounted(t, target))
	}
	// The secret reaches the daemon by its environment only.
	pid := dm.cmd.Process.Pid
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	secret := v.secrets[SecretSecretAccessKey]
	noSecretIn(t, "the daemon's command line", string(cmdline), map[string]string{"secret": secret})
	if !strings.Contains(string(environ), "\x00"+SecretSecretAccessKey+"="+secret+"\x00") {
		t.Error("the daemon's environment lacks the secret's AWS_SECRET_ACCESS_KEY")
	}

	st, err := h.node.NodeGetVolumeStats(h.ctx(), &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: target})
	if err != nil || len(st.GetUsage()) != 2 || st.GetUsage()[0].GetUnit() != csipb.VolumeUsage_BYTES {
		t.Errorf("NodeGetVolumeStats of a live publish: %v, %v; want byte and inode usage", st, err)
	}
	_, err = h.node.NodeGetVolumeStats(h.ctx(), &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: target + "-other"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("NodeGetVolumeStats at a path the volume is not published at: %v, want NotFound", err)
	}

	// Publishing again with the same arguments is a no-op (idempotent).
	h.publish(v, "vol-1", target, false)
	if h.daemonOf("vol-1") != dm {
		t.Fatal("an idempotent publish replaced the daemon")
	}

	h.unpublish("vol-1", target)
	if dm.alive() {
		t.Error("the last unpublish returned before the daemon exited")
	}
	waitExited(t, dm)
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target after unpublish: stat err %v, want not exist", err)
	}
	if isMounted(t, staging) {
		t.Error("staging directory still mounted after the last unpublish")
	}
	if h.daemonOf("vol-1") != nil {
		t.Error("volume still has a daemon after the last unpublish")
	}
	h.unpublish("vol-1", target) // already gone: succeeds

	// The checkpoint reached the bucket: a new publish reads it back.
	target2 := h.target("pod-b")
	h.publish(v, "vol-1", target2, true)
	readFile(t, filepath.Join(target2, "ckpt.pt"), "weights")
	err = os.WriteFile(filepath.Join(target2, "x"), []byte("no"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("write on a read-only publish: %v, want EROFS", err)
	}
	h.unpublish("vol-1", target2)
	noSecretIn(t, "the driver's log", h.logs.String(), map[string]string{"secret": secret})
}

// TestDatasetMode: a ReadOnlyMany volume with datasetMode runs its daemon
// with --read-only and --immutable; files read, writes fail with EROFS.
func TestDatasetMode(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, objects)
	v.attrs["datasetMode"] = "true"
	target := h.target("pod-a")
	_, err := h.node.NodePublishVolume(h.ctx(), &csipb.NodePublishVolumeRequest{
		VolumeId: "vol-ds", TargetPath: target, VolumeContext: v.attrs, Secrets: v.secrets,
		VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "max-memory=64MiB"),
	})
	if err != nil {
		t.Fatal(err)
	}
	dm := h.daemonOf("vol-ds")
	args := strings.Join(dm.cmd.Args, " ")
	for _, want := range []string{"--read-only=true", "--immutable=true", "--max-memory=64MiB", "--allow-other"} {
		if !strings.Contains(args, want) {
			t.Errorf("daemon args %q lack %s", args, want)
		}
	}
	readFile(t, filepath.Join(target, "train/cls_a/0.bin"), "zero")
	readFile(t, filepath.Join(target, "train/cls_a/0.bin"), "zero") // second epoch
	if err := os.WriteFile(filepath.Join(target, "x"), []byte("no"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write in dataset mode: %v, want EROFS", err)
	}
	h.unpublish("vol-ds", target)
	waitExited(t, dm)
}

// TestConcurrentPublishes: publishes of one volume racing on several
// targets start one daemon between them.
func TestConcurrentPublishes(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, objects)
	targets := []string{h.target("p0"), h.target("p1"), h.target("p2"), h.target("p3")}
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	for i, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.node.NodePublishVolume(h.ctx(), &csipb.NodePublishVolumeRequest{
				VolumeId: "vol-c", TargetPath: tg, VolumeContext: v.attrs, Secrets: v.secrets,
				VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	n := 0
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `msg="daemon started"`) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d daemons started for 4 concurrent publishes of one volume, want 1", n)
	}
	for _, tg := range targets {
		readFile(t, filepath.Join(tg, "hello.txt"), objects["hello.txt"])
	}
	dm := h.daemonOf("vol-c")
	for _, tg := range targets {
		h.unpublish("vol-c", tg)
	}
	waitExited(t, dm)
}

// TestSharedDaemon: two publishes of one volume share one daemon; the
// first unpublish leaves the other pod's mount working; the last stops
// the daemon. A read-only publish beside a read-write one is read-only.
func TestSharedDaemon(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, objects)
	ta, tb := h.target("pod-a"), h.target("pod-b")

	h.publish(v, "vol-s", ta, false)
	first := h.daemonOf("vol-s")
	h.publish(v, "vol-s", tb, true)
	if got := h.daemonOf("vol-s"); got != first {
		t.Fatalf("second publish started another daemon (pid %d, first %d)", got.cmd.Process.Pid, first.cmd.Process.Pid)
	}
	readFile(t, filepath.Join(ta, "hello.txt"), objects["hello.txt"])
	readFile(t, filepath.Join(tb, "hello.txt"), objects["hello.txt"])
	if err := os.WriteFile(filepath.Join(tb, "x"), []byte("no"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through the read-only publish: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(ta, "y"), []byte("yes"), 0o644); err != nil {
		t.Errorf("write through the read-write publish: %v", err)
	}

	// Another publish of the volume with other options is refused.
	other := map[string]string{}
	for k, val := range v.attrs {
		other[k] = val
	}
	other["maxMemory"] = "64MiB"
	_, err := h.node.NodePublishVolume(h.ctx(), &csipb.NodePublishVolumeRequest{
		VolumeId: "vol-s", TargetPath: h.target("pod-c"), VolumeContext: other, Secrets: v.secrets,
		VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
	})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "vol-s") {
		t.Errorf("publish with other options: %v, want FailedPrecondition naming vol-s", err)
	}

	h.unpublish("vol-s", ta)
	if !first.alive() {
		t.Fatal("daemon stopped while another pod still uses the volume")
	}
	readFile(t, filepath.Join(tb, "y"), "yes")
	h.unpublish("vol-s", tb)
	waitExited(t, first)
}

// TestDaemonDeathRestart: a daemon killed under a published volume is
// found dead at the next publish, which starts a new one and binds every
// target of the volume to it again.
func TestDaemonDeathRestart(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, objects)
	ta, tb := h.target("pod-a"), h.target("pod-b")
	h.publish(v, "vol-d", ta, false)
	readFile(t, filepath.Join(ta, "hello.txt"), objects["hello.txt"])
	old := h.daemonOf("vol-d")
	if err := old.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// A FUSE daemon killed at the wrong moment can hang in the kernel on
	// a request to its own mount; the next publish handles that case too
	// (SIGKILL, then an abort of the connection), so only a daemon that
	// is gone is checked here.
	select {
	case <-old.exited:
		if _, err := os.ReadFile(filepath.Join(ta, "hello.txt")); err == nil {
			t.Fatal("read through a dead daemon's mount succeeded")
		}
		if err := h.statsErr("vol-d", ta); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "lost its os2g daemon") {
			t.Errorf("NodeGetVolumeStats with a dead daemon: %v, want Unavailable saying the daemon is lost", err)
		}
	case <-time.After(20 * time.Second):
		t.Logf("the killed daemon (pid %d) has not exited after 20 s", old.cmd.Process.Pid)
	}

	h.publish(v, "vol-d", tb, false)
	nd := h.daemonOf("vol-d")
	if nd == nil || nd == old || !nd.alive() {
		t.Fatal("the publish after the daemon died did not start a new daemon")
	}
	readFile(t, filepath.Join(tb, "hello.txt"), objects["hello.txt"])
	readFile(t, filepath.Join(ta, "hello.txt"), objects["hello.txt"])
	if err := h.statsErr("vol-d", ta); err != nil {
		t.Errorf("NodeGetVolumeStats after the restart: %v", err)
	}
	if old.alive() {
		t.Error("the dead daemon was not stopped by the publish that replaced it")
	}
	if !strings.Contains(h.logs.String(), "daemon died") && !strings.Contains(h.logs.String(), "daemon does not answer") {
		t.Error("the dead daemon was not reported in the log")
	}
	h.unpublish("vol-d", ta)
	h.unpublish("vol-d", tb)
	waitExited(t, nd)
}

// TestBadCredentials: a secret the server rejects fails the publish with
// FailedPrecondition naming the volume, leaves nothing mounted and no
// daemon running, and never shows the secret.
func TestBadCredentials(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, objects)
	v.secrets[SecretSecretAccessKey] = "not-the-secret-" + v.srv.Bucket
	target := h.target("pod-a")
	_, err := h.node.NodePublishVolume(h.ctx(), &csipb.NodePublishVolumeRequest{
		VolumeId: "vol-badcreds", TargetPath: target, VolumeContext: v.attrs, Secrets: v.secrets,
		VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
	})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish with a wrong secret key: %v, want FailedPrecondition", err)
	}
	msg := status.Convert(err).Message()
	if !strings.Contains(msg, `"vol-badcreds"`) || !strings.Contains(msg, v.srv.Bucket) {
		t.Errorf("error %q does not name the volume and the bucket", msg)
	}
	t.Logf("error: %s", msg)
	assertNothingLeft(t, h, "vol-badcreds", target)
	noSecretIn(t, "error", msg, map[string]string{"secret": v.secrets[SecretSecretAccessKey]})
	noSecretIn(t, "log", h.logs.String(), map[string]string{"secret": v.secrets[SecretSecretAccessKey]})
}

// TestMissingBucket: a volume naming a bucket that does not exist fails
// with FailedPrecondition naming the volume and the bucket; nothing is
// mounted.
func TestMissingBucket(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, nil)
	missing := v.srv.Bucket + "-missing"
	v.attrs[AttrSource] = "s3://" + missing + "/data"
	target := h.target("pod-a")
	_, err := h.node.NodePublishVolume(h.ctx(), &csipb.NodePublishVolumeRequest{
		VolumeId: "vol-nobucket", TargetPath: target, VolumeContext: v.attrs, Secrets: v.secrets,
		VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
	})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish of a missing bucket: %v, want FailedPrecondition", err)
	}
	msg := status.Convert(err).Message()
	if !strings.Contains(msg, `"vol-nobucket"`) || !strings.Contains(msg, missing) {
		t.Errorf("error %q does not name the volume and the bucket", msg)
	}
	t.Logf("error: %s", msg)
	assertNothingLeft(t, h, "vol-nobucket", target)
}

// assertNothingLeft checks that a failed publish left no mount, no daemon
// and no volume state.
func assertNothingLeft(t *testing.T, h *harness, id, target string) {
	t.Helper()
	if isMounted(t, target) {
		t.Errorf("target %s is mounted after a failed publish", target)
	}
	ms, err := readMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if strings.HasPrefix(m.Target, h.tmp) {
			t.Errorf("%s (%s) is mounted after a failed publish", m.Target, m.FSType)
		}
	}
	if h.daemonOf(id) != nil {
		t.Errorf("volume %s has a daemon after a failed publish", id)
	}
}

// TestRestartClearsStaleStaging: a plugin that starts again finds the
// staging mount of a daemon that died with the previous one, and clears it.
func TestRestartClearsStaleStaging(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, objects)
	target := h.target("pod-a")
	h.publish(v, "vol-r", target, false)
	readFile(t, filepath.Join(target, "hello.txt"), objects["hello.txt"])
	dm := h.daemonOf("vol-r")
	if err := dm.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dm.exited:
	case <-time.After(20 * time.Second):
		// Hung in the kernel on its own mount: free it as stop does.
		t.Logf("killed daemon still there after 20 s; aborting its FUSE connection: %v", abortFuse(dm.dev))
		waitExited(t, dm)
	}
	if !isMounted(t, dm.staging) {
		t.Fatal("the killed daemon's staging mount is already gone; nothing to test")
	}
	d2, err := New(Options{NodeID: "node-1", Os2gPath: h.d.opt.Os2gPath, StateDir: h.d.opt.StateDir, Log: h.d.log})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if isMounted(t, dm.staging) {
		t.Error("a new plugin left the stale staging mount in place")
	}
	h.unpublish("vol-r", target)
	if isMounted(t, target) {
		t.Error("target still mounted after unpublish")
	}
}
