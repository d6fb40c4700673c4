package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// mountClients are the clients that are FUSE mounts (the rest run in
// this process or on a local directory).
var mountClients = map[string]bool{"os2g": true, baseClient: true, "s3fs": true, "rclone": true}

// mounted is one live mount of a client.
type mounted struct {
	Client string
	Dir    string // mount point
	PID    int    // the daemon serving it; 0 if it could not be found
	// Conn is the FUSE connection number (the mount's device minor), for
	// /sys/fs/fuse/connections/Conn/abort; -1 if unknown.
	Conn int
	undo func()
}

// exeHint is what the daemon's argv[0] base name contains.
func exeHint(client string) string {
	switch client {
	case "os2g", baseClient:
		return "os2g"
	case "s3fs":
		return "s3fs"
	default:
		return "rclone"
	}
}

// mount mounts the bucket with client on a fresh mount point and waits
// until it is live. ro mounts read-only. The mount is registered for
// cleanup; call m.unmount() when done. The daemon runs on the CPUs of
// rn's placement (taskset; its threads and children inherit them).
func (h *harness) mount(ctx context.Context, rn runner, ro bool) (*mounted, error) {
	client := rn.Client
	h.mountSeq++
	dir := filepath.Join(h.workDir, "mnt", fmt.Sprintf("%s-%d", client, h.mountSeq))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(h.workDir, "logs", fmt.Sprintf("%s-%d.log", client, h.mountSeq))
	var cmd *exec.Cmd
	env := os.Environ()
	switch client {
	case "os2g", baseClient:
		bin := h.os2gBin
		if client == baseClient {
			bin = h.cfg.Os2gBase
		}
		args := []string{"mount", "--endpoint-url", h.gw.Endpoint, "--force-path-style", "--log-file", logPath}
		args = append(args, strings.Fields(h.cfg.Os2gArgs)...)
		if ro {
			args = append(args, strings.Fields(h.cfg.Os2gReadArgs)...)
		}
		args = append(args, "s3://"+h.cfg.Bucket, dir)
		cmd = exec.CommandContext(ctx, bin, args...)
		env = append(env, "AWS_ACCESS_KEY_ID="+h.cfg.AccessKey, "AWS_SECRET_ACCESS_KEY="+h.cfg.SecretKey,
			"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL="+h.gw.Endpoint)
	case "s3fs":
		args := []string{h.cfg.Bucket, dir, "-o", "url=" + h.gw.Endpoint, "-o", "use_path_request_style",
			"-o", "passwd_file=" + h.s3fsPasswd, "-o", "endpoint=us-east-1", "-o", "logfile=" + logPath, "-o", "dbglevel=warn"}
		if ro {
			args = append(args, "-o", "ro")
		}
		args = append(args, strings.Fields(h.cfg.S3fsArgs)...)
		cmd = exec.CommandContext(ctx, h.cfg.S3fs, args...)
	case "rclone":
		args := []string{"mount", ":s3:" + h.cfg.Bucket, dir, "--s3-provider", "Other", "--s3-endpoint", h.gw.Endpoint,
			"--s3-access-key-id", h.cfg.AccessKey, "--s3-secret-access-key", h.cfg.SecretKey, "--s3-region", "us-east-1",
			"--config", h.rcloneConf, "--log-file", logPath, "--daemon"}
		if ro {
			args = append(args, "--read-only")
		}
		args = append(args, strings.Fields(h.cfg.RcloneArgs)...)
		cmd = exec.CommandContext(ctx, h.cfg.Rclone, args...)
		env = withoutEnv(env, "AWS_CA_BUNDLE")
	default:
		return nil, fmt.Errorf("%s is not a mount client", client)
	}
	if cpus := h.cfg.daemonCPUs(rn.Placement); len(cpus) > 0 {
		name, args := fencedCommand(cpus, cmd.Path, cmd.Args[1:]...)
		cmd = exec.CommandContext(ctx, name, args...)
	}
	cmd.Env = env
	out, err := os.OpenFile(logPath+".out", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	// A daemon that stays in our process group would get the terminal's
	// Ctrl-C before the harness could unmount it cleanly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	m := &mounted{Client: client, Dir: dir, Conn: -1}
	// Register the cleanup before starting: a mount half made is still undone.
	m.undo = h.cleanups.add("unmount "+dir, func(ctx context.Context) error { return h.unmount(ctx, m) })
	h.log.Debug("mount", "client", client, "cmd", cmd.String())
	mctx, cancel := context.WithTimeout(ctx, h.cfg.MountTimeout)
	defer cancel()
	if err := runUntil(mctx, cmd); err != nil {
		m.undo()
		return nil, fmt.Errorf("mount %s: %w (log %s)", client, err, logPath)
	}
	for !isMounted(dir) {
		select {
		case <-mctx.Done():
			m.undo()
			return nil, fmt.Errorf("mount %s: %s did not appear within %v (log %s)", client, dir, h.cfg.MountTimeout, logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The daemon may still be forking; give the scan a few tries.
	for range 20 {
		if m.PID = findDaemonPID(dir, exeHint(client)); m.PID != 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m.PID == 0 {
		h.log.Warn("daemon process not found; CPU and RSS not measured", "client", client, "mount", dir)
	}
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) == nil {
		m.Conn = int(unixMinor(st.Dev))
	}
	// First access: make sure the root answers before anything is timed.
	if _, err := os.ReadDir(dir); err != nil {
		m.undo()
		return nil, fmt.Errorf("mount %s: readdir of the fresh mount: %w (log %s)", client, err, logPath)
	}
	return m, nil
}

// runUntil runs cmd (a mount command that daemonizes) and waits for it to
// exit, with the command's own exit status as error.
func runUntil(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return ctx.Err()
	}
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// unmount unmounts m (fusermount -u, retried while busy, then lazily),
// waits for its daemon to exit (SIGTERM, then SIGKILL if it lingers) and
// removes the mount point.
func (h *harness) unmount(ctx context.Context, m *mounted) error {
	var errs []error
	for i := 0; isMounted(m.Dir); i++ {
		args := []string{"-u", m.Dir}
		if i >= 20 {
			args = []string{"-u", "-z", m.Dir}
		}
		out, err := exec.CommandContext(ctx, h.cfg.Fusermount, args...).CombinedOutput()
		if err == nil {
			continue
		}
		if i >= 20 {
			errs = append(errs, fmt.Errorf("fusermount %v: %w: %s", args, err, strings.TrimSpace(string(out))))
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if m.PID != 0 {
		if err := waitExit(ctx, m.PID, m.Dir, 20*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(m.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitExit waits for the daemon pid (identified also by its mount point in
// its command line, so a reused pid is left alone) to exit, then signals it.
func waitExit(ctx context.Context, pid int, dir string, grace time.Duration) error {
	alive := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(b), dir) {
			return false
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err == nil && parseProcStatState(st) != "Z"
	}
	deadline := time.Now().Add(grace)
	signalled := false
	for alive() {
		if time.Now().After(deadline) {
			if signalled {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				return fmt.Errorf("daemon %d of %s ignored SIGTERM after unmount; killed", pid, dir)
			}
			_ = syscall.Kill(pid, syscall.SIGTERM)
			signalled = true
			deadline = time.Now().Add(5 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if signalled {
		return fmt.Errorf("daemon %d of %s did not exit within %v of its unmount; needed SIGTERM", pid, dir, grace)
	}
	return nil
}

// unixMinor extracts the minor number of a Linux dev_t.
func unixMinor(dev uint64) uint32 {
	return uint32((dev & 0xff) | ((dev >> 12) & 0xffffff00))
}

// abort ends a mount that does not answer: the FUSE connection is aborted
// (every pending and future request fails with ENOTCONN, so blocked
// readers return), the daemon is killed and the mount point detached. The
// regular unmount then only cleans up.
func (h *harness) abort(m *mounted) {
	progress("abort: %s (%s): step deadline passed or interrupted; aborting the mount", m.Dir, m.Client)
	if m.Conn >= 0 {
		_ = os.WriteFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", m.Conn), []byte("1"), 0)
	}
	if m.PID != 0 {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", m.PID)); err == nil && strings.Contains(string(b), m.Dir) {
			_ = syscall.Kill(m.PID, syscall.SIGKILL)
		}
	}
	_ = exec.Command(h.cfg.Fusermount, "-u", "-z", m.Dir).Run()
}
