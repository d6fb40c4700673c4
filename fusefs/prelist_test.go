package fusefs

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

func seedClasses(mem *objtest.Mem, classes, files int) {
	for c := range classes {
		for i := range files {
			mem.PutObject(fmt.Sprintf("c%d/img%d.png", c, i), []byte(fmt.Sprintf("class %d image %d", c, i)), "", nil)
		}
	}
}

func classNode(t *testing.T, srv *Server, c int) *dirNode {
	t.Helper()
	ch := srv.root.GetChild(fmt.Sprintf("c%d", c))
	if ch == nil {
		t.Fatalf("c%d has no inode after the root's readdir", c)
	}
	return ch.Operations().(*dirNode)
}

func readDirNames(t *testing.T, p string) int {
	t.Helper()
	ents, err := os.ReadDir(p)
	if err != nil {
		t.Fatalf("readdir %s: %v", p, err)
	}
	return len(ents)
}

// On an immutable mount, a walk of the root's subdirectories (the second
// one listed) has the rest listed in the background, so that walking them
// (an ImageFolder scan) costs no further LIST; a readdir of the root alone
// lists nothing more, and neither does a walk on a plain mount.
func TestWalkPreListsSubdirectories(t *testing.T) {
	for _, immutable := range []bool{true, false} {
		t.Run(fmt.Sprintf("immutable=%v", immutable), func(t *testing.T) {
			requireFUSE(t)
			mem := objtest.NewMem()
			seedClasses(mem, 5, 3)
			c := objtest.NewCounting(mem)
			mnt, srv := testMountServer(t, c, Options{Immutable: immutable})
			if n := readDirNames(t, mnt); n != 5 {
				t.Fatalf("root has %d entries, want 5", n)
			}
			time.Sleep(50 * time.Millisecond) // a pre-listing would have started by now
			if n := c.Count("List"); n != 1 {
				t.Errorf("%d LISTs after the root's readdir alone, want 1", n)
			}
			for i := range 2 {
				if n := readDirNames(t, join(mnt, fmt.Sprintf("c%d", i))); n != 3 {
					t.Errorf("c%d has %d entries, want 3", i, n)
				}
			}
			if !immutable {
				time.Sleep(50 * time.Millisecond)
				if n := c.Count("List"); n != 3 {
					t.Errorf("%d LISTs after walking 2 of 5 classes on a plain mount, want 3", n)
				}
				return
			}
			for i := 2; i < 5; i++ {
				waitRefresh(t, classNode(t, srv, i), func(d *dirNode) bool { return d.listed })
			}
			for i := 2; i < 5; i++ {
				if n := readDirNames(t, join(mnt, fmt.Sprintf("c%d", i))); n != 3 {
					t.Errorf("c%d has %d entries, want 3", i, n)
				}
			}
			// Each class once: c0 and c1 by their readdirs (c1's started
			// the pre-listing, which leaves it out), the rest ahead.
			for i := range 5 {
				if n := c.KeyCount("List", fmt.Sprintf("c%d/", i)); n != 1 {
					t.Errorf("c%d/ listed %d times, want 1", i, n)
				}
			}
		})
	}
}

// A readdir of a directory whose background listing is under way waits
// for it and reads its result, so the directory is listed once; one that
// would wait longer than refreshWait lists the directory itself.
func TestReaddirWaitsForPreListing(t *testing.T) {
	for _, giveUp := range []bool{false, true} {
		t.Run(fmt.Sprintf("giveUp=%v", giveUp), func(t *testing.T) {
			requireFUSE(t)
			o := Options{Immutable: true}
			if giveUp {
				o.refreshWait = 30 * time.Millisecond
			}
			var held atomic.Int32
			mem := objtest.NewMem()
			seedClasses(mem, 3, 3)
			// Hold the first listing of c2/ (the background one).
			fa, release := holdLists(mem, "c2/", func(n int32) bool { held.Store(n); return n == 1 })
			c := objtest.NewCounting(fa)
			mnt, srv := testMountServer(t, c, o)
			readDirNames(t, mnt)
			readDirNames(t, join(mnt, "c0"))
			readDirNames(t, join(mnt, "c1"))
			d := classNode(t, srv, 2)
			defer waitRefresh(t, d, func(*dirNode) bool { return true })
			defer release()
			deadline := time.Now().Add(10 * time.Second)
			for held.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no background listing of c2 started")
				}
				time.Sleep(time.Millisecond)
			}
			done := make(chan int, 1)
			go func() {
				ents, err := os.ReadDir(join(mnt, "c2"))
				if err != nil {
					t.Errorf("readdir c2: %v", err)
				}
				done <- len(ents)
			}()
			if giveUp {
				if n := <-done; n != 3 {
					t.Errorf("c2 has %d entries, want 3", n)
				}
				if n := c.KeyCount("List", "c2/"); n != 2 {
					t.Errorf("c2/ listed %d times, want 2 (the held background listing and the readdir's own)", n)
				}
				return
			}
			select {
			case n := <-done:
				t.Fatalf("readdir of c2 returned %d entries while its background listing was held", n)
			case <-time.After(50 * time.Millisecond):
			}
			release()
			if n := <-done; n != 3 {
				t.Errorf("c2 has %d entries, want 3", n)
			}
			if n := c.KeyCount("List", "c2/"); n != 1 {
				t.Errorf("c2/ was listed %d times, want 1", n)
			}
		})
	}
}

// A walk's background listings stop when they have listed
// preListEntries entries.
func TestWalkPreListBudget(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seedClasses(mem, 6, 3)
	c := objtest.NewCounting(mem)
	// one listing at a time
	mnt, srv := testMountServer(t, c, Options{Immutable: true, preListEntries: 4, preListConcurrency: 1})
	readDirNames(t, mnt)
	readDirNames(t, join(mnt, "c0"))
	readDirNames(t, join(mnt, "c1"))
	// c2 (budget 4 -> 1), then c3 (1 -> -2); then the budget is spent.
	for i := 2; i < 4; i++ {
		waitRefresh(t, classNode(t, srv, i), func(d *dirNode) bool { return d.listed })
	}
	time.Sleep(50 * time.Millisecond) // a listing of c4 would have started by now
	for i := 4; i < 6; i++ {
		if n := c.KeyCount("List", fmt.Sprintf("c%d/", i)); n != 0 {
			t.Errorf("c%d/ listed %d times after the budget was spent, want 0", i, n)
		}
	}
}

// A stale listing of a directory listed before is refreshed in the
// background, but lookup misses meanwhile probe at once: they do not
// wait for it.
func TestStaleRelistLookupsProbe(t *testing.T) {
	requireFUSE(t)
	var clock atomic.Int64
	clock.Store(1e18)
	mem := objtest.NewMem()
	seedCold(mem)
	// The second listing of d/ (the background refresh) is held.
	fa, release := holdLists(mem, "d/", func(n int32) bool { return n == 2 })
	defer release()
	c := objtest.NewCounting(fa)
	mnt, srv := testMountServer(t, c, Options{MetadataTTL: time.Nanosecond, NegativeTTL: time.Nanosecond, clock: clock.Load})
	if n := readDirNames(t, join(mnt, "d")); n != coldFiles {
		t.Fatalf("d has %d entries, want %d", n, coldFiles)
	}
	d := srv.root.GetChild("d").Operations().(*dirNode)
	clock.Add(int64(time.Second)) // the listing is stale now
	_, err := os.Lstat(join(mnt, "d", "absent"))
	wantErrno(t, "lstat d/absent", err, syscall.ENOENT)
	d.mu.Lock()
	running, hits, misses := d.refreshing, d.waitHits, d.waitMisses
	d.mu.Unlock()
	if !running {
		t.Error("no background refresh of the stale listing")
	}
	if hits != 0 || misses != 0 {
		t.Errorf("the lookup waited for the refresh (%d answered, %d gave up), want a probe", hits, misses)
	}
	if n := c.KeyCount("List", "d/absent"); n != 1 {
		t.Errorf("%d probes of d/absent, want 1", n)
	}
}
