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
			c.Reset()
			for i := 2; i < 5; i++ {
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
	seedClasses(mem, 3, 3)
	fa := objtest.NewFaulty(mem, objtest.FaultOptions{Before: func(op, key string) error {
		if op == "List" && key == "c2/" {
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
	readDirNames(t, join(mnt, "c0"))
	readDirNames(t, join(mnt, "c1"))
	d := classNode(t, srv, 2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		running := d.refreshing
		d.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			close(release)
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
	select {
	case n := <-done:
		close(release)
		t.Fatalf("readdir of c2 returned %d entries while its listing was held", n)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if n := <-done; n != 3 {
		t.Errorf("c2 has %d entries, want 3", n)
	}
	if n := c.KeyCount("List", "c2/"); n != 1 {
		t.Errorf("c2/ was listed %d times, want 1", n)
	}
}
