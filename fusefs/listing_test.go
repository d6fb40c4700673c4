package fusefs

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// C07: listings longer than 1000 keys, a page boundary on a key with a
// space, and pages mixing common prefixes and objects.
func TestC07Pagination(t *testing.T) {
	eachStore(t, func(t *testing.T, st objclient.Store) {
		var objs []obj
		for i := range 1500 {
			objs = append(objs, obj{key: fmt.Sprintf("p/a %04d.txt", i), data: []byte("Hello\n")})
		}
		for i := range 900 {
			objs = append(objs, obj{key: fmt.Sprintf("q/f%03d", i), data: []byte("x")})
		}
		for i := range 600 {
			objs = append(objs, obj{key: fmt.Sprintf("q/d%03d/x", i), data: []byte("x")})
		}
		seedParallel(t, st, objs)
		// A short TTL makes every ls list again.
		mnt := testMount(t, st, Options{MetadataTTL: time.Nanosecond})
		for run := range 5 {
			got := names(t, join(mnt, "p"))
			if len(got) != 1500 || dups(got) != 0 {
				t.Fatalf("run %d: ls p: %d entries, %d duplicates; want 1500, 0", run, len(got), dups(got))
			}
		}
		if s := lstat(t, join(mnt, "p/a 1499.txt")); s.Size != 6 {
			t.Errorf("p/a 1499.txt size %d, want 6", s.Size)
		}
		got := names(t, join(mnt, "q"))
		if len(got) != 1500 || dups(got) != 0 {
			t.Errorf("ls q: %d entries, %d duplicates; want 1500, 0", len(got), dups(got))
		}
		if _, isMem := st.(*objtest.Mem); !isMem {
			return // cp -r below: 3000 more requests, the in-memory store suffices
		}
		// cp -r p p2
		if err := os.Mkdir(join(mnt, "p2"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names(t, join(mnt, "p")) {
			writeFile(t, join(mnt, "p2", n), readFile(t, join(mnt, "p", n)))
		}
		if got := names(t, join(mnt, "p2")); len(got) != 1500 {
			t.Errorf("ls p2: %d entries, want 1500", len(got))
		}
	})
}

// C08 (a): 100,000 keys: about 100 LISTs, no HEAD.
func TestC08HugeDirectory(t *testing.T) {
	requireFUSE(t)
	const n = 100000
	syn := &synthStore{families: []synthFamily{{prefix: "big/", format: "s_%06d.jpg", count: n, obj: func(i int) synthObj {
		return synthObj{size: 4096, etag: `"e"`, mtime: time.Unix(1700000000, 0), fill: byteFill(1)}
	}}}}
	c := objtest.NewCounting(syn)
	mnt := testMount(t, c, Options{})
	f, err := os.Open(join(mnt, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total := 0
	for {
		ns, err := f.Readdirnames(4096)
		total += len(ns)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if total != n {
		t.Errorf("ls -A big: %d entries, want %d", total, n)
	}
	if l := c.Count("List"); l < 100 || l > 102 {
		t.Errorf("listing made %d LISTs, want about 100", l)
	}
	if s := c.Count("Stat"); s != 0 {
		t.Errorf("listing made %d HEADs, want 0", s)
	}
}

// C08 (b, c): ls -l and scandir+stat of 10,000 files: about 10 LISTs and
// no HEAD; sizes and mtimes from the listing.
func TestC08StatStorm(t *testing.T) {
	requireFUSE(t)
	const n = 10000
	base := time.Unix(1600000000, 0)
	syn := &synthStore{families: []synthFamily{{prefix: "med/", format: "x_%05d.npy", count: n, obj: func(i int) synthObj {
		return synthObj{size: 1024, etag: fmt.Sprintf(`"%d"`, i), mtime: base.Add(time.Duration(i) * time.Second), fill: byteFill(2)}
	}}}}
	c := objtest.NewCounting(syn)
	mnt := testMount(t, c, Options{MetadataTTL: time.Hour})

	// (b) ls -l: readdir(plus) then a stat per entry.
	out, err := exec.Command("ls", "-l", "--time-style=+%s", join(mnt, "med")).Output()
	if err != nil {
		t.Fatalf("ls -l: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")[1:] // skip "total"
	if len(lines) != n {
		t.Fatalf("ls -l printed %d lines, want %d", len(lines), n)
	}
	for _, l := range lines {
		var mode, owner, group, name string
		var links int
		var size, mtime int64
		if _, err := fmt.Sscan(l, &mode, &links, &owner, &group, &size, &mtime, &name); err != nil {
			t.Fatalf("parse %q: %v", l, err)
		}
		var i int
		fmt.Sscanf(name, "x_%05d.npy", &i)
		if size != 1024 || mtime != base.Unix()+int64(i) || links != 1 || mode != "-rw-r--r--" {
			t.Fatalf("ls -l line %q: want mode -rw-r--r--, 1 link, 1024 bytes, mtime %d", l, base.Unix()+int64(i))
		}
	}
	if l := c.Count("List"); l < 10 || l > 11 {
		t.Errorf("ls -l made %d LISTs, want 10-11", l)
	}
	if s := c.Count("Stat"); s != 0 {
		t.Errorf("ls -l made %d HEADs, want 0", s)
	}

	// (c) scandir + stat on a fresh mount.
	c2 := objtest.NewCounting(syn)
	mnt2 := testMount(t, c2, Options{})
	es, err := os.ReadDir(join(mnt2, "med"))
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, e := range es {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		sum += info.Size()
	}
	if sum != 10240000 {
		t.Errorf("sum of sizes %d, want 10240000", sum)
	}
	if l := c2.Count("List"); l < 10 || l > 11 {
		t.Errorf("scandir+stat made %d LISTs, want 10-11", l)
	}
	if s := c2.Count("Stat"); s != 0 {
		t.Errorf("scandir+stat made %d HEADs, want 0", s)
	}
}
