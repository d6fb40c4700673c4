package fusefs

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/os2g/os2g/objclient/objtest"
)

// isattyErrno issues the TCGETS ioctl that isatty(3) (and so Python's
// open()) sends on every open file, and returns its errno.
func isattyErrno(fd int) syscall.Errno {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}

// TestIoctlENOTTY: isatty on a file and on a directory of the mount is
// ENOTTY (the answer the kernel gives for a regular file on a local disk),
// read-write and read-only, and the file reads normally after it.
func TestIoctlENOTTY(t *testing.T) {
	requireFUSE(t)
	for _, ro := range []bool{false, true} {
		mem := objtest.NewMem()
		want := bytes.Repeat([]byte{3}, 5000)
		seed(t, mem, obj{key: "d/a.png", data: want})
		mnt := testMount(t, mem, Options{ReadOnly: ro, Immutable: ro})
		f, err := os.Open(join(mnt, "d/a.png"))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if e := isattyErrno(int(f.Fd())); e != syscall.ENOTTY {
				t.Fatalf("read-only %v: TCGETS on a file: errno %v, want ENOTTY", ro, e)
			}
		}
		got := make([]byte, 6000)
		n, err := f.Read(got)
		f.Close()
		if err != nil || !bytes.Equal(got[:n], want) {
			t.Fatalf("read after the ioctl: %d bytes, %v", n, err)
		}
		d, err := os.Open(join(mnt, "d"))
		if err != nil {
			t.Fatal(err)
		}
		if e := isattyErrno(int(d.Fd())); e != syscall.ENOTTY {
			t.Errorf("read-only %v: TCGETS on a directory: errno %v, want ENOTTY", ro, e)
		}
		d.Close()
	}
}

// BenchmarkIoctlRoundTrip measures one isatty ioctl on an open file of
// the mount, a FUSE IOCTL round trip through the kernel and the daemon:
// "fast" as mounted (ioctlFastFS), "bridge" through go-fuse's node bridge
// (the code before ioctlFastFS). Both mounts live in this process, so
// allocs/op include the daemon's.
func BenchmarkIoctlRoundTrip(b *testing.B) {
	requireFUSE(b)
	for _, bc := range []struct {
		name   string
		bridge bool
	}{{"fast", false}, {"bridge", true}} {
		b.Run(bc.name, func(b *testing.B) {
			mem := objtest.NewMem()
			mem.PutObject("a.png", []byte("x"), "", nil)
			mnt := testMount(b, mem, Options{ReadOnly: true, Immutable: true, ioctlViaBridge: bc.bridge})
			f, err := os.Open(join(mnt, "a.png"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			fd := int(f.Fd())
			b.ReportAllocs()
			for b.Loop() {
				if e := isattyErrno(fd); e != syscall.ENOTTY {
					b.Fatalf("errno %v", e)
				}
			}
		})
	}
}
