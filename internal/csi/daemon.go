package csi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// daemon is one "os2g mount --foreground" process serving one volume at its
// staging directory.
type daemon struct {
	cmd     *exec.Cmd
	staging string
	dev     string        // MAJ:MIN of its FUSE mount, for an abort through fusectl
	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // the exit status; read after exited is closed
	tail    *tailBuffer   // last lines of its stderr
}

// tailBuffer keeps the last lines written to it, at most max bytes.
type tailBuffer struct {
	mu    sync.Mutex // guards lines, size
	lines []string
	size  int
	max   int // bytes
}

func (b *tailBuffer) add(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, line)
	b.size += len(line)
	for b.size > b.max && len(b.lines) > 1 {
		b.size -= len(b.lines[0])
		b.lines = b.lines[1:]
	}
}

// message is the daemon's own one-line diagnosis ("os2g: mount: ..."), or
// else its last line of output, or "".
func (b *tailBuffer) message() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.lines) - 1; i >= 0; i-- {
		if m, ok := strings.CutPrefix(b.lines[i], "os2g: mount: "); ok {
			return m
		}
	}
	if n := len(b.lines); n > 0 {
		return b.lines[n-1]
	}
	return ""
}

// errDaemonExited reports a daemon that exited before its mount was live.
var errDaemonExited = errors.New("the os2g daemon exited before the mount was ready")

// startDaemon runs bin as "os2g mount --foreground --allow-other FLAGS
// SOURCE STAGING" with env, and returns once the mount at staging is live
// (it shows in /proc/self/mountinfo as a FUSE mount and answers statfs),
// the daemon exited
// (errDaemonExited wrapped with its own message), ctx ended, or timeout
// passed; in the last two cases the daemon is stopped first. Its output is
// logged line by line with the volume ID.
func startDaemon(ctx context.Context, log *slog.Logger, bin string, spec mountSpec, staging string, env []string, timeout time.Duration, volumeID string) (*daemon, error) {
	args := []string{"mount", "--foreground", "--allow-other"}
	args = append(args, spec.flags...)
	args = append(args, spec.source, staging)
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdin = nil
	// Own process group: a signal meant for the plugin's group (a
	// terminal's ^C in a test) does not reach the daemons, which the
	// plugin stops itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	d := &daemon{cmd: cmd, staging: staging, exited: make(chan struct{}), tail: &tailBuffer{max: 8 << 10}}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 4096), 64<<10)
		for sc.Scan() {
			d.tail.add(sc.Text())
			log.Info("daemon", "volume", volumeID, "pid", cmd.Process.Pid, "line", sc.Text())
		}
	}()
	go func() {
		err := cmd.Wait()
		<-copied
		d.waitErr = err
		close(d.exited)
	}()
	log.Info("daemon started", "volume", volumeID, "pid", cmd.Process.Pid, "args", strings.Join(args[1:], " "))

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		m, ok, err := mountedAt(staging)
		if err != nil {
			d.stop(log, volumeID, 10*time.Second)
			return nil, err
		}
		if ok && strings.HasPrefix(m.FSType, "fuse") && answers(staging, time.Second) {
			d.dev = m.Dev
			return d, nil
		}
		select {
		case <-d.exited:
			msg := d.tail.message()
			if msg == "" {
				msg = fmt.Sprint(d.waitErr)
			}
			return nil, fmt.Errorf("%w: %s", errDaemonExited, msg)
		case <-ctx.Done():
			d.stop(log, volumeID, 10*time.Second)
			return nil, ctx.Err()
		case <-deadline.C:
			d.stop(log, volumeID, 10*time.Second)
			return nil, fmt.Errorf("the os2g daemon's mount was not live after %v (stopped it; last output: %q)", timeout, d.tail.message())
		case <-tick.C:
		}
	}
}

// healthy reports whether the daemon process runs and its mount answers
// statfs within timeout (a daemon stuck in the kernel, or hung, does not).
func (d *daemon) healthy(timeout time.Duration) bool {
	return d.alive() && answers(d.staging, timeout)
}

// alive reports whether the daemon process has not exited.
func (d *daemon) alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// stop ends the daemon: SIGTERM (it unmounts and exits), SIGKILL after
// grace, then, if even that does not end it within grace (a FUSE daemon
// can hang in the kernel on a request to its own mount), an abort of its
// FUSE connection; then a lazy unmount of whatever is left at the staging
// directory. Every wait is bounded: a daemon that still has not exited is
// logged and left behind.
func (d *daemon) stop(log *slog.Logger, volumeID string, grace time.Duration) {
	pid := d.cmd.Process.Pid
	exited := func() bool {
		select {
		case <-d.exited:
			return true
		case <-time.After(grace):
			return false
		}
	}
	if d.alive() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		if !exited() {
			log.Warn("daemon did not exit after SIGTERM; killing it", "volume", volumeID, "pid", pid, "grace", grace)
			d.cmd.Process.Kill()
			if !exited() && d.dev != "" {
				err := abortFuse(d.dev)
				log.Warn("daemon did not exit after SIGKILL; aborted its FUSE connection", "volume", volumeID, "pid", pid, "dev", d.dev, "err", err)
				exited()
			}
		}
	}
	if err := unmountAll(d.staging); err != nil {
		if err2 := syscall.Unmount(d.staging, syscall.MNT_DETACH); err2 != nil && !errors.Is(err2, syscall.EINVAL) {
			log.Warn("staging directory still mounted", "volume", volumeID, "staging", d.staging, "err", err)
		}
	}
	if d.alive() {
		log.Error("daemon still running after SIGTERM, SIGKILL and a FUSE abort; leaving it", "volume", volumeID, "pid", pid)
		return
	}
	log.Info("daemon stopped", "volume", volumeID, "pid", pid, "exit", fmt.Sprint(d.waitErr))
}

// answers reports whether a statfs of path returns within timeout. statfs
// always reaches a FUSE daemon, so a true answer means it serves requests.
func answers(path string, timeout time.Duration) bool {
	done := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		done <- syscall.Statfs(path, &st)
	}()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(timeout):
		return false
	}
}
