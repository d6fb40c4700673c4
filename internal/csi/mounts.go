package csi

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/os2g/os2g/internal/mountinfo"
)

// readMounts parses /proc/self/mountinfo.
func readMounts() ([]mountinfo.Entry, error) {
	f, err := os.Open(mountinfo.SelfPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.Parse(f)
}

// mountedAt returns the topmost mount whose target is path (absolute,
// clean), if any.
func mountedAt(path string) (mountinfo.Entry, bool, error) {
	ms, err := readMounts()
	if err != nil {
		return mountinfo.Entry{}, false, err
	}
	m, ok := mountinfo.At(ms, path)
	return m, ok, nil
}

// bindMount bind-mounts source onto target, read-only if ro. A failure of
// the read-only remount undoes the bind.
func bindMount(source, target string, ro bool) error {
	if err := syscall.Mount(source, target, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
	}
	if ro {
		flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
		if err := syscall.Mount("", target, "", flags, ""); err != nil {
			syscall.Unmount(target, syscall.MNT_DETACH)
			return fmt.Errorf("read-only remount of %s: %w", target, err)
		}
	}
	return nil
}

// unmountAll unmounts every mount stacked at path (a stale FUSE mount
// included). A busy mount is reported as an error; EINVAL (not a mount
// point) and ENOENT end the loop without error.
func unmountAll(path string) error {
	for i := 0; i < 16; i++ {
		_, ok, err := mountedAt(path)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		err = syscall.Unmount(path, 0)
		switch {
		case err == nil:
		case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			return nil
		case errors.Is(err, syscall.EBUSY):
			return fmt.Errorf("unmount %s: %w (still in use)", path, err)
		default:
			// A dead FUSE daemon's mount can refuse a plain unmount; a
			// lazy one always detaches it.
			if err2 := syscall.Unmount(path, syscall.MNT_DETACH); err2 != nil {
				return fmt.Errorf("unmount %s: %w", path, err)
			}
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", path)
}

// fuseConnDir is where the kernel's fusectl file system lists FUSE
// connections (Documentation/filesystems/fuse.rst, "Control filesystem").
const fuseConnDir = "/sys/fs/fuse/connections"

// abortFuse aborts the FUSE connection of the mount whose device is dev
// ("0:MIN"): every request waiting on its daemon fails with ENOTCONN, which
// frees a daemon stuck in the kernel on its own mount.
func abortFuse(dev string) error {
	_, minor, ok := strings.Cut(dev, ":")
	if !ok || minor == "" || strings.ContainsAny(minor, "/.") {
		return fmt.Errorf("bad FUSE device %q", dev)
	}
	if names, err := os.ReadDir(fuseConnDir); err == nil && len(names) == 0 {
		// fusectl is not mounted (systemd mounts it on most hosts; a
		// container may lack it): mount it, as the kernel documents.
		syscall.Mount("fusectl", fuseConnDir, "fusectl", 0, "")
	}
	return os.WriteFile(fuseConnDir+"/"+minor+"/abort", []byte("1"), 0)
}
