package fusefs

import (
	"fmt"
	"os"
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

// On an immutable mount, a readdir of the root lists its subdirectories
// in the background, so that walking them (an ImageFolder scan) costs no
// further LIST; a plain mount does not.
func TestReaddirPreListsSubdirectories(t *testing.T) {
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
			if !immutable {
				time.Sleep(50 * time.Millisecond) // a pre-listing would have started by now
				if n := c.Count("List"); n != 1 {
					t.Errorf("%d LISTs after the root's readdir on a plain mount, want 1", n)
				}
				return
			}
			for i := range 5 {
				waitRefresh(t, classNode(t, srv, i), func(d *dirNode) bool { return d.listed })
			}
			c.Reset()
			for i := range 5 {
				if n := readDirNames(t, join(mnt, fmt.Sprintf("c%d", i))); n != 3 {
					t.Errorf("c%d has %d entries, want 3", i, n)
				}
			}
			if n := c.Count("List"); n != 0 {
				t.Errorf("walking the pre-listed classes made %d LISTs, want 0", n)
			}
		})
	}
}

// A readdir of a directory whose background listing is under way waits
// for it and reads its result: the directory is listed once.
func TestReaddirWaitsForPreListing(t *testing.T) {
	requireFUSE(t)
	release := make(chan struct{})
	mem := objtest.NewMem()
	seedClasses(mem, 2, 3)
	fa := objtest.NewFaulty(mem, objtest.FaultOptions{Before: func(op, key string) error {
		if op == "List" && key == "c0/" {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
		return nil
	}})
	c := objtest.NewCounting(fa)
	mnt, srv := testMountServer(t, c, Options{Immutable: true})
	readDirNames(t, mnt)
	d := classNode(t, srv, 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		running := d.refreshing
		d.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no background listing of c0 started")
		}
		time.Sleep(time.Millisecond)
	}
	done := make(chan int, 1)
	go func() { done <- readDirNames(t, join(mnt, "c0")) }()
	select {
	case n := <-done:
		t.Fatalf("readdir of c0 returned %d entries while its listing was held", n)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if n := <-done; n != 3 {
		t.Errorf("c0 has %d entries, want 3", n)
	}
	if n := c.KeyCount("List", "c0/"); n != 1 {
		t.Errorf("c0/ was listed %d times, want 1", n)
	}
}
