package fusefs

import (
	"context"
	"sync/atomic"
	"syscall"
)

// noXattr, embedded in every node, answers the extended-attribute calls:
// they are not supported, and ENOSYS makes the kernel stop asking and
// return EOPNOTSUPP to applications (CASES C28). calls counts the requests
// that reached the daemon (filesys.xattrCalls).
type noXattr struct{ calls *atomic.Int64 }

// Getxattr implements fs.NodeGetxattrer.
func (x noXattr) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	x.calls.Add(1)
	return 0, syscall.ENOSYS
}

// Listxattr implements fs.NodeListxattrer.
func (x noXattr) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	x.calls.Add(1)
	return 0, syscall.ENOSYS
}

// Setxattr implements fs.NodeSetxattrer.
func (x noXattr) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	x.calls.Add(1)
	return syscall.ENOSYS
}

// Removexattr implements fs.NodeRemovexattrer.
func (x noXattr) Removexattr(ctx context.Context, attr string) syscall.Errno {
	x.calls.Add(1)
	return syscall.ENOSYS
}
