package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Background mode.
//
// "os2g mount" without --foreground re-executes its own binary as
// "os2g mount --foreground ARGS..." with daemonEnv=3 in the environment, in a
// new session (so the terminal's ^C and hang-up do not reach it), stdin and
// stdout on /dev/null, stderr on a pipe to the parent and a readiness pipe as
// fd 3. Without --log-file the parent first chooses the daemon's log
// destination (logdest.go) and passes it on as --log-file or --log-syslog.
// The child mounts, then points its fd 2 at the log file (or /dev/null when
// it logs to syslog) — which ends the parent's copy of its stderr — and writes
// "ready\n" or "error: MESSAGE\n" to fd 3. The parent exits 0 on "ready";
// otherwise it prints the message (or the child's exit status if the child
// died without one) and exits 1. If the parent goes away before the child is
// ready, the child's write fails and it unmounts and exits, so a mount
// nobody knows about is never left behind.

// readyTimeout bounds the wait for the daemon's readiness report.
const readyTimeout = 2 * time.Minute

// runBackground starts the daemon child with the mount arguments args
// (and extra flags before them) and waits for its readiness report. where,
// if not empty, is the log destination the parent chose, told to a user
// at a terminal once the mount is ready.
func runBackground(ctx context.Context, e Env, args, extra []string, where string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding own executable: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return err
	}
	defer errR.Close()

	cmd := exec.Command(exe, append(append([]string{"mount", "--foreground"}, extra...), args...)...)
	cmd.Env = append(os.Environ(), daemonEnv+"=3")
	cmd.Stderr = errW
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	errW.Close()
	if err != nil {
		return fmt.Errorf("starting the mount daemon: %w", err)
	}

	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(e.Stderr, errR)
	}()
	msgc := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(readyR, 64<<10))
		msgc <- strings.TrimSpace(string(b))
	}()
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)

	// The daemon's own checks are bounded (bucket check 30 s); this is a
	// hang guard against a mount that never completes.
	timeout := time.NewTimer(readyTimeout)
	defer timeout.Stop()
	var msg string
	timedOut := false
wait:
	for {
		select {
		case msg = <-msgc:
			break wait
		case <-sigc:
			// Interrupted while the daemon starts: it unmounts (if it got
			// that far) and reports; keep waiting for that.
			cmd.Process.Signal(syscall.SIGTERM)
		case <-ctx.Done():
			cmd.Process.Signal(syscall.SIGTERM)
		case <-timeout.C:
			timedOut = true
			cmd.Process.Signal(syscall.SIGTERM)
			time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
		}
	}
	if msg == "ready" {
		// The child moved its fd 2 away before reporting, so the copy ends now.
		select {
		case <-copied:
		case <-time.After(5 * time.Second):
		}
		if where != "" && isTerminal(e.Stderr) {
			fmt.Fprintf(e.Stderr, "os2g: mount: mounted; the daemon logs to %s\n", where)
		}
		return cmd.Process.Release()
	}
	werr := cmd.Wait()
	<-copied
	if m, ok := strings.CutPrefix(msg, "error: "); ok {
		fmt.Fprintf(e.Stderr, "os2g: mount: %s\n", m)
		return errReported
	}
	if timedOut {
		return fmt.Errorf("the mount daemon was not ready after %v and was stopped (run with --foreground --debug to see where it hangs)", readyTimeout)
	}
	if werr == nil {
		werr = errors.New("exit status 0")
	}
	return fmt.Errorf("the mount daemon exited before the mount was ready (%v)", werr)
}

// runDaemonChild is the background child: it serves the mount and reports
// readiness on the inherited fd.
func runDaemonChild(ctx context.Context, e Env, m *mountFlags, u S3URL, mountpoint string) error {
	fd, err := strconv.Atoi(e.getenv(daemonEnv))
	if err != nil || fd < 3 {
		return fmt.Errorf("bad %s=%q", daemonEnv, e.getenv(daemonEnv))
	}
	os.Unsetenv(daemonEnv)
	syscall.CloseOnExec(fd) // not for fusermount3 and other helpers
	pipe := os.NewFile(uintptr(fd), "ready-pipe")
	reported := false
	ready := func(mountErr error) error {
		if reported {
			return nil
		}
		reported = true
		defer pipe.Close()
		if mountErr != nil {
			fmt.Fprintf(pipe, "error: %s\n", oneLine(mountErr.Error()))
			return errReported
		}
		// Detach fd 2 from the parent's pipe before saying ready: the
		// parent then stops copying and exits, and later writes (logs,
		// a panic's trace) go to the log file or nowhere, never to a
		// broken pipe.
		target := "/dev/null"
		if m.logFile != "" {
			target = m.logFile
		}
		if f, err := os.OpenFile(target, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			syscall.Dup3(int(f.Fd()), 2, 0)
			f.Close()
		}
		w := bufio.NewWriter(pipe)
		w.WriteString("ready\n")
		if err := w.Flush(); err != nil {
			return fmt.Errorf("the parent process went away before the mount was ready: %w", err)
		}
		return nil
	}
	err = serveMount(ctx, e, m, u, mountpoint, ready)
	if !reported {
		// serveMount returned on a path that did not call ready.
		if err == nil {
			err = errors.New("the daemon stopped before the mount was ready")
		}
		ready(err)
		return errReported
	}
	return err
}
