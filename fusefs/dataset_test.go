package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
	"github.com/os2g/os2g/prefetch"
)

// openShared counts the dataset-mode readers not yet closed.
func (f *filesys) openShared() int {
	f.shared.mu.Lock()
	all := make(map[*sharedReader]*fileNode, len(f.shared.readers))
	for s, n := range f.shared.readers {
		all[s] = n
	}
	f.shared.mu.Unlock()
	k := 0
	for s, n := range all {
		n.mu.Lock()
		if !s.closed {
			k++
		}
		n.mu.Unlock()
	}
	return k
}

func datasetMount(t *testing.T, c *objtest.Counting) (string, *Server) {
	t.Helper()
	pm, err := prefetch.New(prefetch.Options{Getter: c, MaxMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pm.Close)
	return testMountServer(t, c, Options{Prefetch: pm, ReadOnly: true, Immutable: true})
}

// An epoch over a read-only, immutable mount: the first OPEN and FLUSH are
// answered ENOSYS and the kernel sends no more of them; the second pass is
// served by the page cache with no READ reaching the daemon.
func TestDatasetModeKernelOpens(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	const files = 40
	want := map[string][]byte{}
	for i := range files {
		data := bytes.Repeat([]byte{byte(i)}, 1000+i*997)
		k := fmt.Sprintf("train/c%d/img%03d.png", i%2, i)
		mem.PutObject(k, data, "", nil)
		want[k] = data
	}
	c := objtest.NewCounting(mem)
	mnt, srv := datasetMount(t, c)
	f := srv.fsys

	for pass := range 2 {
		reads0, gets0 := f.sharedReads.Load(), c.Count("GetRange")
		for _, i := range rand.New(rand.NewPCG(7, uint64(pass))).Perm(files) {
			k := fmt.Sprintf("train/c%d/img%03d.png", i%2, i)
			if got := readFile(t, join(mnt, k)); !bytes.Equal(got, want[k]) {
				t.Fatalf("pass %d: %s: %d bytes differ from the object's %d", pass, k, len(got), len(want[k]))
			}
		}
		reads, gets := f.sharedReads.Load()-reads0, c.Count("GetRange")-gets0
		if pass == 0 && reads < files {
			t.Errorf("pass 0: %d handle-less READs, want at least %d (one per file)", reads, files)
		}
		if pass == 1 && (reads != 0 || gets != 0) {
			t.Errorf("pass 1: %d READs reached the daemon and %d GETs were made, want 0 and 0 (page cache kept)", reads, gets)
		}
	}
	if n := f.openCalls.Load(); n != 1 {
		t.Errorf("OPEN reached the daemon %d times, want 1 (answered ENOSYS)", n)
	}
	if n := f.flushCalls.Load(); n != 1 {
		t.Errorf("FLUSH reached the daemon %d times, want 1 (answered ENOSYS)", n)
	}
	if n := f.openShared(); n != 0 {
		t.Errorf("%d shared readers open after every file was read whole, want 0", n)
	}
}

// A file read in part keeps its shared reader until it has been idle;
// reads after the sweep start a new one and still return the right bytes.
func TestDatasetModeIdleReaderClosed(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	mem.PutObject("big.bin", data, "", nil)
	c := objtest.NewCounting(mem)
	mnt, srv := datasetMount(t, c)
	f := srv.fsys

	fd, err := os.Open(join(mnt, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	buf := make([]byte, 64<<10)
	if _, err := fd.ReadAt(buf, 1<<20); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[1<<20:1<<20+len(buf)]) {
		t.Fatal("bytes at 1 MiB differ")
	}
	if n := f.openShared(); n != 1 {
		t.Fatalf("%d shared readers after a partial read, want 1", n)
	}
	if f.closeShared(int64(time.Hour)) {
		t.Error("closeShared(1h) reported an empty set with a reader just used")
	}
	if n := f.openShared(); n != 1 {
		t.Fatalf("%d shared readers after sweeping those idle for an hour, want 1", n)
	}
	if !f.closeShared(0) {
		t.Error("closeShared(0) left readers in the set")
	}
	if n := f.openShared(); n != 0 {
		t.Fatalf("%d shared readers after sweeping every idle one, want 0", n)
	}
	off := int64(6 << 20)
	if _, err := fd.ReadAt(buf, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[off:off+int64(len(buf))]) {
		t.Fatal("bytes at 6 MiB differ after the reader was swept")
	}
}

// Concurrent readers of the same and different files, with the sweeper
// closing idle readers all the time: every byte is right, and nothing is
// left open at the end.
func TestDatasetModeConcurrentSweep(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	const files = 12
	want := make([][]byte, files)
	for i := range files {
		want[i] = make([]byte, 300<<10+i*4099)
		for j := range want[i] {
			want[i][j] = byte(j>>8 + i)
		}
		mem.PutObject(fmt.Sprintf("d/f%02d", i), want[i], "", nil)
	}
	c := objtest.NewCounting(mem)
	mnt, srv := datasetMount(t, c)
	f := srv.fsys

	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Add(1)
	go func() {
		defer sweeps.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.closeShared(0)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			buf := make([]byte, 32<<10)
			for range 60 {
				i := rng.IntN(files)
				fd, err := os.Open(join(mnt, fmt.Sprintf("d/f%02d", i)))
				if err != nil {
					errs <- err
					return
				}
				off := rng.Int64N(int64(len(want[i]) - len(buf)))
				// O_DIRECT is not available; drop the page cache of the
				// file so that reads keep reaching the daemon.
				_ = fadviseDontNeed(fd)
				n, err := fd.ReadAt(buf, off)
				fd.Close()
				if err != nil || !bytes.Equal(buf[:n], want[i][off:off+int64(n)]) || n != len(buf) {
					errs <- fmt.Errorf("f%02d at %d: %d bytes, err %v, match %v", i, off, n, err, bytes.Equal(buf[:n], want[i][off:off+int64(n)]))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	sweeps.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	f.closeShared(0)
	if n := f.openShared(); n != 0 {
		t.Errorf("%d shared readers open after the last sweep, want 0", n)
	}
}

func fadviseDontNeed(fd *os.File) error {
	const posixFadvDontneed = 4
	_, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, fd.Fd(), 0, 0, posixFadvDontneed, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// An object replaced on the server despite the immutable promise: a read
// that reaches the server fails with ESTALE (never a mix of versions);
// once the file's reader is gone it is looked up again and reads give the
// new bytes.
func TestDatasetModeChangedObject(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	const size = 40 << 20
	old := bytes.Repeat([]byte("old!"), size/4)
	mem.PutObject("d/f.bin", old, "", nil)
	c := objtest.NewCounting(mem)
	mnt, srv := datasetMount(t, c)
	f := srv.fsys

	fd, err := os.Open(join(mnt, "d/f.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	buf := make([]byte, 4096)
	if _, err := fd.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, old[:4096]) {
		t.Fatalf("first read: %v", err)
	}
	updated := bytes.Repeat([]byte("new!"), size/4)
	mem.PutObject("d/f.bin", updated, "", nil)
	far := int64(30 << 20) // not read ahead by the first read
	_, err = fd.ReadAt(buf, far)
	wantErrno(t, "read of the replaced object", err, syscall.ESTALE)
	_, err = fd.ReadAt(buf, far+8192)
	wantErrno(t, "second read of the replaced object", err, syscall.ESTALE)
	f.closeShared(0)                      // the sweep: look it up again, drop the kernel's pages
	for _, off := range []int64{far, 0} { // 0: its old pages were cached
		if _, err := fd.ReadAt(buf, off); err != nil {
			t.Fatalf("read at %d after the sweep: %v", off, err)
		}
		if !bytes.Equal(buf, updated[off:off+4096]) {
			t.Errorf("read at %d after the sweep = %q..., want the new version", off, buf[:8])
		}
	}
}

// interruptGrace: the READ's context outlives an INTERRUPT by the grace,
// ends when the grace is over, and ends at once when the READ is done.
func TestInterruptGrace(t *testing.T) {
	parent, interrupt := context.WithCancel(context.Background())
	ctx, done := interruptGrace(parent, 100*time.Millisecond)
	defer done()
	start := time.Now()
	interrupt()
	select {
	case <-ctx.Done():
		t.Fatalf("READ context ended %v after the INTERRUPT, want after the 100 ms grace", time.Since(start))
	case <-time.After(50 * time.Millisecond):
	}
	select {
	case <-ctx.Done():
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Errorf("ended after %v, before the grace", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("READ context still live 5 s after an INTERRUPT with a 100 ms grace")
	}

	live, stop := context.WithCancel(context.Background())
	defer stop()
	ctx2, done2 := interruptGrace(live, time.Hour)
	done2()
	select {
	case <-ctx2.Done():
	default:
		t.Error("READ context live after its cancel")
	}
}
