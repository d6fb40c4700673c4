package fusefs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The per-open ioctl.
//
// isatty(3) is an ioctl (TCGETS), and Python's open() calls it on every
// file it opens (to choose line buffering), so a DataLoader epoch sends the
// daemon one FUSE IOCTL per image; the kernel forwards every one (it only
// turns a daemon's ENOSYS into ENOTTY, it does not stop asking). os2g
// implements no ioctl, so ioctlFastFS answers each with ENOTTY, what a
// regular file on a local disk answers, straight from the request loop:
// go-fuse's node bridge would first look the node and the handle up under
// its lock, only to find no ioctl method and answer the same.

// ioctlFastFS is the node file system with IOCTL answered up front.
type ioctlFastFS struct {
	fuse.RawFileSystem
}

// Ioctl answers ENOTTY (inappropriate ioctl for this file) for every file
// and directory of the mount.
func (ioctlFastFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	return fuse.Status(syscall.ENOTTY)
}
