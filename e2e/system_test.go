package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFstab: "mount -a -T FSTAB" mounts an os2g line of a temporary fstab
// through mount(8) and mount.fuse3 (the "PROGRAM#SOURCE" form of type fuse,
// which calls os2g exactly as type fuse.os2g does once os2g is installed):
// -o options become flags (read-only, endpoint-url), the options only
// mount(8) and systemd act on (_netdev, nofail, defaults) are accepted, a
// noauto line is left alone, and an unknown option fails naming it (issue
// 16 item 1).
func TestFstab(t *testing.T) {
	e := newEnv(t)
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("mount(8) not installed")
	}
	if _, err := os.Stat("/sbin/mount.fuse3"); err != nil {
		t.Fatalf("fuse3's mount helper is missing: %v", err)
	}
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "d", "hello.txt"), []byte("hello fstab\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.run(nil, "upload", "--quiet", src, "s3://"+e.srv.Bucket+"/fstab"); r.code != 0 {
		t.Fatalf("os2g upload: exit %d: %s", r.code, r.stderr)
	}
	// A rerun uploads nothing: the bucket holds the file unchanged.
	if r := e.run(nil, "upload", src, "s3://"+e.srv.Bucket+"/fstab"); r.code != 0 || !strings.Contains(r.stderr, "uploaded 0 files") || !strings.Contains(r.stderr, "1 unchanged files skipped") {
		t.Errorf("os2g upload rerun: exit %d: %s", r.code, r.stderr)
	}
	auto, noauto, bad := e.mountpoint(), e.mountpoint(), e.mountpoint()
	source := e.bin + "#s3://" + e.srv.Bucket + "/fstab"
	fstab := filepath.Join(t.TempDir(), "fstab")
	lines := fmt.Sprintf("# os2g test fstab\n"+
		"%s %s fuse _netdev,nofail,defaults,endpoint-url=%s,read-only,metadata_ttl=indefinite 0 0\n"+
		"%s %s fuse noauto,endpoint-url=%s 0 0\n"+
		"%s %s fuse noauto,endpoint-url=%s,bogus_opt=1 0 0\n",
		source, auto, e.srv.URL, source, noauto, e.srv.URL, source, bad, e.srv.URL)
	if err := os.WriteFile(fstab, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	mount := func(args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		cmd := exec.CommandContext(ctx, "mount", args...)
		cmd.Env = e.env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, out.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), out.String()
		}
		t.Fatalf("mount %q: %v", args, err)
		return 0, ""
	}

	if code, out := mount("-a", "-T", fstab); code != 0 {
		t.Fatalf("mount -a -T %s: exit %d: %s", fstab, code, out)
	}
	if !isMounted(t, auto) {
		t.Fatalf("mount -a exited 0 but %s is not mounted", auto)
	}
	if isMounted(t, noauto) || isMounted(t, bad) {
		t.Errorf("mount -a mounted a noauto line")
	}
	b, err := os.ReadFile(filepath.Join(auto, "d", "hello.txt"))
	if err != nil || string(b) != "hello fstab\n" {
		t.Errorf("reading through the fstab mount: %q, %v", b, err)
	}
	err = os.WriteFile(filepath.Join(auto, "new.txt"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing to the -o read-only mount: %v, want EROFS", err)
	}
	// mount -a again leaves the mounted line alone.
	if code, out := mount("-a", "-T", fstab); code != 0 {
		t.Errorf("second mount -a: exit %d: %s", code, out)
	}
	// A noauto line mounts by its mount point, read-write.
	if code, out := mount("-T", fstab, noauto); code != 0 || !isMounted(t, noauto) {
		t.Fatalf("mount -T fstab %s: exit %d, mounted %v: %s", noauto, code, isMounted(t, noauto), out)
	}
	if err := os.WriteFile(filepath.Join(noauto, "w.txt"), []byte("written"), 0o644); err != nil {
		t.Errorf("writing to the read-write fstab mount: %v", err)
	}
	if code, out := mount("-T", fstab, bad); code == 0 || !strings.Contains(out, "-o bogus_opt: unknown option") || isMounted(t, bad) {
		t.Errorf("an fstab line with -o bogus_opt: exit %d, mounted %v, output %q", code, isMounted(t, bad), out)
	}
	for _, mp := range []string{auto, noauto} {
		if r := e.run(nil, "umount", mp); r.code != 0 {
			t.Errorf("os2g umount %s: exit %d: %s", mp, r.code, r.stderr)
		}
	}
}

// TestSystemdNotify: "os2g mount --foreground" under a fake systemd
// NOTIFY_SOCKET sends READY=1 (with its MAINPID) once the mount is live,
// and STOPPING=1 when SIGTERM unmounts it, as Type=notify units expect.
func TestSystemdNotify(t *testing.T) {
	e := newEnv(t)
	mp := e.mountpoint()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, "mount", "-f", "s3://"+e.srv.Bucket, mp)
	cmd.Env = append(append([]string{}, e.env...), "NOTIFY_SOCKET="+sock)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	read := func() string {
		t.Helper()
		ln.SetReadDeadline(time.Now().Add(hangGuard))
		buf := make([]byte, 4096)
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("no notification from os2g: %v; stderr: %s", err, stderr.String())
		}
		return string(buf[:n])
	}
	msg := read()
	if !strings.Contains(msg, "READY=1") || !strings.Contains(msg, fmt.Sprintf("MAINPID=%d", cmd.Process.Pid)) {
		t.Errorf("first notification %q, want READY=1 and MAINPID=%d", msg, cmd.Process.Pid)
	}
	if !isMounted(t, mp) {
		t.Errorf("READY=1 arrived before %s was mounted", mp)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg := read(); !strings.Contains(msg, "STOPPING=1") {
		t.Errorf("after SIGTERM: notification %q, want STOPPING=1", msg)
	}
	if err := <-exited; err != nil {
		t.Errorf("os2g mount --foreground after SIGTERM: %v; stderr: %s", err, stderr.String())
	}
	if isMounted(t, mp) {
		t.Errorf("%s still mounted after SIGTERM", mp)
	}
}

// TestDefaultLogFile: a background mount without --log-file, on a host
// without syslog, as root, logs to /var/log/os2g/NAME.log (issue 16: a
// daemon's log is never lost), where its "mounted" line can be read.
func TestDefaultLogFile(t *testing.T) {
	e := newEnv(t)
	if _, err := os.Stat("/dev/log"); err == nil {
		t.Skip("this host has a syslog socket; the daemon logs there")
	}
	mp := e.mountpoint()
	name := strings.ReplaceAll(strings.Trim(mp, "/"), "/", "-") + ".log"
	logPath := filepath.Join("/var/log/os2g", name)
	t.Cleanup(func() { os.Remove(logPath) })
	e.mount(mp)
	// os2g stats names the destination.
	if r := e.run(nil, "stats", mp); r.code != 0 || !strings.Contains(r.stdout, "log             "+logPath+"\n") {
		t.Errorf("os2g stats: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Fatalf("os2g umount: exit %d: %s", r.code, r.stderr)
	}
	// The daemon logs "unmounted" just before it exits.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), "msg=mounted") && strings.Contains(string(b), "msg=unmounted") && strings.Contains(string(b), "mountpoint="+mp) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after mount and umount:\n%s", logPath, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestActionableErrors: the failures a new user meets end in one sentence
// naming the fix, with the right exit status (issue 16 item 4): no
// credentials at all (and no instance metadata contacted), an empty
// prefix (mounts, with a warning), and a user without access to
// /dev/fuse.
func TestActionableErrors(t *testing.T) {
	e := newEnv(t)
	mp := e.mountpoint()
	home := t.TempDir()
	noCreds := []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "HOME=" + home,
		"AWS_CONFIG_FILE=" + filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "credentials")}
	r := e.run(noCreds, "mount", "s3://"+e.srv.Bucket, mp)
	if r.code != 1 || !strings.Contains(r.stderr, "os2g: mount: no AWS credentials found; os2g looked in:") ||
		!strings.Contains(r.stderr, "instance metadata (disabled by AWS_EC2_METADATA_DISABLED=true)") || isMounted(t, mp) {
		t.Errorf("mount without credentials: exit %d, mounted %v, stderr %q", r.code, isMounted(t, mp), r.stderr)
	}

	// A region mismatch, and plain HTTP on an https:// endpoint.
	r = e.run(nil, "mount", "--region", "eu-west-1", "s3://"+e.srv.Bucket, mp)
	if r.code != 1 || !strings.Contains(r.stderr, `os2g: mount: bucket "`+e.srv.Bucket+`" is not in region eu-west-1`) || !strings.Contains(r.stderr, "pass --region") {
		t.Errorf("mount with the wrong region: exit %d, stderr %q", r.code, r.stderr)
	}
	https := "https://" + strings.TrimPrefix(e.srv.URL, "http://")
	r = e.run(nil, "mount", "--endpoint-url", https, "s3://"+e.srv.Bucket, mp)
	if r.code != 1 || !strings.Contains(r.stderr, "os2g: mount: "+https+" does not speak TLS (it answered in plain HTTP); use an http:// endpoint URL") {
		t.Errorf("mount with https:// to a plain HTTP server: exit %d, stderr %q", r.code, r.stderr)
	}
	if isMounted(t, mp) {
		t.Fatalf("%s mounted after failed mounts", mp)
	}

	// An empty prefix mounts, with a warning naming it.
	r = e.run(nil, "mount", "--log-file", filepath.Join(t.TempDir(), "log"), "s3://"+e.srv.Bucket+"/no-such-prefix", mp)
	if r.code != 0 || !strings.Contains(r.stderr, "warning: s3://"+e.srv.Bucket+"/no-such-prefix/ holds no objects") || !isMounted(t, mp) {
		t.Errorf("mount of an empty prefix: exit %d, mounted %v, stderr %q", r.code, isMounted(t, mp), r.stderr)
	}
	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Errorf("os2g umount: exit %d: %s", r.code, r.stderr)
	}

	// A user who may not open /dev/fuse.
	st, err := os.Stat("/dev/fuse")
	if err != nil || st.Mode().Perm()&0o006 == 0o006 {
		t.Logf("skipping the non-root case: every user may open /dev/fuse here")
		return
	}
	dir, err := os.MkdirTemp("", "os2g-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "os2g")
	b, err := os.ReadFile(e.bin)
	if err == nil {
		err = os.WriteFile(bin, b, 0o755)
	}
	userMp := filepath.Join(dir, "mnt")
	if err == nil {
		err = os.Mkdir(userMp, 0o777)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "mount", "--foreground", "s3://"+e.srv.Bucket, userMp)
	cmd.Env = append(append([]string{}, e.env...), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "may not open /dev/fuse (permission denied): run os2g as root, or give the user access") {
		t.Errorf("mount as uid 65534: %v, output %q", err, out)
	}
}
