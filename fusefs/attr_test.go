package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// C20: every mutation on a read-only mount fails with EROFS; reads work.
func TestC20ReadOnlyMount(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem, obj{key: "train/a.jpg", data: bytes.Repeat([]byte{7}, 1000)})
	mnt := testMount(t, mem, Options{ReadOnly: true})
	a := join(mnt, "train/a.jpg")
	open := func(p string, flags int) error {
		f, err := os.OpenFile(p, flags, 0o644)
		if err == nil {
			f.Close()
		}
		return err
	}
	wantErrno(t, "touch new", open(join(mnt, "new"), os.O_WRONLY|os.O_CREATE), syscall.EROFS)
	wantErrno(t, "echo x >> a.jpg", open(a, os.O_WRONLY|os.O_APPEND), syscall.EROFS)
	wantErrno(t, "open r+b", open(a, os.O_RDWR), syscall.EROFS)
	wantErrno(t, "mkdir", syscall.Mkdir(join(mnt, "d"), 0o755), syscall.EROFS)
	wantErrno(t, "rm", syscall.Unlink(a), syscall.EROFS)
	wantErrno(t, "mv", syscall.Rename(a, join(mnt, "train/b.jpg")), syscall.EROFS)
	wantErrno(t, "chmod", syscall.Chmod(a, 0o600), syscall.EROFS)
	wantErrno(t, "truncate", syscall.Truncate(a, 0), syscall.EROFS)
	wantErrno(t, "setfattr", syscall.Setxattr(a, "user.k", []byte("1"), 0), syscall.EROFS)
	wantErrno(t, "ln -s", syscall.Symlink("a.jpg", join(mnt, "train/l")), syscall.EROFS)
	if b := readFile(t, a); len(b) != 1000 {
		t.Errorf("cat a.jpg = %d bytes, want 1000", len(b))
	}
	if err := open(a, os.O_RDONLY|os.O_CREATE); err != nil {
		t.Errorf("O_RDONLY|O_CREAT of an existing file: %v", err)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Flags&1 != 1 { // ST_RDONLY
		t.Errorf("statvfs f_flag = %#x, want ST_RDONLY set", sfs.Flags)
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	found := false
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == mnt {
			found = true
			if !strings.HasPrefix(f[3], "ro,") && f[3] != "ro" {
				t.Errorf("/proc/mounts options %q, want ro", f[3])
			}
		}
	}
	if !found {
		t.Errorf("mount %s not in /proc/mounts", mnt)
	}
	if keys := mem.Keys(); len(keys) != 1 {
		t.Errorf("store keys after the attempts: %q, want only train/a.jpg", keys)
	}
}

// C20, read-write mount with credentials that cannot write: close()
// reports EACCES and no phantom file stays.
func TestC20WriteDenied(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	st := objtest.NewFaulty(mem, objtest.FaultOptions{Ops: []string{"Put", "Commit"}, Err: objclient.ErrAccessDenied, FailRate: 1})
	mnt := testMount(t, st, Options{})
	p := join(mnt, "new.txt")
	f, err := os.Create(p)
	if err != nil {
		t.Fatalf("create: %v (the failure may surface no earlier than close)", err)
	}
	if _, err := f.Write([]byte("x\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	wantErrno(t, "close", f.Close(), syscall.EACCES)
	_, err = os.Lstat(p)
	wantErrno(t, "stat after failed upload", err, syscall.ENOENT)
	wantNames(t, mnt)
	if keys := mem.Keys(); len(keys) != 0 {
		t.Errorf("store keys: %q, want none", keys)
	}
}

// An upload that fails at commit surfaces at close() as EIO, and leaves no
// object and no visible entry; an overwrite that fails keeps the old
// version.
func TestUploadFailureSurfacesAtClose(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem, obj{key: "old.bin", data: []byte("version 1")})
	st := objtest.NewFaulty(mem, objtest.FaultOptions{Ops: []string{"Commit"}, FailRate: 1})
	mnt := testMount(t, st, Options{})
	for _, name := range []string{"new.bin", "old.bin"} {
		f, err := os.OpenFile(join(mnt, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(bytes.Repeat([]byte("z"), 3<<20)); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "close "+name, f.Close(), syscall.EIO)
	}
	_, err := os.Lstat(join(mnt, "new.bin"))
	wantErrno(t, "stat new.bin", err, syscall.ENOENT)
	wantNames(t, mnt, "old.bin")
	if got := readFile(t, join(mnt, "old.bin")); string(got) != "version 1" {
		t.Errorf("old.bin = %q after a failed overwrite, want the old version", got)
	}
	if keys := mem.Keys(); len(keys) != 1 || keys[0] != "old.bin" {
		t.Errorf("store keys %q, want [old.bin]", keys)
	}
}

// C27: default modes, owners and times; chmod/chown are EPERM;
// x-amz-meta-mode/uid/gid is ignored.
func TestC27ModesAndOwners(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem,
		obj{key: "train/a.jpg", data: make([]byte, 1000)},
		obj{key: "train/b.jpg", data: make([]byte, 1000), meta: map[string]string{"mode": "33216", "uid": "0", "gid": "0"}},
	)
	mnt := testMount(t, mem, Options{AllowOther: true})
	info, err := mem.Stat(context.Background(), "train/a.jpg")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a.jpg", "b.jpg"} {
		s := lstat(t, join(mnt, "train", n))
		if s.Mode != syscall.S_IFREG|0o644 || s.Uid != uint32(os.Getuid()) || s.Gid != uint32(os.Getgid()) || s.Nlink != 1 {
			t.Errorf("%s: mode %o uid %d gid %d nlink %d; want 0644, %d, %d, 1", n, s.Mode, s.Uid, s.Gid, s.Nlink, os.Getuid(), os.Getgid())
		}
		lm := info.LastModified.Unix()
		if s.Mtim.Sec != lm || s.Atim.Sec != lm || s.Ctim.Sec != lm {
			t.Errorf("%s: atime %d mtime %d ctime %d, want all %d", n, s.Atim.Sec, s.Mtim.Sec, s.Ctim.Sec, lm)
		}
	}
	if s := lstat(t, join(mnt, "train")); s.Mode != syscall.S_IFDIR|0o755 || s.Uid != uint32(os.Getuid()) {
		t.Errorf("train: mode %o uid %d, want 0755, %d", s.Mode, s.Uid, os.Getuid())
	}
	wantErrno(t, "chmod", syscall.Chmod(join(mnt, "train/a.jpg"), 0o600), syscall.EPERM)
	wantErrno(t, "chown", syscall.Chown(join(mnt, "train/a.jpg"), 1000, -1), syscall.EPERM)
	wantErrno(t, "chmod dir", syscall.Chmod(join(mnt, "train"), 0o700), syscall.EPERM)
	// Setting the value a node already has is a no-op that succeeds.
	if err := syscall.Chmod(join(mnt, "train/a.jpg"), 0o644); err != nil {
		t.Errorf("chmod to the current mode: %v", err)
	}
	if err := syscall.Chown(join(mnt, "train/a.jpg"), os.Getuid(), os.Getgid()); err != nil {
		t.Errorf("chown to the current owner: %v", err)
	}
	if err := syscall.Chmod(join(mnt, "train"), 0o755); err != nil {
		t.Errorf("chmod dir to the current mode: %v", err)
	}

	// uid 1000 reads both files (allow_other, default modes).
	for d := filepath.Dir(mnt); d != "/" && d != "/tmp"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // t.TempDir parents are 0700
	}
	for _, n := range []string{"a.jpg", "b.jpg"} {
		cmd := exec.Command("cat", join(mnt, "train", n))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
		out, err := cmd.Output()
		if err != nil || len(out) != 1000 {
			t.Errorf("uid 1000 cat %s: %d bytes, %v; want 1000", n, len(out), err)
		}
	}

	// Configured owner and modes.
	mnt2 := testMount(t, mem, Options{UID: 1234, GID: 5678, FileMode: 0o600, DirMode: 0o700})
	if s := lstat(t, join(mnt2, "train/a.jpg")); s.Mode != syscall.S_IFREG|0o600 || s.Uid != 1234 || s.Gid != 5678 {
		t.Errorf("configured: file mode %o uid %d gid %d, want 0600 1234 5678", s.Mode, s.Uid, s.Gid)
	}
	if s := lstat(t, join(mnt2, "train")); s.Mode != syscall.S_IFDIR|0o700 || s.Uid != 1234 {
		t.Errorf("configured: dir mode %o uid %d, want 0700 1234", s.Mode, s.Uid)
	}
}

// C28: no hard links or symlinks (EPERM); xattrs are ENOSYS at the daemon,
// so the kernel answers EOPNOTSUPP and stops asking.
func TestC28LinksAndXattrs(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem, obj{key: "train/a.jpg", data: make([]byte, 1000)})
	c := objtest.NewCounting(mem)
	mnt, srv := testMountServer(t, c, Options{})
	a := join(mnt, "train/a.jpg")
	lstat(t, a)
	wantErrno(t, "ln", syscall.Link(a, join(mnt, "train/a2.jpg")), syscall.EPERM)
	wantErrno(t, "ln -s", syscall.Symlink("a.jpg", join(mnt, "train/link")), syscall.EPERM)
	before := c.Total()
	buf := make([]byte, 256)
	_, err := syscall.Getxattr(a, "user.k", buf)
	wantErrno(t, "getxattr user.k", err, syscall.EOPNOTSUPP)
	_, err = syscall.Getxattr(a, "security.capability", buf)
	wantErrno(t, "getxattr security.capability", err, syscall.EOPNOTSUPP)
	wantErrno(t, "setxattr", syscall.Setxattr(a, "user.k", []byte("v"), 0), syscall.EOPNOTSUPP)
	n, err := syscall.Listxattr(a, buf)
	if err != nil && !errors.Is(err, syscall.EOPNOTSUPP) || err == nil && n != 0 {
		t.Errorf("listxattr = %d, %v; want [] or EOPNOTSUPP", n, err)
	}
	if c.Total() != before {
		t.Errorf("xattr calls made %d store requests, want 0", c.Total()-before)
	}
	srv.fsys.xattrCalls.Store(0)
	f, err := os.Create(join(mnt, "out.bin"))
	if err != nil {
		t.Fatal(err)
	}
	blk := make([]byte, 128<<10)
	for range 256 {
		if _, err := f.Write(blk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if x := srv.fsys.xattrCalls.Load(); x > 1 {
		t.Errorf("writing 32 MiB sent %d xattr requests to the daemon, want at most 1", x)
	}
	if s := lstat(t, join(mnt, "out.bin")); s.Size != 256*128<<10 {
		t.Errorf("out.bin size %d, want %d", s.Size, 256*128<<10)
	}
}

// The mount's kernel readahead is raised to KernelReadAheadKB.
func TestKernelReadAhead(t *testing.T) {
	requireFUSE(t)
	mnt := testMount(t, objtest.NewMem(), Options{KernelReadAheadKB: 2048})
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	dev := uint64(st.Dev)
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", (dev>>8)&0xfff|(dev>>32)&^0xfff, dev&0xff|(dev>>12)&^0xff)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("no bdi readahead knob: %v", err)
	}
	if got := strings.TrimSpace(string(b)); got != "2048" {
		t.Errorf("%s = %s, want 2048", p, got)
	}
}

// Common copy tools work into the mount: cp -p, cp -a, Python's
// shutil.copy and shutil.copy2 (they set mode and times, copy xattrs
// opportunistically).
func TestCopyTools(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	mnt := testMount(t, mem, Options{})
	src := filepath.Join(t.TempDir(), "src.bin")
	data := bytes.Repeat([]byte("copy me "), 1000)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Errorf("%s %q: %v\n%s", name, args, err, out)
		}
	}
	run("cp", "-p", src, join(mnt, "cp-p.bin"))
	run("cp", "-a", src, join(mnt, "cp-a.bin"))
	if py := "/usr/bin/python3"; fileExists(py) {
		run(py, "-c", "import shutil,sys; shutil.copy(sys.argv[1], sys.argv[2]); shutil.copy2(sys.argv[1], sys.argv[3])", src, join(mnt, "shutil-copy.bin"), join(mnt, "shutil-copy2.bin"))
	}
	for _, k := range mem.Keys() {
		if got, _ := mem.Data(k); !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes, want %d", k, len(got), len(data))
		}
	}
	if n := len(mem.Keys()); n < 2 {
		t.Errorf("keys %q", mem.Keys())
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// UID/GID 0 mean the mounting user unless UIDSet/GIDSet say otherwise.
func TestOwnerIDs(t *testing.T) {
	for _, tc := range []struct {
		v    uint32
		set  bool
		want uint32
	}{{0, false, 1000}, {0, true, 0}, {7, false, 7}, {7, true, 7}} {
		if got := ownerID(tc.v, tc.set, 1000); got != tc.want {
			t.Errorf("ownerID(%d, %v, 1000) = %d, want %d", tc.v, tc.set, got, tc.want)
		}
	}
	o, err := Options{Store: objtest.NewMem(), UID: 0, UIDSet: true, GID: 0, GIDSet: true}.withDefaults()
	if err != nil || o.UID != 0 || o.GID != 0 {
		t.Errorf("explicit 0: uid %d gid %d (%v)", o.UID, o.GID, err)
	}
	o, err = Options{Store: objtest.NewMem()}.withDefaults()
	if err != nil || o.UID != uint32(os.Getuid()) || o.GID != uint32(os.Getgid()) {
		t.Errorf("default: uid %d gid %d (%v), want %d %d", o.UID, o.GID, err, os.Getuid(), os.Getgid())
	}

	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem, obj{key: "o/x", data: []byte("x")})
	mnt := testMount(t, mem, Options{UID: 4242, UIDSet: true, GID: 0, GIDSet: true})
	for _, p := range []string{"o", "o/x"} {
		if st := lstat(t, join(mnt, p)); st.Uid != 4242 || st.Gid != 0 {
			t.Errorf("%s: uid %d gid %d, want 4242 0", p, st.Uid, st.Gid)
		}
	}
}
