//go:build linux && (amd64 || arm64)

package gdd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"github.com/os2g/os2g/objclient/objtest"
)

// openCUDAOrSkip opens device 0, skipping the test where there is no GPU
// (failing instead when OS2G_REQUIRE_GPU=1, as scripts/gpu-check.sh sets).
func openCUDAOrSkip(t testing.TB) *CUDA {
	t.Helper()
	d, err := OpenCUDA(CUDAOptions{})
	if err != nil {
		if !errors.Is(err, ErrNoDevice) {
			t.Fatalf("OpenCUDA: %v, want nil or ErrNoDevice", err)
		}
		if os.Getenv("OS2G_REQUIRE_GPU") == "1" {
			t.Fatalf("OS2G_REQUIRE_GPU=1 but: %v", err)
		}
		t.Skipf("no GPU: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestCUDAAbsentDriver(t *testing.T) {
	_, err := OpenCUDA(CUDAOptions{Library: "/nonexistent/libcuda.so.1"})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "dlopen") {
		t.Fatalf("missing library: %v, want ErrNoDevice with the dlopen message", err)
	}
	// A library that loads but is not a CUDA driver.
	_, err = OpenCUDA(CUDAOptions{Library: "libc.so.6"})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "cuInit") {
		t.Fatalf("libc as driver: %v, want ErrNoDevice naming cuInit", err)
	}
	if _, err := OpenCUDA(CUDAOptions{Ordinal: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ordinal -1: %v", err)
	}
	// The real driver: on a machine without one this is ErrNoDevice, never a
	// crash; with one, it opens.
	d, err := OpenCUDA(CUDAOptions{})
	if err != nil {
		if !errors.Is(err, ErrNoDevice) {
			t.Fatalf("default OpenCUDA: %v, want ErrNoDevice", err)
		}
		t.Logf("no GPU here, as expected on CI: %v", err)
		return
	}
	t.Logf("GPU present: %s", d.Name())
	_ = d.Close()
}

func TestCUDAPlacement(t *testing.T) {
	runCUDAPlacement(t, openCUDAOrSkip(t))
}

// runCUDAPlacement places ranges into device memory and reads them back.
func runCUDAPlacement(t *testing.T, d *CUDA) {
	p, err := NewPlacer(PlacerOptions{Device: d, BlockSize: 1 << 20, Blocks: 4, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	data := randBytes(21, 5<<20+12345)
	src := ReaderAtSource(bytes.NewReader(data), int64(len(data)))
	dst, err := d.AllocDevice(int64(len(data)) + 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	for _, tc := range []struct{ off, n, dstOff int64 }{
		{0, -1, 0}, {7, 1<<20 + 1, 4096}, {int64(len(data)) - 1, 1, 3},
	} {
		v, err := Slice(dst, tc.dstOff, dst.Size()-tc.dstOff)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Place(testCtx(t), src, tc.off, tc.n, v)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		want := data[tc.off:]
		if tc.n >= 0 {
			want = want[:tc.n]
		}
		got := make([]byte, len(want))
		if err := dst.CopyToHost(got, tc.dstOff); err != nil {
			t.Fatal(err)
		}
		if res.Bytes != int64(len(want)) || res.CRC32C != castagnoli(want) || !bytes.Equal(got, want) {
			t.Fatalf("%+v: result %+v, device bytes equal: %v", tc, res, bytes.Equal(got, want))
		}
	}
	// A wrapped raw device pointer is a destination too.
	raw, err := d.WrapDevicePointer(dst.(*cudaBuf).DevicePointer()+8, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Place(testCtx(t), src, 0, 100, raw); err != nil {
		t.Fatal(err)
	}
	_ = raw.Close() // must not free dst's memory
	got100 := make([]byte, 100)
	if err := dst.CopyToHost(got100, 8); err != nil || !bytes.Equal(got100, data[:100]) {
		t.Fatalf("wrapped pointer placement: %v", err)
	}
	// Registered (mmap'd) host memory works as a copy source too.
	m, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	copy(m, data)
	h, err := d.RegisterHost(m)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CopyHtoDAsync(dst, 0, h.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(m))
	if err := dst.CopyToHost(got, 0); err != nil || !bytes.Equal(got, data[:len(m)]) {
		t.Fatalf("registered-memory copy: %v", err)
	}
	_ = s.Destroy()
	if err := h.Free(); err != nil {
		t.Fatal(err)
	}
}

// TestCUDAIPC places into memory another process exported with
// cuIpcGetMemHandle, through the socket: the path PyTorch clients take.
func TestCUDAIPC(t *testing.T) {
	d := openCUDAOrSkip(t)
	const n = 3<<20 + 77
	const seed = 33
	cmd := exec.Command(os.Args[0], "-test.run=^TestCUDAIPCChild$", "-test.v")
	cmd.Env = append(os.Environ(), "GDD_IPC_CHILD=1", fmt.Sprintf("GDD_IPC_N=%d", n), fmt.Sprintf("GDD_IPC_SEED=%d", seed))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	var handle []byte
	for lines.Scan() {
		if h, ok := strings.CutPrefix(lines.Text(), "HANDLE "); ok {
			var err error
			if handle, err = hex.DecodeString(h); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if handle == nil {
		t.Fatal("child printed no handle")
	}

	p, err := NewPlacer(PlacerOptions{Device: d, BlockSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	data := randBytes(seed, n)
	sockDir, _ := os.MkdirTemp("", "gdd")
	defer os.RemoveAll(sockDir)
	ln, err := Listen(filepath.Join(sockDir, "s"), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, ln, ServeOptions{Placer: p, Resolve: func(ctx context.Context, path string) (Source, error) {
			if path != "blob" {
				return nil, ErrNotFound
			}
			return ReaderAtSource(bytes.NewReader(data), n), nil
		}})
	}()
	defer func() { cancel(); <-served }()
	c := dial(t, filepath.Join(sockDir, "s"))
	res, err := c.Place(testCtx(t), "blob", 0, -1, Dest{Kind: "cuda", Handle: handle, Size: n, Device: d.Ordinal()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != n || res.CRC32C != castagnoli(data) {
		t.Fatalf("result %+v", res)
	}
	// A second placement reuses the opened mapping.
	if _, err := c.Place(testCtx(t), "blob", 0, 100, Dest{Kind: "cuda", Handle: handle, Offset: 0, Size: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Place(testCtx(t), "blob", 0, -1, Dest{Kind: "cuda", Handle: handle, Size: n + 1<<30}); !errors.Is(err, ErrDstTooSmall) {
		t.Fatalf("oversized dst: %v", err)
	}
	fmt.Fprintf(stdin, "VERIFY %d\n", castagnoli(data))
	for lines.Scan() {
		line := lines.Text()
		if line == "CHILD OK" {
			return
		}
		if strings.HasPrefix(line, "CHILD FAIL") {
			t.Fatal(line)
		}
	}
	t.Fatal("child exited without a verdict")
}

// TestCUDAIPCChild is the exporting process of TestCUDAIPC.
func TestCUDAIPCChild(t *testing.T) {
	if os.Getenv("GDD_IPC_CHILD") != "1" {
		t.Skip("helper process for TestCUDAIPC")
	}
	var n int64
	var seed uint64
	fmt.Sscan(os.Getenv("GDD_IPC_N"), &n)
	fmt.Sscan(os.Getenv("GDD_IPC_SEED"), &seed)
	d, err := OpenCUDA(CUDAOptions{})
	if err != nil {
		fmt.Println("CHILD FAIL", err)
		return
	}
	defer d.Close()
	buf, err := d.AllocDevice(n)
	if err != nil {
		fmt.Println("CHILD FAIL", err)
		return
	}
	defer buf.Close()
	h, err := d.ExportIPC(buf)
	if err != nil {
		fmt.Println("CHILD FAIL", err)
		return
	}
	fmt.Printf("HANDLE %x\n", h)
	in := bufio.NewScanner(io.LimitReader(os.Stdin, 1<<10))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !in.Scan() {
			fmt.Println("CHILD FAIL no verify line")
			return
		}
		got := make([]byte, n)
		if err := buf.CopyToHost(got, 0); err != nil {
			fmt.Println("CHILD FAIL", err)
			return
		}
		if !bytes.Equal(got, randBytes(seed, int(n))) {
			fmt.Println("CHILD FAIL device bytes differ from the source")
			return
		}
		if want := fmt.Sprintf("VERIFY %d", castagnoli(got)); in.Text() != want {
			fmt.Printf("CHILD FAIL crc: parent says %q, device bytes give %q\n", in.Text(), want)
			return
		}
		fmt.Println("CHILD OK")
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		fmt.Println("CHILD FAIL timeout")
	}
}

// BenchmarkPlaceCUDA places a 256 MiB object from an in-memory store into
// device memory (the store's copy into the pinned block is the one host
// crossing, as an HTTP body read would be).
func BenchmarkPlaceCUDA(b *testing.B) {
	d := openCUDAOrSkip(b)
	p, err := NewPlacer(PlacerOptions{Device: d})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const n = 256 << 20
	mem := objtest.NewMem()
	mem.PutObject("big", randBytes(9, n), "", nil)
	info, _ := mem.Stat(context.Background(), "big")
	src := KeySource(mem, "big", info.ETag, info.Size)
	dst, err := d.AllocDevice(n)
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Close()
	b.SetBytes(n)
	for b.Loop() {
		if _, err := p.Place(context.Background(), src, 0, n, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCUDACopyBaseline is the raw pinned host-to-device copy rate (8 MiB
// copies alternating over two streams), the ceiling for BenchmarkPlaceCUDA.
func BenchmarkCUDACopyBaseline(b *testing.B) {
	d := openCUDAOrSkip(b)
	const blk = 8 << 20
	h, err := d.AllocHost(blk)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Free()
	dst, err := d.AllocDevice(blk)
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Close()
	s0, _ := d.NewStream()
	s1, _ := d.NewStream()
	defer s0.Destroy()
	defer s1.Destroy()
	b.SetBytes(blk)
	i := 0
	for b.Loop() {
		s := s0
		if i%2 == 1 {
			s = s1
		}
		i++
		if err := s.CopyHtoDAsync(dst, 0, h.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
	_ = s0.Synchronize()
	_ = s1.Synchronize()
}

// buildFakeDriver compiles testdata/fakecuda.c into a shared library. With
// asDriver it is named libcuda.so.1 and carries that soname, so that
// dlopen("libcuda.so.1") in the process that loaded it finds it (only child
// processes use that form: in this one it would shadow the real driver
// lookup of the other tests).
func buildFakeDriver(t *testing.T, asDriver bool) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		// A C compiler is not among the things CI promises: skip even
		// under OS2G_REQUIRE_ALL.
		t.Skipf("no C compiler to build the fake driver: %v", err)
	}
	args := []string{"-shared", "-fPIC", "-O1"}
	lib := filepath.Join(t.TempDir(), "libfakecuda.so")
	if asDriver {
		lib = filepath.Join(filepath.Dir(lib), "libcuda.so.1")
		args = append(args, "-Wl,-soname,libcuda.so.1")
	}
	out, err := exec.Command(cc, append(args, "-o", lib, "testdata/fakecuda.c")...).CombinedOutput()
	if err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, out)
	}
	return lib
}

// TestCUDAFakeDriver runs the CUDA backend against a fake libcuda built
// from testdata/fakecuda.c: symbol names, argument order and the by-value
// 64-byte IPC handle all reach C as cuda.h declares them.
func TestCUDAFakeDriver(t *testing.T) {
	lib := buildFakeDriver(t, false)
	d, err := OpenCUDA(CUDAOptions{Library: lib})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Name() != "Fake CUDA Device" || d.Kind() != "cuda" {
		t.Fatalf("device %q kind %q", d.Name(), d.Kind())
	}
	if _, err := OpenCUDA(CUDAOptions{Library: lib, Ordinal: 1}); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("ordinal 1 of a 1-device driver: %v", err)
	}
	h2d := fakeCounter(t, lib, "fake_h2d_calls")
	before := *h2d
	runCUDAPlacement(t, d)
	if *h2d == before {
		t.Fatal("no cuMemcpyHtoDAsync reached the driver")
	}

	// IPC through the socket (the fake lets a process open its own handle).
	const n = 3*4096 + 5
	data := randBytes(44, n)
	owner, err := d.AllocDevice(n + 100)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	handle, err := d.ExportIPC(owner)
	if err != nil {
		t.Fatal(err)
	}
	if len(handle) != IPCHandleSize {
		t.Fatalf("handle of %d bytes", len(handle))
	}
	p, err := NewPlacer(PlacerOptions{Device: d, BlockSize: 4096, Blocks: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sockDir, _ := os.MkdirTemp("", "gdd")
	defer os.RemoveAll(sockDir)
	ln, err := Listen(filepath.Join(sockDir, "s"), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, ln, ServeOptions{Placer: p, Resolve: func(ctx context.Context, path string) (Source, error) {
			return ReaderAtSource(bytes.NewReader(data), n), nil
		}})
	}()
	defer func() { cancel(); <-served }()
	c := dial(t, filepath.Join(sockDir, "s"))
	before = *h2d
	res, err := c.Place(testCtx(t), "x", 0, -1, Dest{Kind: "cuda", Handle: handle, Offset: 100, Size: n})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != n || res.CRC32C != castagnoli(data) {
		t.Fatalf("result %+v", res)
	}
	if got := *h2d - before; got != 4 {
		t.Errorf("%d host-to-device copies, want one per 4096-byte block (4)", got)
	}
	got := make([]byte, n)
	if err := owner.CopyToHost(got, 100); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("bytes in the exporter's buffer differ (%v)", err)
	}
	bad := bytes.Clone(handle)
	bad[63] ^= 1
	_, err = c.Place(testCtx(t), "x", 0, -1, Dest{Kind: "cuda", Handle: bad, Size: n})
	if !errors.Is(err, ErrBadHandle) || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_HANDLE") {
		t.Fatalf("corrupted handle: %v, want bad_handle naming the driver error", err)
	}
	if _, err := c.Place(testCtx(t), "x", 0, -1, Dest{Kind: "cuda", Handle: handle[:10], Size: n}); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("short handle: %v", err)
	}
}

// fakeCounter returns a pointer to a counter variable of the fake driver.
func fakeCounter(t *testing.T, lib, name string) *int64 {
	t.Helper()
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	return (*int64)(unsafePointer(addr))
}
