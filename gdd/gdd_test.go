package gdd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// castagnoli is the reference checksum the tests compare against.
func castagnoli(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// countingStore records every GetRange: bytes delivered and whether the
// buffer was pinned memory of sim.
type countingStore struct {
	objclient.Store
	sim *Sim

	mu        sync.Mutex // guards the fields below
	calls     int
	bytes     int64
	unpinned  int
	failAfter int64 // with failErr: fail reads at or past this offset
	failErr   error
}

func (c *countingStore) GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error) {
	c.mu.Lock()
	failErr, failAfter := c.failErr, c.failAfter
	c.mu.Unlock()
	if failErr != nil && off >= failAfter {
		return 0, failErr
	}
	n, err := c.Store.GetRange(ctx, key, off, buf, ifMatch)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.bytes += int64(n)
	if !c.sim.IsPinned(buf) {
		c.unpinned++
	}
	return n, err
}

// memResolver resolves paths as keys of store.
func memResolver(store objclient.Store) func(ctx context.Context, path string) (Source, error) {
	return func(ctx context.Context, path string) (Source, error) {
		info, err := store.Stat(ctx, path)
		if err != nil {
			return nil, err
		}
		return KeySource(store, path, info.ETag, info.Size), nil
	}
}

type simEnv struct {
	sim    *Sim
	placer *Placer
	store  *countingStore
	mem    *objtest.Mem
	shmDir string
	socket string
}

const testBlock = 64 << 10

// startSim starts a sim placement server on a temporary socket.
func startSim(t testing.TB, blocks int) *simEnv {
	t.Helper()
	return startSimWith(t, blocks, nil)
}

// startSimWith is startSim with a hook that may change the ServeOptions
// (its env's sim, store and mem are set).
func startSimWith(t testing.TB, blocks int, hook func(*ServeOptions, *simEnv)) *simEnv {
	t.Helper()
	dir := t.TempDir()
	sim, err := NewSim(SimOptions{ShmDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlacer(PlacerOptions{Device: sim, BlockSize: testBlock, Blocks: blocks, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	mem := objtest.NewMem()
	cs := &countingStore{Store: mem, sim: sim}
	// Unix socket paths are limited to ~108 bytes; t.TempDir can be longer.
	sockDir, err := os.MkdirTemp("", "gdd")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "s")
	ln, err := Listen(sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	env := &simEnv{sim: sim, placer: p, store: cs, mem: mem, shmDir: dir, socket: sock}
	so := ServeOptions{Placer: p, Resolve: memResolver(cs)}
	if hook != nil {
		hook(&so, env)
	}
	go func() { done <- Serve(ctx, ln, so) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return after cancel")
		}
		_ = p.Close()
		_ = os.RemoveAll(sockDir)
	})
	return env
}

// shm creates a zeroed shared-memory file of n bytes and returns its name.
func (e *simEnv) shm(t testing.TB, name string, n int) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.shmDir, name), make([]byte, n), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

func (e *simEnv) read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.shmDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dial(t testing.TB, sock string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSocketPermissions(t *testing.T) {
	e := startSim(t, 2)
	fi, err := os.Stat(e.socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a 0600 socket", fi.Mode())
	}
}

func TestPlaceThroughSocket(t *testing.T) {
	e := startSim(t, 4)
	const n = 3*testBlock + 123
	data := randBytes(1, n)
	e.mem.PutObject("data/shard-0.bin", data, "", nil)
	const dstOff = 100
	name := e.shm(t, "dst", dstOff+n+50)
	c := dial(t, e.socket)

	before := e.sim.Stats()
	res, err := c.Place(testCtx(t), "data/shard-0.bin", 0, n, Dest{Kind: "sim", Handle: []byte(name), Offset: dstOff, Size: n})
	if err != nil {
		t.Fatal(err)
	}
	after := e.sim.Stats()
	if res.Bytes != n || res.CRC32C != castagnoli(data) {
		t.Fatalf("result %+v, want %d bytes crc %#x", res, n, castagnoli(data))
	}
	got := e.read(t, name)
	if !bytes.Equal(got[dstOff:dstOff+n], data) {
		t.Fatal("placed bytes differ from the object")
	}
	if !bytes.Equal(got[:dstOff], make([]byte, dstOff)) || !bytes.Equal(got[dstOff+n:], make([]byte, 50)) {
		t.Fatal("bytes outside the destination range were written")
	}
	const blocks = 4 // ceil(n / testBlock)
	if d := after.HostToDeviceCopies - before.HostToDeviceCopies; d != blocks {
		t.Errorf("host-to-device copies %d, want one per block (%d)", d, blocks)
	}
	if d := after.BytesCopied - before.BytesCopied; d != n {
		t.Errorf("bytes copied to the device %d, want %d", d, n)
	}
	if after.HostBounceCopies != 0 || after.HostBounceBytes != 0 {
		t.Errorf("bounce copies %d (%d bytes), want none", after.HostBounceCopies, after.HostBounceBytes)
	}
	if after.DeviceToHostCopies != 0 {
		t.Errorf("device-to-host copies %d, want none", after.DeviceToHostCopies)
	}
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	if e.store.bytes != n || e.store.calls != blocks || e.store.unpinned != 0 {
		t.Errorf("source reads: %d calls, %d bytes, %d into unpinned memory; want %d calls, %d bytes, all pinned (one host crossing)",
			e.store.calls, e.store.bytes, e.store.unpinned, blocks, n)
	}
}

func TestPlaceToEndAndOffsets(t *testing.T) {
	e := startSim(t, 2)
	data := randBytes(2, 2*testBlock+7)
	e.mem.PutObject("k", data, "", nil)
	name := e.shm(t, "d", len(data))
	c := dial(t, e.socket)
	for _, tc := range []struct{ off, n int64 }{
		{0, -1}, {5, -1}, {testBlock, testBlock}, {int64(len(data)), -1}, {int64(len(data)), 0}, {3, 1},
	} {
		t.Run(fmt.Sprintf("off%d_n%d", tc.off, tc.n), func(t *testing.T) {
			e.shm(t, name, len(data))
			res, err := c.Place(testCtx(t), "k", tc.off, tc.n, Dest{Kind: "sim", Handle: []byte(name), Size: int64(len(data))})
			if err != nil {
				t.Fatal(err)
			}
			want := data[tc.off:]
			if tc.n >= 0 {
				want = want[:tc.n]
			}
			if res.Bytes != int64(len(want)) || res.CRC32C != castagnoli(want) {
				t.Fatalf("result %+v, want %d bytes crc %#x", res, len(want), castagnoli(want))
			}
			if got := e.read(t, name)[:len(want)]; !bytes.Equal(got, want) {
				t.Fatal("placed bytes differ")
			}
		})
	}
}

func TestPlaceErrors(t *testing.T) {
	e := startSim(t, 2)
	data := randBytes(3, 1000)
	e.mem.PutObject("k", data, "", nil)
	name := e.shm(t, "d", 600)
	c := dial(t, e.socket)
	dst := Dest{Kind: "sim", Handle: []byte(name), Size: 600}
	for _, tc := range []struct {
		name     string
		path     string
		off, n   int64
		dst      Dest
		sentinel error
		code     string
	}{
		{"missing file", "nope", 0, 10, dst, ErrNotFound, CodeNotFound},
		{"past EOF", "k", 900, 200, dst, ErrPastEOF, CodePastEOF},
		{"offset past EOF", "k", 1001, -1, dst, ErrPastEOF, CodePastEOF},
		{"dst too small", "k", 0, 601, dst, ErrDstTooSmall, CodeDstTooSmall},
		{"to EOF too big for dst", "k", 0, -1, dst, ErrDstTooSmall, CodeDstTooSmall},
		{"dst range outside allocation", "k", 0, 10, Dest{Kind: "sim", Handle: []byte(name), Offset: 500, Size: 200}, ErrDstTooSmall, CodeDstTooSmall},
		{"no such shm", "k", 0, 10, Dest{Kind: "sim", Handle: []byte("absent"), Size: 10}, ErrBadHandle, CodeBadHandle},
		{"shm name with slash", "k", 0, 10, Dest{Kind: "sim", Handle: []byte("../etc"), Size: 10}, ErrBadHandle, CodeBadHandle},
		{"wrong kind", "k", 0, 10, Dest{Kind: "cuda", Handle: make([]byte, 64), Size: 10}, ErrInvalid, CodeBadRequest},
		{"wrong device", "k", 0, 10, Dest{Kind: "sim", Handle: []byte(name), Size: 10, Device: 3}, ErrInvalid, CodeBadRequest},
		{"negative offset", "k", -1, 10, dst, ErrInvalid, CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Place(testCtx(t), tc.path, tc.off, tc.n, tc.dst)
			var we *WireError
			if !errors.As(err, &we) || we.Code != tc.code || !errors.Is(err, tc.sentinel) {
				t.Fatalf("error %v, want code %s (%v)", err, tc.code, tc.sentinel)
			}
		})
	}
	if got := e.read(t, name); !bytes.Equal(got, make([]byte, 600)) {
		t.Error("a failed request wrote into the destination")
	}
	// The connection still works after errors.
	res, err := c.Place(testCtx(t), "k", 0, 600, dst)
	if err != nil || res.CRC32C != castagnoli(data[:600]) {
		t.Fatalf("place after errors: %+v %v", res, err)
	}
	if size, err := c.Stat(testCtx(t), "k"); err != nil || size != 1000 {
		t.Fatalf("stat: %d %v", size, err)
	}
	if _, err := c.Stat(testCtx(t), "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat missing: %v", err)
	}
	info, err := c.Info(testCtx(t))
	if err != nil || info.Kind != "sim" || info.BlockSize != testBlock {
		t.Fatalf("info %+v %v", info, err)
	}
}

func TestSourceErrorMidway(t *testing.T) {
	e := startSim(t, 2)
	data := randBytes(4, 5*testBlock)
	e.mem.PutObject("k", data, "", nil)
	name := e.shm(t, "d", len(data))
	c := dial(t, e.socket)
	e.store.mu.Lock()
	e.store.failAfter, e.store.failErr = 2*testBlock, objclient.ErrUnavailable
	e.store.mu.Unlock()
	_, err := c.Place(testCtx(t), "k", 0, -1, Dest{Kind: "sim", Handle: []byte(name), Size: int64(len(data))})
	var we *WireError
	if !errors.As(err, &we) || we.Code != CodeIO {
		t.Fatalf("error %v, want code io", err)
	}
	e.store.mu.Lock()
	e.store.failErr = nil
	e.store.mu.Unlock()
	// Every pinned block went back to the pool: a full placement works.
	res, err := c.Place(testCtx(t), "k", 0, -1, Dest{Kind: "sim", Handle: []byte(name), Size: int64(len(data))})
	if err != nil || res.CRC32C != castagnoli(data) {
		t.Fatalf("placement after failure: %+v %v", res, err)
	}
	if got := len(e.placer.free); got != 2 {
		t.Fatalf("%d pinned blocks idle after placements, want 2", got)
	}
}

func TestBadFrames(t *testing.T) {
	e := startSim(t, 2)
	conn, err := net.Dial("unix", e.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := writeFrame(conn, map[string]any{"v": 99, "id": 5, "op": "info"}); err != nil {
		t.Fatal(err)
	}
	var r Reply
	body, err := readFrame(conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := jsonUnmarshal(body, &r); err != nil || r.ID != 5 || r.Error == nil || r.Error.Code != CodeBadVersion {
		t.Fatalf("reply %s, want bad_version for id 5", body)
	}
	if err := writeFrame(conn, map[string]any{"v": 1, "id": 6, "op": "frobnicate"}); err != nil {
		t.Fatal(err)
	}
	if body, err = readFrame(conn); err != nil {
		t.Fatal(err)
	}
	if err := jsonUnmarshal(body, &r); err != nil || r.ID != 6 || r.Error == nil || r.Error.Code != CodeBadRequest {
		t.Fatalf("reply %s, want bad_request for id 6", body)
	}
	// A frame longer than MaxFrame closes the connection.
	if _, err := conn.Write([]byte{0xff, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(conn); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("after an oversized frame: %v, want the connection closed", err)
	}
}

func TestConcurrentRequests(t *testing.T) {
	e := startSim(t, 2) // fewer blocks than requests: the pool is shared
	const files, perFile = 4, 6
	objs := make([][]byte, files)
	for i := range objs {
		objs[i] = randBytes(uint64(10+i), 2*testBlock+i*1000+17)
		e.mem.PutObject(fmt.Sprintf("f%d", i), objs[i], "", nil)
	}
	clients := []*Client{dial(t, e.socket), dial(t, e.socket)}
	var wg sync.WaitGroup
	errs := make(chan error, files*perFile)
	for i := range files {
		for j := range perFile {
			wg.Add(1)
			go func() {
				defer wg.Done()
				data := objs[i]
				off := int64(j * 3000)
				want := data[off:]
				name := fmt.Sprintf("d%d_%d", i, j)
				if err := os.WriteFile(filepath.Join(e.shmDir, name), make([]byte, len(want)), 0o600); err != nil {
					errs <- err
					return
				}
				c := clients[(i+j)%len(clients)]
				res, err := c.Place(testCtx(t), fmt.Sprintf("f%d", i), off, -1, Dest{Kind: "sim", Handle: []byte(name), Size: int64(len(want))})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
				got, err := os.ReadFile(filepath.Join(e.shmDir, name))
				if err != nil {
					errs <- err
					return
				}
				if res.Bytes != int64(len(want)) || res.CRC32C != castagnoli(want) || !bytes.Equal(got, want) {
					errs <- fmt.Errorf("%s: result %+v or bytes differ", name, res)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := e.sim.Stats(); s.HostBounceCopies != 0 {
		t.Errorf("%d bounce copies", s.HostBounceCopies)
	}
}

// TestPlacerSizes drives the Placer directly into sim device memory.
func TestPlacerSizes(t *testing.T) {
	sim, err := NewSim(SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlacer(PlacerOptions{Device: sim, BlockSize: 4096, Blocks: 3, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	data := randBytes(5, 5*4096+7)
	src := ReaderAtSource(bytes.NewReader(data), int64(len(data)))
	dst, err := sim.AllocDevice(int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	for _, n := range []int64{0, 1, 4095, 4096, 4097, 3 * 4096, int64(len(data))} {
		for _, off := range []int64{0, 1, int64(len(data)) - n} {
			if off+n > int64(len(data)) {
				continue
			}
			res, err := p.Place(testCtx(t), src, off, n, dst)
			if err != nil {
				t.Fatalf("n=%d off=%d: %v", n, off, err)
			}
			want := data[off : off+n]
			got := make([]byte, n)
			if err := dst.CopyToHost(got, 0); err != nil {
				t.Fatal(err)
			}
			if res.Bytes != n || res.CRC32C != castagnoli(want) || !bytes.Equal(got, want) {
				t.Fatalf("n=%d off=%d: result %+v, bytes equal %v", n, off, res, bytes.Equal(got, want))
			}
		}
	}
	// A source shorter than its Size.
	short := ReaderAtSource(bytes.NewReader(data[:100]), 9000)
	if _, err := p.Place(testCtx(t), short, 0, 9000, dst); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short source: %v, want io.ErrUnexpectedEOF", err)
	}
	// A cancelled context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Place(ctx, src, 0, -1, dst); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if len(p.free) != 3 {
		t.Fatalf("%d idle blocks, want 3", len(p.free))
	}
	// A view as destination.
	v, err := Slice(dst, 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Place(testCtx(t), src, 0, 21, v); !errors.Is(err, ErrDstTooSmall) {
		t.Fatalf("into a 20-byte view: %v", err)
	}
	if _, err := p.Place(testCtx(t), src, 0, 20, v); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 20)
	if err := dst.CopyToHost(got, 10); err != nil || !bytes.Equal(got, data[:20]) {
		t.Fatalf("view placement: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Place(testCtx(t), src, 0, 1, dst); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestPlacerOptions(t *testing.T) {
	sim, _ := NewSim(SimOptions{})
	for _, o := range []PlacerOptions{
		{},
		{Device: sim, Blocks: 1},
		{Device: sim, BlockSize: 100},
		{Device: sim, Streams: -1},
	} {
		if _, err := NewPlacer(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", o, err)
		}
	}
}

func TestUnpinnedSourceBounces(t *testing.T) {
	sim, _ := NewSim(SimOptions{})
	s, err := sim.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	dst, _ := sim.AllocDevice(10)
	defer dst.Close()
	if err := s.CopyHtoDAsync(dst, 0, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	st := sim.Stats()
	if st.HostBounceCopies != 1 || st.HostBounceBytes != 10 || st.HostToDeviceCopies != 1 {
		t.Fatalf("stats %+v, want one bounce of 10 bytes", st)
	}
	if err := s.CopyHtoDAsync(dst, 5, make([]byte, 6)); !errors.Is(err, ErrDstTooSmall) {
		t.Fatalf("overrun: %v", err)
	}
}

func TestKeySourceChanged(t *testing.T) {
	mem := objtest.NewMem()
	mem.PutObject("k", []byte("hello"), "", nil)
	info, _ := mem.Stat(context.Background(), "k")
	src := KeySource(mem, "k", info.ETag, info.Size)
	mem.PutObject("k", []byte("world"), "", nil)
	if _, err := src.ReadAt(context.Background(), make([]byte, 5), 0); !errors.Is(err, objclient.ErrChanged) {
		t.Fatalf("read of a replaced object: %v, want ErrChanged", err)
	}
}

func BenchmarkPlace(b *testing.B) {
	sim, _ := NewSim(SimOptions{})
	p, err := NewPlacer(PlacerOptions{Device: sim})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const n = 64 << 20
	mem := objtest.NewMem()
	mem.PutObject("big", randBytes(7, n), "", nil)
	info, _ := mem.Stat(context.Background(), "big")
	src := KeySource(mem, "big", info.ETag, info.Size)
	dst, err := sim.AllocDevice(n)
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Close()
	b.SetBytes(n)
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Place(context.Background(), src, 0, n, dst); err != nil {
			b.Fatal(err)
		}
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
