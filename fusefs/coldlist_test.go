package fusefs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
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
	// The root's probe of "d", one probe per miss but the last (which
	// starts the listing and waits for it), one listing page.
	if l := c.Count("List"); l != 1+coldListMisses {
		t.Errorf("first %d stats and the background listing made %d LISTs, want %d", coldListMisses, l, coldListMisses+1)
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

// holdLists wraps mem so that the LISTs of prefix key for which hold(n)
// is true (n counts them from 1) wait until release is called (or 30 s,
// a hang guard). release may be called more than once.
func holdLists(mem *objtest.Mem, key string, hold func(n int32) bool) (st *objtest.Faulty, release func()) {
	ch := make(chan struct{})
	var once sync.Once
	var n atomic.Int32
	st = objtest.NewFaulty(mem, objtest.FaultOptions{Before: func(op, k string) error {
		if op == "List" && k == key && hold(n.Add(1)) {
			select {
			case <-ch:
			case <-time.After(30 * time.Second):
			}
		}
		return nil
	}})
	return st, func() { once.Do(func() { close(ch) }) }
}

// probesIn counts the lookup probes in d/ that c saw: LISTs other than
// the listing of d/ itself and the root's probe of d.
func probesIn(c *objtest.Counting) int64 {
	return c.Count("List") - c.KeyCount("List", "d/") - c.KeyCount("List", "d")
}

// Names looked up in listing order while the background listing of a
// large directory runs wait for the page that covers them instead of
// each costing a probe.
func TestLookupWaitsForBackgroundListing(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seedCold(mem)
	fa := objtest.NewFaulty(mem, objtest.FaultOptions{Before: func(op, key string) error {
		if op == "List" && key == "d/" {
			time.Sleep(20 * time.Millisecond) // every page
		}
		return nil
	}})
	c := objtest.NewCounting(fa)
	mnt, srv := testMountServer(t, c, Options{listPageSize: 10})
	statCold(t, mnt, 0)
	d := srv.root.GetChild("d").Operations().(*dirNode)
	for i := 1; i < coldFiles; i++ {
		statCold(t, mnt, i)
	}
	if n := probesIn(c); n != coldListMisses-1 {
		t.Errorf("%d probes, want %d (the misses before the listing started)", n, coldListMisses-1)
	}
	waitRefresh(t, d, func(d *dirNode) bool { return d.listed })
	if n := c.KeyCount("List", "d/"); n != coldFiles/10 {
		t.Errorf("listing of d/ took %d pages, want %d", n, coldFiles/10)
	}
	d.mu.Lock()
	hits, misses := d.waitHits, d.waitMisses
	d.mu.Unlock()
	if hits == 0 || misses != 0 {
		t.Errorf("waits for the listing: %d answered, %d gave up; want some answered and none given up", hits, misses)
	}
	_, err := os.Lstat(join(mnt, "d", "absent"))
	wantErrno(t, "lstat d/absent", err, syscall.ENOENT)
	if n := probesIn(c); n != coldListMisses-1 {
		t.Errorf("lstat of an absent name after the listing probed (%d probes)", n)
	}
}

// A name the background listing has passed without seeing it is absent,
// with no probe, while the listing still runs.
func TestLookupAbsentDecidedByListingPage(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seedCold(mem)
	// The first two pages come at once, the third not before release:
	// the listing stays under way.
	fa, release := holdLists(mem, "d/", func(n int32) bool { return n > 2 })
	c := objtest.NewCounting(fa)
	mnt, srv := testMountServer(t, c, Options{listPageSize: 10})
	for i := range coldListMisses {
		statCold(t, mnt, i)
	}
	d := srv.root.GetChild("d").Operations().(*dirNode)
	defer release()
	// "f005x" sorts between f005 and f006, in the first page.
	_, err := os.Lstat(join(mnt, "d", "f005x"))
	wantErrno(t, "lstat d/f005x", err, syscall.ENOENT)
	statCold(t, mnt, 15) // second page
	if n := probesIn(c); n != coldListMisses-1 {
		t.Errorf("%d probes, want %d", n, coldListMisses-1)
	}
	d.mu.Lock()
	running := d.refreshing
	d.mu.Unlock()
	if !running {
		t.Error("the listing ended before its third page was released")
	}
}

// Lookups that the background listing does not reach within listWait
// probe; after listWaitMisses such waits they stop waiting for it.
func TestLookupStopsWaitingForSlowListing(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seedCold(mem)
	fa, release := holdLists(mem, "d/", func(int32) bool { return true })
	c := objtest.NewCounting(fa)
	mnt, srv := testMountServer(t, c, Options{listWait: 20 * time.Millisecond})
	statCold(t, mnt, 0)
	d := srv.root.GetChild("d").Operations().(*dirNode)
	defer waitRefresh(t, d, func(*dirNode) bool { return true })
	defer release()
	n := coldListMisses + listWaitMisses + 10
	for i := 1; i < n; i++ {
		statCold(t, mnt, i)
	}
	if got := probesIn(c); got != int64(n) {
		t.Errorf("%d probes, want %d (every lookup)", got, n)
	}
	d.mu.Lock()
	hits, misses := d.waitHits, d.waitMisses
	d.mu.Unlock()
	if hits != 0 || misses != listWaitMisses {
		t.Errorf("waits: %d answered, %d gave up; want 0 and %d", hits, misses, listWaitMisses)
	}
}

// Pages of a background listing reach the prefetcher as they come, so
// reading the files of the first pages starts epoch pre-reading while
// the rest of the directory is still being listed.
func TestPartialListingStartsEpoch(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seedCold(mem)
	fa, release := holdLists(mem, "d/", func(n int32) bool { return n > 3 })
	c := objtest.NewCounting(fa)
	pm, err := prefetch.New(prefetch.Options{Getter: c, MaxMemory: 64 << 20, EpochIdle: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pm.Close)
	mnt, srv := testMountServer(t, c, Options{listPageSize: 10, Prefetch: pm})
	statCold(t, mnt, 0)
	d := srv.root.GetChild("d").Operations().(*dirNode)
	defer waitRefresh(t, d, func(*dirNode) bool { return true })
	defer release()
	for i := range 30 {
		if b := readFile(t, join(mnt, "d", coldName(i))); !bytes.Equal(b, coldData(i)) {
			t.Fatalf("%s: wrong content (%d bytes)", coldName(i), len(b))
		}
	}
	d.mu.Lock()
	running := d.refreshing
	d.mu.Unlock()
	if !running {
		t.Fatal("the listing ended before its fourth page was released")
	}
	if s := pm.Stats(); s.EpochStarts == 0 {
		t.Errorf("no epoch pre-reading after reading 30 files of the first 3 pages: %+v", s)
	}
}
