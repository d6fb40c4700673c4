package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// C01: implicit directories, resolvable by a direct path lookup right
// after mounting, with delimiter listings and no HEAD.
func TestC01ImplicitDirectories(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem,
		obj{key: "train/cls_a/img_0000.jpg", data: make([]byte, 10240)},
		obj{key: "train/cls_a/img_0001.jpg", data: make([]byte, 10240)},
		obj{key: "train/cls_b/img_0000.jpg", data: make([]byte, 20480)},
		obj{key: "val/img_0000.jpg", data: make([]byte, 5000)},
	)
	c := objtest.NewCounting(mem)
	mnt := testMount(t, c, Options{})

	// 1. The very first syscall: a deep stat.
	st := lstat(t, join(mnt, "train/cls_b/img_0000.jpg"))
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size != 20480 {
		t.Errorf("stat: mode %o size %d, want regular file of 20480", st.Mode, st.Size)
	}
	if got := c.Count("List"); got != 3 {
		t.Errorf("first stat made %d LISTs, want 3 (one per path component)", got)
	}
	if got := c.Count("Stat"); got != 0 {
		t.Errorf("first stat made %d HEADs, want 0", got)
	}
	// 2-3.
	wantNames(t, mnt, "train", "val")
	wantNames(t, join(mnt, "train"), "cls_a", "cls_b")
	// 4.
	st = lstat(t, join(mnt, "train"))
	if st.Mode != syscall.S_IFDIR|0o755 {
		t.Errorf("train mode = %o, want directory 0755", st.Mode)
	}
	// 5.
	_, err := os.ReadFile(join(mnt, "train"))
	wantErrno(t, "cat train", err, syscall.EISDIR)
	// 6.
	for _, p := range []string{"trai", "train/cls"} {
		_, err := os.Lstat(join(mnt, p))
		wantErrno(t, "stat "+p, err, syscall.ENOENT)
	}
}

// C02: directory markers "dir/" (any type) and zero-byte "dir" with
// Content-Type application/x-directory.
func TestC02DirectoryMarkers(t *testing.T) {
	eachStore(t, func(t *testing.T, st objclient.Store) {
		seed(t, st,
			obj{key: "logs/", ct: "application/x-directory"},
			obj{key: "imgs/", ct: "binary/octet-stream"},
			obj{key: "imgs/a.jpg", data: make([]byte, 100)},
			obj{key: "meta", ct: "application/x-directory"},
			obj{key: "meta/b.json", data: make([]byte, 50)},
			obj{key: "emptyx", ct: "application/x-directory"},
			obj{key: "plain0", ct: "application/octet-stream"},
		)
		mnt := testMount(t, st, Options{})
		wantNames(t, mnt, "emptyx", "imgs", "logs", "meta", "plain0")
		wantNames(t, join(mnt, "logs"))
		wantNames(t, join(mnt, "imgs"), "a.jpg")
		for _, d := range []string{"meta", "emptyx", "logs", "imgs"} {
			if m := lstat(t, join(mnt, d)).Mode; m != syscall.S_IFDIR|0o755 {
				t.Errorf("%s mode = %o, want directory 0755", d, m)
			}
		}
		wantNames(t, join(mnt, "meta"), "b.json")
		if s := lstat(t, join(mnt, "plain0")); s.Mode&syscall.S_IFMT != syscall.S_IFREG || s.Size != 0 {
			t.Errorf("plain0: mode %o size %d, want empty regular file", s.Mode, s.Size)
		}
		if b := readFile(t, join(mnt, "plain0")); len(b) != 0 {
			t.Errorf("cat plain0 = %d bytes, want 0", len(b))
		}
		// Read-write mount: rmdir deletes the marker.
		if err := syscall.Rmdir(join(mnt, "logs")); err != nil {
			t.Errorf("rmdir logs: %v", err)
		}
		if _, ok := storeData(t, st, "logs/"); ok {
			t.Errorf("marker logs/ still in the store after rmdir")
		}
		if err := syscall.Rmdir(join(mnt, "emptyx")); err != nil {
			t.Errorf("rmdir emptyx: %v", err)
		}
		if _, ok := storeData(t, st, "emptyx"); ok {
			t.Errorf("marker emptyx still in the store after rmdir")
		}
		wantErrno(t, "rmdir meta", syscall.Rmdir(join(mnt, "meta")), syscall.ENOTEMPTY)
		wantNames(t, mnt, "imgs", "meta", "plain0")
	})
}

// C02 on a read-only mount: rmdir is EROFS.
func TestC02ReadOnlyRmdir(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem, obj{key: "logs/", ct: "application/x-directory"})
	mnt := testMount(t, mem, Options{ReadOnly: true})
	wantErrno(t, "rmdir logs", syscall.Rmdir(join(mnt, "logs")), syscall.EROFS)
}

// C04: keys that are not POSIX names are skipped, never aliased.
func TestC04UnsafeKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, st objclient.Store) {
		long := "long/" + strings.Repeat("x", 300) + ".bin"
		seed(t, st,
			obj{key: "exp2//cls/x.jpg", data: make([]byte, 100)},
			obj{key: "exp2/y.jpg", data: make([]byte, 200)},
			obj{key: "data/./a.bin", data: make([]byte, 10)},
			obj{key: "data/../b.bin", data: make([]byte, 20)},
			obj{key: "data/.", data: make([]byte, 1)},
			obj{key: "data/ok.bin", data: make([]byte, 30)},
			obj{key: "/lead.bin", data: make([]byte, 40)},
			obj{key: long, data: make([]byte, 50)},
			obj{key: "long/short.bin", data: make([]byte, 60)},
		)
		mnt := testMount(t, st, Options{})
		wantNames(t, mnt, "data", "exp2", "long")
		wantNames(t, join(mnt, "exp2"), "y.jpg")
		wantNames(t, join(mnt, "data"), "ok.bin")
		_, err := os.Lstat(join(mnt, "b.bin"))
		wantErrno(t, "stat b.bin", err, syscall.ENOENT)
		_, err = os.ReadFile(join(mnt, "data/a.bin"))
		wantErrno(t, "cat data/a.bin", err, syscall.ENOENT)
		wantNames(t, join(mnt, "long"), "short.bin")
		_, err = os.Lstat(join(mnt, long))
		wantErrno(t, "stat long name", err, syscall.ENAMETOOLONG)
		if s := lstat(t, join(mnt, "data/ok.bin")); s.Size != 30 {
			t.Errorf("data/ok.bin size %d, want 30", s.Size)
		}
	})
}

// C05: special characters are byte-exact, never decoded.
func TestC05SpecialCharacters(t *testing.T) {
	eachStore(t, func(t *testing.T, st objclient.Store) {
		files := []struct{ name, content string }{
			{"a b.txt", "A_B"}, {"a+b.txt", "APB"}, {"100%.csv", "1,2\n"}, {"%2F.txt", "slash"},
			{"trail ", "trail!"}, {" lead", "leading"}, {"c++.h", "int x=1;"}, {"q?x=1&y=2", "queryname"},
			{"hash#1", "hashname!!"}, {"tilde~", "tildename!!"}, {"run books/x.txt", "in run books"},
		}
		for _, f := range files {
			seed(t, st, obj{key: "sp/" + f.name, data: []byte(f.content)})
		}
		mnt := testMount(t, st, Options{})
		got := names(t, join(mnt, "sp"))
		want := []string{" lead", "%2F.txt", "100%.csv", "a b.txt", "a+b.txt", "c++.h", "hash#1", "q?x=1&y=2", "run books", "tilde~", "trail "}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("ls sp = %q, want %q", got, want)
		}
		for _, f := range files {
			if strings.Contains(f.name, "/") {
				continue
			}
			p := join(mnt, "sp", f.name)
			if s := lstat(t, p); s.Size != int64(len(f.content)) {
				t.Errorf("%q size %d, want %d", f.name, s.Size, len(f.content))
			}
			if b := readFile(t, p); string(b) != f.content {
				t.Errorf("cat %q = %q, want %q", f.name, b, f.content)
			}
		}
		writeFile(t, join(mnt, "sp", "new 50%+x.bin"), []byte("hi\n"))
		if b, ok := storeData(t, st, "sp/new 50%+x.bin"); !ok || !bytes.Equal(b, []byte("hi\n")) {
			t.Errorf("created key sp/new 50%%+x.bin: %q, %v; want \"hi\\n\"", b, ok)
		}
	})
}

// C17: a throttled lookup or listing fails with EIO, never ENOENT, and
// leaves no negative entry: the next attempt succeeds.
func TestC17ThrottlingIsNotNotFound(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem, obj{key: "train/s_012345.jpg", data: make([]byte, 100)})
	st := objtest.NewFaulty(mem, objtest.FaultOptions{Ops: []string{"List"}, Err: objclient.ErrThrottled, FailFirstN: 2})
	mnt := testMount(t, st, Options{})
	p := join(mnt, "train/s_012345.jpg")
	_, err := os.Lstat(p)
	wantErrno(t, "stat while throttled", err, syscall.EIO)
	_, err = os.ReadDir(mnt)
	wantErrno(t, "ls while throttled", err, syscall.EIO)
	if s := lstat(t, p); s.Size != 100 {
		t.Errorf("stat after the fault window: size %d, want 100", s.Size)
	}
	wantNames(t, mnt, "train")
}

// A file being written is listed, with its size growing, before its upload
// is committed.
func TestNewFileVisibleWhileWritten(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem, obj{key: "d/old", data: []byte("o")})
	mnt := testMount(t, mem, Options{})
	wantNames(t, join(mnt, "d"), "old")
	f, err := os.Create(join(mnt, "d/new"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(make([]byte, 12345))
	wantNames(t, join(mnt, "d"), "new", "old")
	es, err := os.ReadDir(join(mnt, "d"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if info, err := e.Info(); err != nil || e.Name() == "new" && info.Size() != 12345 {
			t.Errorf("%s: %v, size %v; want 12345 for new", e.Name(), err, info)
		}
	}
	if _, ok := mem.Data("d/new"); ok {
		t.Errorf("d/new in the store before close")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, ok := mem.Data("d/new"); !ok || len(b) != 12345 {
		t.Errorf("d/new after close: %d bytes, present %v", len(b), ok)
	}
}

// A large directory whose listing went stale is listed again in the
// background on the first lookup miss, instead of one probe per file.
func TestStaleDirectoryRelisted(t *testing.T) {
	requireFUSE(t)
	const n = 2000
	syn := &synthStore{families: []synthFamily{{prefix: "dir/", format: "f%05d", count: n, obj: func(i int) synthObj {
		return synthObj{size: 10, etag: `"x"`, mtime: time.Unix(1700000000, 0), fill: byteFill(5)}
	}}}}
	c := objtest.NewCounting(syn)
	var clock atomic.Int64
	clock.Store(1e18)
	// A 1 ns TTL makes the kernel ask every time; the frozen clock decides
	// what the daemon considers fresh.
	mnt, srv := testMountServer(t, c, Options{MetadataTTL: time.Nanosecond, NegativeTTL: time.Nanosecond, clock: clock.Load})
	if got := len(names(t, join(mnt, "dir"))); got != n {
		t.Fatalf("ls dir: %d entries", got)
	}
	base := c.Count("List")
	for i := range 50 {
		lstat(t, join(mnt, fmt.Sprintf("dir/f%05d", i)))
	}
	if l := c.Count("List") - base; l != 0 {
		t.Errorf("stats within the TTL made %d LISTs, want 0", l)
	}
	clock.Add(int64(time.Second)) // everything is stale now
	lstat(t, join(mnt, "dir/f00100"))
	d := srv.root.GetChild("dir").Operations().(*dirNode)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d.mu.Lock()
		busy := d.refreshing
		d.mu.Unlock()
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("background re-listing did not finish")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mid := c.Count("List")
	c.Reset()
	for i := 200; i < 400; i++ {
		lstat(t, join(mnt, fmt.Sprintf("dir/f%05d", i)))
	}
	// (The root's own entry "dir" may be probed again: the kernel
	// revalidates it at jiffy granularity.)
	if l := c.Count("List") - c.KeyCount("List", "dir"); l != 0 {
		t.Errorf("stats after the re-listing made %d LISTs in dir/, want 0", l)
	}
	if l := mid - base; l > 2+n/1000+1 {
		t.Errorf("the stale lookup and the re-listing made %d LISTs, want a probe plus %d pages", l, n/1000)
	}
}
