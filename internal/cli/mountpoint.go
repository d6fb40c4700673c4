package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/os2g/os2g/internal/mountinfo"
)

// errStaleMount: the mount point is a FUSE mount whose daemon is gone.
var errStaleMount = errors.New("stale mount")

func staleErr(mp string) error {
	return fmt.Errorf("mount point %s is a stale FUSE mount left by a daemon that died (transport endpoint is not connected); clear it with: fusermount3 -u %s%w", mp, mp, silent{errStaleMount})
}

// silent wraps an error so that it matches with errors.Is but adds no text.
type silent struct{ err error }

func (s silent) Error() string { return "" }
func (s silent) Unwrap() error { return s.err }

// IsMounted reports whether path (absolute, clean) is the target of a mount
// in /proc/self/mountinfo.
func IsMounted(path string) bool {
	_, ok := mountinfo.At(mountinfo.Self(), path)
	return ok
}

// checkMountpoint validates a mount point and returns its absolute path: it
// must exist, be a directory, not be a FUSE mount already (live or stale),
// and be empty unless nonempty is set.
func checkMountpoint(mp string, nonempty bool) (string, error) {
	abs, err := filepath.Abs(mp)
	if err != nil {
		return "", fmt.Errorf("mount point %s: %w", mp, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED):
		return "", staleErr(abs)
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("mount point %s does not exist (create it with: mkdir -p %s)", abs, abs)
	case errors.Is(err, os.ErrPermission):
		return "", fmt.Errorf("mount point %s: permission denied", abs)
	case err != nil:
		return "", fmt.Errorf("mount point %s: %w", abs, err)
	case !st.IsDir():
		return "", fmt.Errorf("mount point %s is not a directory", abs)
	}
	// Resolve symlinks so the mount table comparison sees the kernel's path.
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	if m, ok := mountinfo.At(mountinfo.Self(), abs); ok && strings.HasPrefix(m.FSType, "fuse") {
		// stat may be answered from the kernel's attribute cache; statfs
		// always reaches the daemon, so it tells a dead one from a live one.
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(abs, &sfs); errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
			return "", staleErr(abs)
		}
		return "", fmt.Errorf("%s is already mounted (%s from %s); unmount it first with: fusermount3 -u %s", abs, m.FSType, m.Source, abs)
	}
	if !nonempty {
		d, err := os.Open(abs)
		if err != nil {
			return "", fmt.Errorf("mount point %s: %w", abs, err)
		}
		names, _ := d.Readdirnames(1)
		d.Close()
		if len(names) > 0 {
			return "", fmt.Errorf("mount point %s is not empty (mounting would hide its contents; pass --nonempty to mount over them)", abs)
		}
	}
	return abs, nil
}
