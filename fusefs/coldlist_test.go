package fusefs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
	"github.com/os2g/os2g/prefetch"
)

const coldFiles = 100

func coldName(i int) string { return fmt.Sprintf("f%03d", i) }

// coldData is the content of coldName(i): 1000+i bytes.
func coldData(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i) }

func seedCold(mem *objtest.Mem) {
	for i := range coldFiles {
		mem.PutObject("d/"+coldName(i), coldData(i), "", nil)
	}
}

// waitRefresh waits until no background listing of d runs and done(d)
// holds (the deadline is only a hang guard).
func waitRefresh(t *testing.T, d *dirNode, done func(d *dirNode) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d.mu.Lock()
		ok := !d.refreshing && done(d)
		d.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("background listing did not finish")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func statCold(t *testing.T, mnt string, i int) {
	t.Helper()
	st := lstat(t, join(mnt, "d", coldName(i)))
	if st.Size != int64(1000+i) {
		t.Errorf("%s: size %d, want %d", coldName(i), st.Size, 1000+i)
	}
}

// Names of a directory that is never read, looked up one by one, make
// the directory listed in the background after coldListMisses misses;
// later lookups cost no LIST.
func TestColdDirectoryListedAfterMisses(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seedCold(mem)
	c := objtest.NewCounting(mem)
	mnt, srv := testMountServer(t, c, Options{})
	for i := range coldListMisses {
		statCold(t, mnt, i)
	}
	d := srv.root.GetChild("d").Operations().(*dirNode)
	waitRefresh(t, d, func(d *dirNode) bool { return d.listed })
	// The root's probe of "d", one probe per miss, one listing page.
	if l := c.Count("List"); l != 1+coldListMisses+1 {
		t.Errorf("first %d stats and the background listing made %d LISTs, want %d", coldListMisses, l, coldListMisses+2)
	}
	if h := c.Count("Stat"); h != 0 {
		t.Errorf("%d HEADs, want 0", h)
	}
	c.Reset()
	for i := coldListMisses; i < coldFiles; i++ {
		statCold(t, mnt, i)
	}
	_, err := os.Lstat(join(mnt, "d", "absent"))
	wantErrno(t, "lstat d/absent", err, syscall.ENOENT)
	if l := c.Count("List") - c.KeyCount("List", "d"); l != 0 {
		t.Errorf("stats after the background listing made %d LISTs in d/, want 0", l)
	}
}

// The background listing tells the prefetcher the directory's files, so
// reading them whole by name (never listing the directory) starts epoch
// pre-reading.
func TestColdDirectoryListingStartsEpoch(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seedCold(mem)
	c := objtest.NewCounting(mem)
	pm, err := prefetch.New(prefetch.Options{Getter: c, MaxMemory: 64 << 20, EpochIdle: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pm.Close)
	mnt, srv := testMountServer(t, c, Options{Prefetch: pm})
	order := rand.New(rand.NewPCG(1, 2)).Perm(coldFiles)
	for _, i := range order[:coldListMisses] {
		statCold(t, mnt, i)
	}
	d := srv.root.GetChild("d").Operations().(*dirNode)
	waitRefresh(t, d, func(d *dirNode) bool { return d.listed })
	if s := pm.Stats(); s.EpochStarts != 0 {
		t.Fatalf("epoch pre-reading started before any read: %+v", s)
	}
	for _, i := range order {
		if b := readFile(t, join(mnt, "d", coldName(i))); !bytes.Equal(b, coldData(i)) {
			t.Fatalf("%s: wrong content (%d bytes)", coldName(i), len(b))
		}
	}
	// EpochStarts counts pre-readers started, which needs the
	// directory's files from NoteDir; how much one fetches before the
	// reads overtake it depends on scheduling.
	if s := pm.Stats(); s.EpochStarts == 0 {
		t.Errorf("no epoch pre-reading after reading %d files of a listed directory: %+v", coldFiles, s)
	}
}

// A background listing that fails is dropped: lookups keep working by
// probes, nothing is marked absent, and it is not retried at once.
func TestColdDirectoryListingFails(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seedCold(mem)
	fa := objtest.NewFaulty(mem, objtest.FaultOptions{Before: func(op, key string) error {
		if op == "List" && key == "d/" {
			return fmt.Errorf("injected: %w", objclient.ErrUnavailable)
		}
		return nil
	}})
	c := objtest.NewCounting(fa)
	mnt, srv := testMountServer(t, c, Options{})
	for i := range coldListMisses {
		statCold(t, mnt, i)
	}
	d := srv.root.GetChild("d").Operations().(*dirNode)
	waitRefresh(t, d, func(d *dirNode) bool { return d.coldFailAt != 0 })
	for i := coldListMisses; i < coldFiles; i++ {
		statCold(t, mnt, i)
	}
	d.mu.Lock()
	listed, nneg := d.listed, len(d.neg)
	d.mu.Unlock()
	if listed || nneg != 0 {
		t.Errorf("after a failed listing: listed %v, %d negative entries; want false, 0", listed, nneg)
	}
	if n := c.KeyCount("List", "d/"); n != 1 {
		t.Errorf("full listing of d/ tried %d times, want 1 (no retry within the backoff)", n)
	}
	if n := c.Count("List") - c.KeyCount("List", "d/") - c.KeyCount("List", "d"); n != coldFiles {
		t.Errorf("%d probes in d/, want %d", n, coldFiles)
	}
}
