package namespace

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// The lister holds a file back until the listing passes "name/", even
// across pages, so a directory of the same name shadows it exactly once.
func TestListerShadowAcrossPages(t *testing.T) {
	var warned []string
	l := Lister{DirKey: "p/", Warn: func(msg, key string) { warned = append(warned, key) }}
	var out []Listed
	now := time.Now().UnixNano()
	page1 := []objclient.ObjectInfo{{Key: "p/"}, {Key: "p/x", Size: 3}, {Key: "p/x y"}, {Key: "p/x.txt", Size: 4}}
	for _, o := range page1 {
		out = l.Add(out, o, false, now)
	}
	for _, e := range out {
		if e.Name == "x" {
			t.Fatalf("page 1 released file x before x/ could be excluded")
		}
	}
	out = l.Add(out, objclient.ObjectInfo{Key: "p/x/"}, true, now)
	out = l.Add(out, objclient.ObjectInfo{Key: "p/z", Size: 1}, false, now)
	out = l.Flush(out, now)
	var got []string
	for _, e := range out {
		kind := "f"
		if e.Entry.Dir {
			kind = "d"
		}
		got = append(got, kind+":"+e.Name)
	}
	slices.Sort(got)
	if want := []string{"d:x", "f:x y", "f:x.txt", "f:z"}; !slices.Equal(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}
	if want := []string{"p/x"}; !slices.Equal(warned, want) {
		t.Errorf("warned about %q, want %q (the hidden 3-byte object)", warned, want)
	}
}

func TestListerPage(t *testing.T) {
	tests := []struct {
		name    string
		page    objclient.ListPage
		flush   bool
		want    []string // "d:name", "f:name", "z:name" (zero-byte file)
		decided string
	}{
		{name: "objects and prefixes merge in key order",
			page:    objclient.ListPage{Objects: []objclient.ObjectInfo{{Key: "d/a", Size: 1}, {Key: "d/c", Size: 1}}, CommonPrefixes: []string{"d/b/"}, IsTruncated: true},
			want:    []string{"f:a", "d:b"}, // c is held: "c/" could follow
			decided: "d/c"},
		{name: "an empty object marks a directory that shadows it",
			page:  objclient.ListPage{Objects: []objclient.ObjectInfo{{Key: "d/m"}}, CommonPrefixes: []string{"d/m/"}},
			flush: true,
			want:  []string{"d:m"}},
		{name: "zero-byte files are flagged for a marker check",
			page:  objclient.ListPage{Objects: []objclient.ObjectInfo{{Key: "d/e"}, {Key: "d/f", Size: 2}}},
			flush: true,
			want:  []string{"z:e", "f:f"}},
		{name: "the directory's own marker and invalid names are skipped",
			page:  objclient.ListPage{Objects: []objclient.ObjectInfo{{Key: "d/"}, {Key: "d/."}, {Key: "d/ok", Size: 1}}, CommonPrefixes: []string{"d/../", "d//"}},
			flush: true,
			want:  []string{"f:ok"}},
		{name: "nothing held: the page's last key is decided",
			page:    objclient.ListPage{Objects: []objclient.ObjectInfo{{Key: "d/a", Size: 1}}, CommonPrefixes: []string{"d/b/"}, IsTruncated: true},
			want:    []string{"f:a", "d:b"},
			decided: "d/b/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := Lister{DirKey: "d/"}
			out := l.AddPage(nil, tc.page, 1)
			decided := l.DecidedUpTo(tc.page)
			if tc.flush {
				out = l.Flush(out, 1)
			}
			var got []string
			for _, e := range out {
				kind := "f"
				switch {
				case e.Entry.Dir:
					kind = "d"
				case e.Zero:
					kind = "z"
				}
				got = append(got, kind+":"+e.Name)
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("entries %q, want %q", got, want)
			}
			if !tc.flush && decided != tc.decided {
				t.Errorf("DecidedUpTo = %q, want %q", decided, tc.decided)
			}
		})
	}
}

// A probe decides a name with one LIST (two when siblings fill the first
// page before "name/"), plus one HEAD for a zero-byte object.
func TestProbe(t *testing.T) {
	mem := objtest.NewMem()
	mem.PutObject("d/file", []byte("abc"), "", nil)
	mem.PutObject("d/dir/x", []byte("1"), "", nil)
	mem.PutObject("d/both", []byte("hidden"), "", nil)
	mem.PutObject("d/both/y", []byte("2"), "", nil)
	mem.PutObject("d/empty", nil, "", nil)
	mem.PutObject("d/marker", nil, "application/x-directory", nil)
	for _, k := range []string{"d/n", "d/n ", "d/n!", "d/n#", "d/n$", "d/n/child"} {
		mem.PutObject(k, []byte("n"), "", nil)
	}
	tests := []struct {
		name        string
		found       bool
		dir, xdir   bool
		size        int64
		lists, stat int64
		warned      bool
	}{
		{name: "file", found: true, size: 3, lists: 1},
		{name: "dir", found: true, dir: true, lists: 1},
		{name: "both", found: true, dir: true, lists: 1, warned: true},
		{name: "empty", found: true, lists: 1, stat: 1},
		{name: "marker", found: true, dir: true, xdir: true, lists: 1, stat: 1},
		{name: "n", found: true, dir: true, lists: 2, warned: true},
		{name: "missing", lists: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := objtest.NewCounting(mem)
			warned := false
			e, found, err := Probe(context.Background(), c, "d/", tc.name, func() int64 { return 7 }, func(string, string) { warned = true })
			if err != nil {
				t.Fatal(err)
			}
			if found != tc.found || e.Dir != tc.dir || e.XDir != tc.xdir || e.Size != tc.size {
				t.Errorf("Probe = %+v, found %v; want found %v dir %v xdir %v size %d", e, found, tc.found, tc.dir, tc.xdir, tc.size)
			}
			if found && e.Seen != 7 {
				t.Errorf("Seen = %d, want 7", e.Seen)
			}
			if l, s := c.Count("List"), c.Count("Stat"); l != tc.lists || s != tc.stat {
				t.Errorf("%d LISTs and %d HEADs, want %d and %d", l, s, tc.lists, tc.stat)
			}
			if warned != tc.warned {
				t.Errorf("warned %v, want %v", warned, tc.warned)
			}
		})
	}
}

func TestCheckMarker(t *testing.T) {
	mem := objtest.NewMem()
	mem.PutObject("k/empty", nil, "", nil)
	mem.PutObject("k/marker", nil, "application/x-directory; charset=UTF-8", nil)
	ctx := context.Background()
	e, found, err := CheckMarker(ctx, mem, "k/empty", Entry{Seen: 5})
	if err != nil || !found || e.Dir || !e.Checked || e.ETag == "" {
		t.Errorf("empty file: %+v, %v, %v; want a checked file with an ETag", e, found, err)
	}
	e, found, err = CheckMarker(ctx, mem, "k/marker", Entry{Seen: 5})
	if err != nil || !found || !e.Dir || !e.XDir || e.Seen != 5 {
		t.Errorf("marker: %+v, %v, %v; want an x-directory seen at 5", e, found, err)
	}
	if _, found, err := CheckMarker(ctx, mem, "k/gone", Entry{}); found || err != nil {
		t.Errorf("vanished: found %v, err %v; want false, nil", found, err)
	}
	fa := objtest.NewFaulty(mem, objtest.FaultOptions{Before: func(op, key string) error { return objclient.ErrThrottled }})
	if _, _, err := CheckMarker(ctx, fa, "k/empty", Entry{}); !errors.Is(err, objclient.ErrThrottled) {
		t.Errorf("store failure: %v; want ErrThrottled", err)
	}
}
