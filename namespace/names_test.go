package namespace

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"a", true}, {"a b", true}, {" lead", true}, {"%2F.txt", true}, {"..a", true}, {strings.Repeat("x", 255), true},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {"a\x00b", false}, {strings.Repeat("x", 256), false},
	} {
		if got := ValidName(c.name); got != c.ok {
			t.Errorf("ValidName(%q) = %v, want %v", c.name, got, c.ok)
		}
	}
}

func TestIsDirContentType(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/x-directory": true, "application/x-directory; charset=UTF-8": true, "Application/X-Directory": true,
		"binary/octet-stream": false, "": false, "application/x-directoryx": false,
	} {
		if got := IsDirContentType(ct); got != want {
			t.Errorf("IsDirContentType(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestChildKeys(t *testing.T) {
	for _, c := range []struct{ dir, name, key, dirKey string }{
		{"", "a", "a", "a/"},
		{"p/", "x y", "p/x y", "p/x y/"},
		{"p/q/", "%2F", "p/q/%2F", "p/q/%2F/"},
	} {
		if got := ChildKey(c.dir, c.name); got != c.key {
			t.Errorf("ChildKey(%q, %q) = %q, want %q", c.dir, c.name, got, c.key)
		}
		if got := ChildDirKey(c.dir, c.name); got != c.dirKey {
			t.Errorf("ChildDirKey(%q, %q) = %q, want %q", c.dir, c.name, got, c.dirKey)
		}
	}
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

func TestCmpSlash(t *testing.T) {
	for _, c := range [][2]string{{"x", "x/"}, {"x", "x"}, {"x", "x.txt"}, {"x", "x0"}, {"x", "w"}, {"x", "y"}, {"x", "x/a"}, {"abc", "ab"}, {"", "/"}, {"", "a"}} {
		if got, want := CmpSlash(c[0], c[1]), strings.Compare(c[0]+"/", c[1]); sign(got) != want {
			t.Errorf("CmpSlash(%q, %q) = %d, want %d", c[0], c[1], got, want)
		}
	}
}

func FuzzCmpSlash(f *testing.F) {
	f.Add("x", "x/")
	f.Add("x", "x.txt")
	f.Add("a b", "a/")
	f.Fuzz(func(t *testing.T, h, k string) {
		if got, want := sign(CmpSlash(h, k)), strings.Compare(h+"/", k); got != want {
			t.Errorf("CmpSlash(%q, %q) = %d, want %d", h, k, got, want)
		}
	})
}
