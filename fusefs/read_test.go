package fusefs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
	"github.com/os2g/os2g/prefetch"
)

func dups(s []string) int {
	n := 0
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			n++
		}
	}
	return n
}

const c09Size = 6442450944 // 6 GiB

func c09Store() *synthStore {
	return &synthStore{objs: map[string]synthObj{
		"ckpt/model.bin": {size: c09Size, etag: etagN("model", 768), mtime: time.Unix(1700000000, 0), fill: wordFill},
	}}
}

// C09: offsets past 2^31 and 2^32 of a 6 GiB object.
func TestC09HugeFile(t *testing.T) {
	requireFUSE(t)
	for _, withPF := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefetch=%v", withPF), func(t *testing.T) {
			st := c09Store()
			o := Options{}
			if withPF {
				o.Prefetch = newTestPrefetch(t, st)
			}
			mnt := testMount(t, st, o)
			p := join(mnt, "ckpt/model.bin")
			s := lstat(t, p)
			if s.Size != c09Size || s.Blocks != 12582912 {
				t.Errorf("stat: size %d blocks %d, want %d, 12582912", s.Size, s.Blocks, int64(c09Size))
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			word := func(off int64) uint64 {
				var b [8]byte
				if n, err := f.ReadAt(b[:], off); n != 8 {
					t.Fatalf("pread(8, %d) = %d, %v", off, n, err)
				}
				return binary.LittleEndian.Uint64(b[:])
			}
			for _, c := range []struct {
				off  int64
				want uint64
			}{{2147483640, 268435455}, {4294967288, 536870911}, {5368709120, 671088640}, {6442450936, 805306367}} {
				if got := word(c.off); got != c.want {
					t.Errorf("word at %d = %d, want %d", c.off, got, c.want)
				}
			}
			var b16 [16]byte
			if n, err := f.ReadAt(b16[:], 4294967292); n != 16 {
				t.Fatalf("pread(16, 4294967292) = %d, %v", n, err)
			}
			if want := []byte{0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 1, 0, 0, 0x20}; !bytes.Equal(b16[:], want) {
				t.Errorf("16 bytes at 4294967292 = % x, want % x", b16[:], want)
			}
			if n, err := f.ReadAt(b16[:8], c09Size); n != 0 || err != io.EOF {
				t.Errorf("pread at EOF = %d, %v; want 0, EOF", n, err)
			}
			// Sequential read of 64 MiB across 2^32, against the source.
			const span = 64 << 20
			start := int64(1<<32) - span/2
			got := make([]byte, span)
			if _, err := f.ReadAt(got, start); err != nil {
				t.Fatalf("read across 4 GiB: %v", err)
			}
			want := make([]byte, span)
			wordFill(want, start)
			if !bytes.Equal(got, want) {
				t.Errorf("64 MiB across the 4 GiB boundary differ from the source")
			}
			if os.Getenv("OS2G_LONG") == "1" {
				h := sha256.New()
				n, err := io.Copy(h, f)
				hw := sha256.New()
				buf := make([]byte, 8<<20)
				for off := int64(0); off < c09Size; off += int64(len(buf)) {
					wordFill(buf, off)
					hw.Write(buf)
				}
				if err != nil || n != c09Size || !bytes.Equal(h.Sum(nil), hw.Sum(nil)) {
					t.Errorf("sha256 of the whole file: %d bytes, %v, match %v", n, err, bytes.Equal(h.Sum(nil), hw.Sum(nil)))
				}
			}
		})
	}
}

func newTestPrefetch(t testing.TB, g prefetch.Getter) *prefetch.Manager {
	t.Helper()
	m, err := prefetch.New(prefetch.Options{Getter: g, MaxMemory: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// C11: random reads near the end of large files are exact and fetch a
// bounded amount.
func TestC11TailReads(t *testing.T) {
	requireFUSE(t)
	const size = 536870912
	fill := byteFill(7)
	syn := &synthStore{objs: map[string]synthObj{
		"tab/part-0.parquet": {size: size, etag: `"pq"`, mtime: time.Unix(1700000000, 0), fill: func(p []byte, off int64) {
			fill(p, off)
			// footer: 00 00 01 00 "PAR1" in the last 8 bytes
			tail := []byte{0, 0, 1, 0, 'P', 'A', 'R', '1'}
			for i := range p {
				if pos := off + int64(i); pos >= size-8 {
					p[i] = tail[pos-(size-8)]
				}
			}
		}},
	}}
	for _, withPF := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefetch=%v", withPF), func(t *testing.T) {
			c := objtest.NewCounting(syn)
			o := Options{}
			if withPF {
				o.Prefetch = newTestPrefetch(t, c)
			}
			mnt := testMount(t, c, o)
			f, err := os.Open(join(mnt, "tab/part-0.parquet"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			check := func(off int64, n int) {
				t.Helper()
				got := make([]byte, n)
				if k, err := f.ReadAt(got, off); k != n {
					t.Fatalf("pread(%d, %d) = %d, %v", off, n, k, err)
				}
				want := make([]byte, n)
				syn.objs["tab/part-0.parquet"].fill(want, off)
				if !bytes.Equal(got, want) {
					t.Fatalf("pread(%d, %d): bytes differ", off, n)
				}
			}
			c.Reset()
			check(536870904, 8)
			check(536805368, 65536)
			if b := c.BytesRead(); b > 65536+8+8<<20 {
				t.Errorf("footer reads fetched %d bytes, want at most the footer plus 8 MiB", b)
			}
			for _, off := range []int64{100 << 20, 300 << 20, 7 << 20} {
				check(off, 4<<20)
			}
			r := rand.New(rand.NewPCG(1, 2))
			for range 200 {
				n := 1 + r.IntN(100000)
				check(r.Int64N(size-int64(n)), n)
			}
		})
	}
}

// C12: objects stored with Content-Encoding gzip are served as stored.
func TestC12StoredBytes(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	gz := make([]byte, 1000)
	for i := range gz {
		gz[i] = byte(i * 7)
	}
	seed(t, mem, obj{key: "logs/x.json.gz", data: gz, ct: "application/json"})
	mnt := testMount(t, mem, Options{})
	p := join(mnt, "logs/x.json.gz")
	if s := lstat(t, p); s.Size != 1000 {
		t.Errorf("size %d, want 1000", s.Size)
	}
	if b := readFile(t, p); !bytes.Equal(b, gz) {
		t.Errorf("cat differs from the stored bytes")
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 100)
	if n, err := f.ReadAt(b, 500); n != 100 || !bytes.Equal(b, gz[500:600]) {
		t.Errorf("pread(100, 500) = %d, %v, equal %v", n, err, bytes.Equal(b, gz[500:600]))
	}
}

// C13: many concurrent readers of the same and of different files.
func TestC13ConcurrentReaders(t *testing.T) {
	requireFUSE(t)
	const size = 64 << 20
	fill := byteFill(3)
	syn := &synthStore{objs: map[string]synthObj{}}
	for _, k := range []string{"shards/s-0000.tar", "f1", "f2", "f3"} {
		syn.objs[k] = synthObj{size: size, etag: `"` + k + `"`, mtime: time.Unix(1700000000, 0), fill: fill}
	}
	want := make([]byte, size)
	fill(want, 0)
	sum := sha256.Sum256(want)
	for _, withPF := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefetch=%v", withPF), func(t *testing.T) {
			o := Options{}
			if withPF {
				o.Prefetch = newTestPrefetch(t, syn)
			}
			mnt := testMount(t, syn, o)
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			readAll := func(p string) {
				defer wg.Done()
				f, err := os.Open(p)
				if err != nil {
					errs <- err
					return
				}
				defer f.Close()
				h := sha256.New()
				if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
					errs <- fmt.Errorf("%s: %w", p, err)
					return
				}
				if got := h.Sum(nil); !bytes.Equal(got, sum[:]) {
					errs <- fmt.Errorf("%s: checksum mismatch", p)
				}
			}
			for range 8 {
				wg.Add(1)
				go readAll(join(mnt, "shards/s-0000.tar"))
			}
			for _, k := range []string{"f1", "f2", "f3"} {
				wg.Add(1)
				go readAll(join(mnt, k))
			}
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					f, err := os.Open(join(mnt, "shards/s-0000.tar"))
					if err != nil {
						errs <- err
						return
					}
					defer f.Close()
					r := rand.New(rand.NewPCG(uint64(g), 9))
					b := make([]byte, 4096)
					for range 50 {
						off := r.Int64N(size - 4096)
						if n, err := f.ReadAt(b, off); n != 4096 || !bytes.Equal(b, want[off:off+4096]) {
							errs <- fmt.Errorf("random pread at %d: %d, %v", off, n, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// c15 describes the C15 test object: a 128-byte header, then float32
// [rows, cols] with a[i, j] = (i % 1000) + j/1024.
const c15Rows, c15Cols, c15Hdr = 10000, 1000, 128

func c15Fill(p []byte, off int64) {
	for i := range p {
		pos := off + int64(i)
		if pos < c15Hdr {
			p[i] = ' '
			continue
		}
		e := (pos - c15Hdr) / 4
		r, c := e/c15Cols, e%c15Cols
		v := math.Float32bits(float32(r%1000) + float32(c)/1024)
		p[i] = byte(v >> (8 * ((pos - c15Hdr) % 4)))
	}
}

// C15: mmap works (MAP_SHARED and MAP_PRIVATE read-only), a writable
// shared mapping of an O_RDONLY descriptor fails with EACCES. The
// mapping is touched in a child process: a page fault on a FUSE file
// served by the faulting process itself deadlocks the Go runtime.
func TestC15Mmap(t *testing.T) {
	requireFUSE(t)
	size := int64(c15Hdr + c15Rows*c15Cols*4)
	syn := &synthStore{objs: map[string]synthObj{"emb/vectors.npy": {size: size, etag: `"v"`, mtime: time.Unix(1700000000, 0), fill: c15Fill}}}
	mnt := testMount(t, syn, Options{})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMmap$", "-test.v")
	cmd.Env = append(os.Environ(), "OS2G_MMAP_FILE="+join(mnt, "emb/vectors.npy"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "MMAP-OK") {
		t.Errorf("mmap child: %v\n%s", err, out)
	}
}

// TestHelperMmap is the child process of TestC15Mmap.
func TestHelperMmap(t *testing.T) {
	p := os.Getenv("OS2G_MMAP_FILE")
	if p == "" {
		t.Skip("child process of TestC15Mmap only")
	}
	size := int64(c15Hdr + c15Rows*c15Cols*4)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, flag := range []int{syscall.MAP_SHARED, syscall.MAP_PRIVATE} {
		m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, flag)
		if err != nil {
			t.Fatalf("mmap(flags %#x): %v", flag, err)
		}
		at := func(r, c int64) float32 {
			o := c15Hdr + (r*c15Cols+c)*4
			return math.Float32frombits(binary.LittleEndian.Uint32(m[o:]))
		}
		got := []float32{at(c15Rows-1, 0), at(c15Rows-1, 1), at(c15Rows-1, 2)}
		if want := []float32{999, 999.0009765625, 999.001953125}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("a[%d, :3] = %v, want %v", c15Rows-1, got, want)
		}
		want := make([]byte, 1<<20)
		c15Fill(want, 5<<20)
		if !bytes.Equal(m[5<<20:6<<20], want) {
			t.Errorf("mapped bytes at 5 MiB differ")
		}
		syscall.Munmap(m)
	}
	_, err = syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	wantErrno(t, "mmap PROT_WRITE MAP_SHARED of O_RDONLY fd", err, syscall.EACCES)
	if !t.Failed() {
		fmt.Println("MMAP-OK")
	}
}

// An object replaced under an open handle gives ESTALE, never mixed
// bytes; the next open reads the new version.
func TestReadChangedObjectIsESTALE(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	v1 := bytes.Repeat([]byte{1}, 3<<20)
	seed(t, mem, obj{key: "x.bin", data: v1})
	mnt := testMount(t, mem, Options{})
	f, err := os.Open(join(mnt, "x.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 4096)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	v2 := bytes.Repeat([]byte{2}, 3<<20)
	seed(t, mem, obj{key: "x.bin", data: v2})
	_, err = f.ReadAt(b, 2<<20)
	wantErrno(t, "read after replacement", err, syscall.ESTALE)
	if got := readFile(t, join(mnt, "x.bin")); !bytes.Equal(got, v2) {
		t.Errorf("reopen after ESTALE did not read the new version")
	}
}

// An object deleted under an open handle gives ESTALE, as a replaced one
// does, not ENOENT, which read(2) does not document (issue 14); also in
// dataset mode, where the kernel opens files itself.
func TestReadDeletedObjectIsESTALE(t *testing.T) {
	requireFUSE(t)
	for _, o := range []Options{{}, {ReadOnly: true, Immutable: true}} {
		mem := objtest.NewMem()
		seed(t, mem, obj{key: "x.bin", data: bytes.Repeat([]byte{1}, 3<<20)})
		mnt := testMount(t, mem, o)
		f, err := os.Open(join(mnt, "x.bin"))
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4096)
		if _, err := f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		if err := mem.Delete(context.Background(), "x.bin"); err != nil {
			t.Fatal(err)
		}
		_, err = f.ReadAt(b, 2<<20)
		wantErrno(t, fmt.Sprintf("read after deletion (read-only %v, immutable %v)", o.ReadOnly, o.Immutable), err, syscall.ESTALE)
		f.Close()
	}
}

// FOPEN_KEEP_CACHE: a second open of an unchanged object is served from
// the kernel page cache, with no GET.
func TestKeepCacheAcrossOpens(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	seed(t, mem, obj{key: "k.bin", data: data})
	c := objtest.NewCounting(mem)
	mnt := testMount(t, c, Options{})
	if got := readFile(t, join(mnt, "k.bin")); !bytes.Equal(got, data) {
		t.Fatal("first read differs")
	}
	gets := c.Count("GetRange")
	if gets == 0 {
		t.Fatal("first read made no GET")
	}
	if got := readFile(t, join(mnt, "k.bin")); !bytes.Equal(got, data) {
		t.Fatal("second read differs")
	}
	if g := c.Count("GetRange"); g != gets {
		t.Errorf("second open of an unchanged object made %d more GETs, want 0", g-gets)
	}
}

// Wait returns after an external unmount, and Unmount is then a no-op.
func TestExternalUnmount(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	mnt, srv := testMountServer(t, mem, Options{})
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatalf("umount: %v", err)
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return after umount")
	}
	if err := srv.Unmount(); err != nil {
		t.Errorf("Unmount after umount: %v", err)
	}
}

var _ = context.Background
