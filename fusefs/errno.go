package fusefs

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
	"github.com/os2g/os2g/upload"
)

// errReadOnly is returned internally for a mutation on a read-only mount.
var errReadOnly = errors.New("fusefs: read-only mount")

// toErrno is the one place where errors become syscall.Errno. op and key
// name the failed operation for the log line that every unexpected error
// (mapped to EIO) gets. The mapping is documented in docs/semantics.md.
func toErrno(log *slog.Logger, op, key string, err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errReadOnly):
		return syscall.EROFS
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, objclient.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, objclient.ErrChanged):
		log.Warn("object changed while open (ETag mismatch)", "op", op, "key", key, "err", err)
		return syscall.ESTALE
	case errors.Is(err, objclient.ErrAccessDenied), errors.Is(err, objclient.ErrInvalidCredentials):
		log.Warn("access denied by the store", "op", op, "key", key, "err", err)
		return syscall.EACCES
	case errors.Is(err, objclient.ErrTooLarge):
		return syscall.EFBIG
	case errors.Is(err, objclient.ErrInvalidArgument):
		log.Warn("store rejected the request as invalid", "op", op, "key", key, "err", err)
		return syscall.EINVAL
	case errors.Is(err, upload.ErrBeforeWindow):
		return syscall.EINVAL
	case errors.Is(err, upload.ErrNotHeld):
		return syscall.EOPNOTSUPP
	case errors.Is(err, upload.ErrPushed):
		return syscall.EBADF
	case errors.Is(err, prefetch.ErrClosed):
		return syscall.EIO
	case errors.Is(err, objclient.ErrUnavailable), errors.Is(err, objclient.ErrThrottled), errors.Is(err, objclient.ErrNoSuchBucket):
		// A store failure may wrap a transport errno (ECONNREFUSED,
		// ECONNRESET); the application gets EIO, never those.
	case errors.As(err, &errno):
		// An errno the handlers chose themselves.
		return errno
	}
	// ErrThrottled (retries exhausted), ErrUnavailable, ErrNoSuchBucket,
	// deadline exceeded and anything unexpected.
	log.Error("store operation failed", "op", op, "key", key, "err", err)
	return syscall.EIO
}
