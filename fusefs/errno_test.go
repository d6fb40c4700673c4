package fusefs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/upload"
)

// TestToErrno: each sentinel maps to its documented errno, and a transport
// errno buried in a store failure never leaks to the application.
func TestToErrno(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"nil", nil, 0},
		{"not found", fmt.Errorf("x: %w", objclient.ErrNotFound), syscall.ENOENT},
		{"changed", fmt.Errorf("x: %w", objclient.ErrChanged), syscall.ESTALE},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), syscall.EINTR},
		{"read-only", errReadOnly, syscall.EROFS},
		{"denied", fmt.Errorf("x: %w", objclient.ErrAccessDenied), syscall.EACCES},
		{"bad creds", fmt.Errorf("x: %w", objclient.ErrInvalidCredentials), syscall.EACCES},
		{"too large", fmt.Errorf("x: %w", objclient.ErrTooLarge), syscall.EFBIG},
		{"throttled", fmt.Errorf("x: %w", objclient.ErrThrottled), syscall.EIO},
		{"refused", fmt.Errorf("x: %w: %w", objclient.ErrUnavailable, refused), syscall.EIO},
		{"reset", fmt.Errorf("x: %w: %w", objclient.ErrUnavailable, syscall.ECONNRESET), syscall.EIO},
		{"before the write window", upload.ErrBeforeWindow, syscall.EINVAL},
		{"truncate before the window", upload.ErrNotHeld, syscall.EOPNOTSUPP},
		{"read of pushed bytes", upload.ErrPushed, syscall.EBADF},
		{"handler errno", syscall.EOPNOTSUPP, syscall.EOPNOTSUPP},
		{"unexpected", fmt.Errorf("something else"), syscall.EIO},
	} {
		if got := toErrno(log, "op", "key", tc.err); got != tc.want {
			t.Errorf("%s: toErrno(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
