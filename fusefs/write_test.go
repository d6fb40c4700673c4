package fusefs

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

// C21 (scaled): a large sequential write with fsync then close becomes a
// multipart object with the same bytes.
func TestC21LargeSequentialWrite(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	mem.PartSize = 5 << 20
	mnt := testMount(t, mem, Options{PartSize: 5 << 20})
	if err := os.Mkdir(join(mnt, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 40 << 20
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	// dd bs=1M conv=fsync
	f, err := os.OpenFile(join(mnt, "ckpt/a.bin"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < size; off += 1 << 20 {
		if _, err := f.Write(data[off : off+1<<20]); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
	}
	if s := lstat(t, join(mnt, "ckpt/a.bin")); s.Size != size {
		t.Errorf("size while open = %d, want %d (visible and growing)", s.Size, size)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if _, ok := mem.Data("ckpt/a.bin"); !ok {
		t.Errorf("object not in the store after fsync returned")
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	got, ok := mem.Data("ckpt/a.bin")
	if !ok || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("stored object differs (%d bytes, present %v)", len(got), ok)
	}
	info, _ := mem.Stat(t.Context(), "ckpt/a.bin")
	if !strings.HasSuffix(info.ETag, `-8"`) {
		t.Errorf("ETag %s, want a multipart ETag ending in -8", info.ETag)
	}
	if b := readFile(t, join(mnt, "ckpt/a.bin")); !bytes.Equal(b, data) {
		t.Errorf("read back through the mount differs")
	}
}

// C21 (4): a writer killed by SIGKILL leaves no object and no placeholder.
func TestC21KilledWriter(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	mnt := testMount(t, mem, Options{PartSize: 5 << 20, Debug: os.Getenv("OS2G_DEBUG") == "1"})
	p := join(mnt, "k.bin")
	cmd := exec.Command("dd", "if=/dev/zero", "of="+p, "bs=1M", "count=100000")
	var ddErr bytes.Buffer
	cmd.Stderr = &ddErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil && st.Size >= 24<<20 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("writer made no progress: %s", ddErr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// RELEASE is asynchronous; the FLUSH of the dying process is not.
	if _, ok := mem.Data("k.bin"); ok {
		t.Errorf("a partial object k.bin was committed")
	}
	_, err := os.Lstat(p)
	wantErrno(t, "stat k.bin", err, syscall.ENOENT)
}

// C22: overwrite in a loop racing with readers; read-back of a w+b handle;
// a reader during the write sees the old version whole; stat after close.
func TestC22Overwrite(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	v1 := bytes.Repeat([]byte{0xAA}, 1000000)
	v2 := bytes.Repeat([]byte{0xBB}, 2000000)
	seed(t, mem, obj{key: "ckpt/latest.pt", data: v1})
	mnt := testMount(t, mem, Options{})
	p := join(mnt, "ckpt/latest.pt")

	// (c) C reads while B writes: the complete old version.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(v2[:1500000]); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); !bytes.Equal(got, v1) {
		t.Errorf("reader during the overwrite got %d bytes (equal to v1: %v), want v1 whole", len(got), bytes.Equal(got, v1))
	}
	if _, err := f.Write(v2[1500000:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// (d) stat right after close.
	if s := lstat(t, p); s.Size != 2000000 {
		t.Errorf("size right after close = %d, want 2000000", s.Size)
	}
	if got := readFile(t, p); !bytes.Equal(got, v2) {
		t.Errorf("read after the overwrite: %d bytes, want v2", len(got))
	}

	// (a) 50 iterations: A reads all, B rewrites at once.
	for i := range 50 {
		got := readFile(t, p)
		if !bytes.Equal(got, v2) && !bytes.Equal(got, v1) {
			t.Fatalf("iteration %d: read %d bytes of neither version", i, len(got))
		}
		w, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatalf("iteration %d: open for write: %v", i, err)
		}
		if _, err := w.Write(v2); err != nil {
			t.Fatalf("iteration %d: write: %v", i, err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("iteration %d: close: %v", i, err)
		}
	}
	if got, _ := mem.Data("ckpt/latest.pt"); !bytes.Equal(got, v2) {
		t.Errorf("final object: %d bytes, want 2000000 x 0xBB", len(got))
	}

	// (b) w+b: write 4097 bytes, flush, pread.
	rw, err := os.OpenFile(join(mnt, "ckpt/tmp.pt"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Write(bytes.Repeat([]byte{'a'}, 4097)); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 4097)
	n, err := rw.ReadAt(back, 0)
	if n != 4097 || !bytes.Equal(back, bytes.Repeat([]byte{'a'}, 4097)) {
		t.Errorf("pread after write = %d, %v; want all 4097 bytes", n, err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
}

// C22 (c), repeated: readers that open while a writer overwrites read one
// whole version, never a mix or a truncated file.
func TestC22ReadersDuringOverwrite(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	v1 := bytes.Repeat([]byte{0xAA}, 1000000)
	v2 := bytes.Repeat([]byte{0xBB}, 2000000)
	seed(t, mem, obj{key: "latest.pt", data: v1})
	mnt := testMount(t, mem, Options{})
	p := join(mnt, "latest.pt")
	for i := range 20 {
		old := v1
		if i > 0 {
			old = v2
		}
		w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for off := 0; off < len(v2); off += 128 << 10 {
			if off == 256<<10 || off == 1<<20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := os.ReadFile(p)
					if err != nil {
						errs <- err
					} else if !bytes.Equal(got, old) && !bytes.Equal(got, v2) {
						errs <- fmt.Errorf("iteration %d: reader got %d bytes of neither version", i, len(got))
					}
				}()
			}
			if _, err := w.Write(v2[off:min(off+128<<10, len(v2))]); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

// C23: O_APPEND on an existing object is EOPNOTSUPP at open (content kept);
// truncate to 0; extend a new file; a seek-back within the upload window
// is honoured, one before it fails with EINVAL and aborts the upload.
func TestC23AppendTruncateSeek(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	log := append(bytes.Repeat([]byte{'L'}, 99), '\n')
	seed(t, mem, obj{key: "logs/train.log", data: log})
	mnt := testMount(t, mem, Options{})
	lp := join(mnt, "logs/train.log")
	_, err := os.OpenFile(lp, os.O_WRONLY|os.O_APPEND, 0)
	wantErrno(t, "open O_APPEND of an existing object", err, syscall.EOPNOTSUPP)
	_, err = os.OpenFile(lp, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	wantErrno(t, "open('a')", err, syscall.EOPNOTSUPP)
	if got, _ := mem.Data("logs/train.log"); !bytes.Equal(got, log) {
		t.Errorf("log changed by a refused append: %q", got)
	}

	// truncate -s 0 (open O_WRONLY|O_CREAT, ftruncate).
	f, err := os.OpenFile(lp, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(0); err != nil {
		t.Fatalf("ftruncate 0: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if s := lstat(t, lp); s.Size != 0 {
		t.Errorf("size after truncate -s 0 = %d", s.Size)
	}
	if got, ok := mem.Data("logs/train.log"); !ok || len(got) != 0 {
		t.Errorf("object after truncate: %d bytes, present %v", len(got), ok)
	}
	// O_APPEND on the now-empty file works.
	f, err = os.OpenFile(lp, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("append to an empty file: %v", err)
	}
	f.Write([]byte("x\n"))
	f.Write([]byte("y\n"))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := mem.Data("logs/train.log"); string(got) != "x\ny\n" {
		t.Errorf("appended log = %q, want \"x\\ny\\n\"", got)
	}
	// truncate(2) by path to 0.
	if err := os.Truncate(lp, 0); err != nil {
		t.Errorf("truncate(path, 0): %v", err)
	}
	if got, _ := mem.Data("logs/train.log"); len(got) != 0 {
		t.Errorf("after truncate(path, 0): %d bytes", len(got))
	}

	// truncate -s 1024 new.bin
	f, err = os.OpenFile(join(mnt, "new.bin"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1024); err != nil {
		t.Fatalf("ftruncate 1024: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := mem.Data("new.bin"); !bytes.Equal(got, make([]byte, 1024)) {
		t.Errorf("new.bin = %d bytes, want 1024 zero bytes", len(got))
	}

	// Seek-back writer within the window.
	f, err = os.OpenFile(join(mnt, "v.bin"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 1<<20))
	if _, err := f.WriteAt([]byte("HDRHDRHD"), 0); err != nil {
		t.Fatalf("seek-back write: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := append([]byte("HDRHDRHD"), make([]byte, 1<<20-8)...)
	if got, _ := mem.Data("v.bin"); !bytes.Equal(got, want) {
		t.Errorf("v.bin: %d bytes, header %q", len(got), got[:min(8, len(got))])
	}

	// Seek-back before the window: EINVAL at the write, EIO at close, no
	// object (and the previous version of an overwritten file stays).
	for _, name := range []string{"far.bin", "v.bin"} {
		f, err = os.OpenFile(join(mnt, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(make([]byte, 20<<20))
		_, err = f.WriteAt([]byte("HDR"), 0)
		wantErrno(t, "write before the window", err, syscall.EINVAL)
		wantErrno(t, "close after a refused write", f.Close(), syscall.EIO)
	}
	if _, ok := mem.Data("far.bin"); ok {
		t.Errorf("far.bin committed after a refused write")
	}
	if got, _ := mem.Data("v.bin"); !bytes.Equal(got, want) {
		t.Errorf("v.bin replaced by an aborted upload")
	}
	wantNames(t, mnt, "logs", "new.bin", "v.bin")
}

// C24 (scaled): rename of files by copy + delete, replacing a target,
// special characters; directories fail with EXDEV before any change; an
// observer never sees both names missing.
func TestC24Rename(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	big := make([]byte, 20<<20)
	for i := range big {
		big[i] = byte(i * 31)
	}
	seed(t, mem,
		obj{key: "ckpt/step_2000.pt.tmp", data: big},
		obj{key: "ckpt/step_1000.pt", data: make([]byte, 3<<20)},
		obj{key: "ckpt/new.tmp", data: make([]byte, 500)},
		obj{key: "ckpt/run[1]/a.tmp", data: make([]byte, 10)},
	)
	for i := range 1500 {
		seed(t, mem, obj{key: fmt.Sprintf("ckpt/dir1/f%04d", i), data: []byte{1}})
	}
	mnt := testMount(t, mem, Options{})
	ck := join(mnt, "ckpt")
	var stop atomic.Bool
	var both atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			for _, pair := range [][2]string{{"step_2000.pt.tmp", "step_2000.pt"}, {"new.tmp", "step_1000.pt"}} {
				_, e1 := os.Lstat(join(ck, pair[0]))
				_, e2 := os.Lstat(join(ck, pair[1]))
				if e1 != nil && e2 != nil {
					both.Add(1)
				}
			}
		}
	}()
	if err := os.Rename(join(ck, "step_2000.pt.tmp"), join(ck, "step_2000.pt")); err != nil {
		t.Errorf("rename step_2000: %v", err)
	}
	if err := os.Rename(join(ck, "new.tmp"), join(ck, "step_1000.pt")); err != nil {
		t.Errorf("rename new.tmp over step_1000.pt: %v", err)
	}
	if err := os.Rename(join(ck, "run[1]/a.tmp"), join(ck, "run[1]/a.bin")); err != nil {
		t.Errorf("rename run[1]/a.tmp: %v", err)
	}
	wantErrno(t, "mv dir1 dir2", os.Rename(join(ck, "dir1"), join(ck, "dir2")), syscall.EXDEV)
	stop.Store(true)
	<-done
	if n := both.Load(); n != 0 {
		t.Errorf("observer saw both names missing %d times", n)
	}
	if got := readFile(t, join(ck, "step_2000.pt")); sha256.Sum256(got) != sha256.Sum256(big) {
		t.Errorf("step_2000.pt differs after rename")
	}
	_, err := os.Lstat(join(ck, "step_2000.pt.tmp"))
	wantErrno(t, "stat .tmp", err, syscall.ENOENT)
	if s := lstat(t, join(ck, "step_1000.pt")); s.Size != 500 {
		t.Errorf("step_1000.pt size %d, want 500", s.Size)
	}
	if s := lstat(t, join(ck, "run[1]/a.bin")); s.Size != 10 {
		t.Errorf("run[1]/a.bin size %d, want 10", s.Size)
	}
	if _, ok := mem.Data("ckpt/run[1]/a.bin"); !ok {
		t.Errorf("key ckpt/run[1]/a.bin missing")
	}
	if n := len(names(t, join(ck, "dir1"))); n != 1500 {
		t.Errorf("dir1 has %d entries after a refused move, want 1500", n)
	}
	wantNames(t, ck, "dir1", "run[1]", "step_1000.pt", "step_2000.pt")
}

// C25: rm -r, rmdir of a non-empty directory, implicit directories that
// vanish, local mkdir/rmdir, type errors.
func TestC25Remove(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem,
		obj{key: "runs/exp1/a.txt", data: make([]byte, 10)},
		obj{key: "runs/exp1/sub/"},
		obj{key: "runs/exp1/sub/b.txt", data: make([]byte, 20)},
		obj{key: "runs/exp2/c.txt", data: make([]byte, 30)},
		obj{key: "runs/keep.txt", data: make([]byte, 1)},
	)
	mnt := testMount(t, mem, Options{})
	runs := join(mnt, "runs")
	if out, err := exec.Command("rm", "-r", join(runs, "exp1")).CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("rm -r exp1: %v %q", err, out)
	}
	for _, k := range mem.Keys() {
		if strings.HasPrefix(k, "runs/exp1/") {
			t.Errorf("key %q left after rm -r", k)
		}
	}
	_, err := os.Lstat(join(runs, "exp1"))
	wantErrno(t, "stat exp1", err, syscall.ENOENT)
	wantErrno(t, "rmdir exp2", syscall.Rmdir(join(runs, "exp2")), syscall.ENOTEMPTY)
	if err := os.Remove(join(runs, "exp2/c.txt")); err != nil {
		t.Fatal(err)
	}
	wantNames(t, runs, "keep.txt")
	if err := os.Mkdir(join(runs, "local"), 0o755); err != nil {
		t.Errorf("mkdir local: %v", err)
	}
	if err := syscall.Rmdir(join(runs, "local")); err != nil {
		t.Errorf("rmdir local: %v", err)
	}
	wantErrno(t, "unlink runs", syscall.Unlink(runs), syscall.EISDIR)
	wantErrno(t, "rmdir keep.txt", syscall.Rmdir(join(runs, "keep.txt")), syscall.ENOTDIR)
	if out, err := exec.Command("rm", "-rf", join(runs, "nope")).CombinedOutput(); err != nil {
		t.Errorf("rm -rf nope: %v %q", err, out)
	}
	wantErrno(t, "unlink missing", syscall.Unlink(join(runs, "nope")), syscall.ENOENT)
	if keys := mem.Keys(); len(keys) != 1 || keys[0] != "runs/keep.txt" {
		t.Errorf("keys %q, want [runs/keep.txt]", keys)
	}
}

// Reopening for write right after close never fails (RELEASE is
// asynchronous), and a dup'd descriptor's second close is harmless.
func TestReopenAndDupClose(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	mnt := testMount(t, mem, Options{})
	p := join(mnt, "r.bin")
	for i := range 30 {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatalf("iteration %d: %v", i, err)
		}
		fd2, err := syscall.Dup(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "iteration %d\n", i)
		if err := f.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := syscall.Close(fd2); err != nil {
			t.Fatalf("close of the dup: %v", err)
		}
	}
	if got, _ := mem.Data("r.bin"); string(got) != "iteration 29\n" {
		t.Errorf("r.bin = %q", got)
	}
}

var _ = io.EOF

// A larger WriteWindow honours a seek-back further back (zipfile-style
// header patch after a 12 MiB member).
func TestWriteWindowOption(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	mnt := testMount(t, mem, Options{WriteWindow: 32 << 20})
	f, err := os.Create(join(mnt, "z.zip"))
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 12<<20))
	if _, err := f.WriteAt([]byte("PK\x03\x04"), 0); err != nil {
		t.Fatalf("patch 12 MiB back: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := mem.Data("z.zip"); len(got) != 12<<20 || string(got[:4]) != "PK\x03\x04" {
		t.Errorf("z.zip: %d bytes, header %q", len(got), got[:4])
	}
}
