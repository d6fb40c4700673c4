package fusefs

import (
	"syscall"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

// A directory shadows a file of the same name in listings and lookups;
// a lookup probe whose first page is full of siblings sorting before
// "name/" asks a second, exact question.
func TestShadowAndProbe(t *testing.T) {
	requireFUSE(t)
	mem := objtest.NewMem()
	seed(t, mem,
		obj{key: "a", data: []byte("hidden")}, obj{key: "a.txt", data: []byte("1")}, obj{key: "a/b", data: []byte("22")},
		obj{key: "n", data: []byte("n")}, obj{key: "n "}, obj{key: "n!"}, obj{key: "n#"}, obj{key: "n$"}, obj{key: "n.x"}, obj{key: "n/child"},
	)
	c := objtest.NewCounting(mem)
	mnt := testMount(t, c, Options{})
	if s := lstat(t, join(mnt, "n")); s.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Errorf("n: mode %o, want a directory", s.Mode)
	}
	if l := c.Count("List"); l != 2 {
		t.Errorf("lookup of n made %d LISTs, want 2", l)
	}
	if s := lstat(t, join(mnt, "a")); s.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Errorf("a: mode %o, want a directory", s.Mode)
	}
	wantNames(t, mnt, "a", "a.txt", "n", "n ", "n!", "n#", "n$", "n.x")
	wantNames(t, join(mnt, "a"), "b")
	if b := readFile(t, join(mnt, "a/b")); string(b) != "22" {
		t.Errorf("a/b = %q", b)
	}
}

func TestDirentIno(t *testing.T) {
	a, b := direntIno("dir/a"), direntIno("dir/b")
	if a == b || a>>63 != 0 || b>>63 != 0 || a < 2 {
		t.Errorf("direntIno: %d %d", a, b)
	}
	if direntIno("dir/a") != a {
		t.Errorf("direntIno is not stable")
	}
}

func TestOptionsValidation(t *testing.T) {
	st := objtest.NewMem()
	for _, o := range []Options{
		{},
		{Store: st, Prefix: "noslash"},
		{Store: st, Prefix: "/lead/"},
		{Store: st, FileMode: 0o1777},
		{Store: st, MetadataTTL: -1},
		{Store: st, PartSize: -1},
		{Store: st, MaxBackground: 70000},
	} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("withDefaults(%+v) accepted invalid options", o)
		}
	}
	o, err := Options{Store: st, Prefix: "data/"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.FileMode != 0o644 || o.DirMode != 0o755 || o.MetadataTTL != DefaultMetadataTTL || o.NegativeTTL != DefaultNegativeTTL || o.FSName != "os2g" {
		t.Errorf("defaults: %+v", o)
	}
	o, _ = Options{Store: st, Immutable: true}.withDefaults()
	if o.MetadataTTL < 24*time.Hour || o.NegativeTTL < 24*time.Hour {
		t.Errorf("Immutable TTLs %v %v, want effectively infinite", o.MetadataTTL, o.NegativeTTL)
	}
}
