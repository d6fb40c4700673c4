package mountinfo

import (
	"slices"
	"strings"
	"testing"
)

const table = "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" +
	"30 22 0:25 / /tmp rw,nosuid - tmpfs tmpfs rw\n" +
	"41 30 0:40 / /tmp/with\\040space rw,nosuid,nodev,relatime shared:7 master:2 - fuse.os2g s3://b/p/ rw,user_id=0\n" +
	"42 30 0:41 / /tmp/with rw - fuse.other x rw\n" +
	"43 30 0:42 / /tmp/with rw - fuse.os2g y rw\n" +
	"garbage\n"

func TestParseAndEnclosing(t *testing.T) {
	ms, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 5 {
		t.Fatalf("%d entries: %+v", len(ms), ms)
	}
	if m := ms[2]; m.Target != "/tmp/with space" || m.FSType != "fuse.os2g" || m.Source != "s3://b/p/" || m.Options != "rw,nosuid,nodev,relatime" || m.Dev != "0:40" {
		t.Errorf("entry = %+v", m)
	}
	tests := []struct{ path, target, fstype string }{
		{"/tmp/with space", "/tmp/with space", "fuse.os2g"},
		{"/tmp/with space/train/a.png", "/tmp/with space", "fuse.os2g"},
		{"/tmp/without", "/tmp", "tmpfs"},
		{"/tmp/with/x", "/tmp/with", "fuse.os2g"}, // the topmost of two
		{"/home/u", "/", "ext4"},
		{"/", "/", "ext4"},
	}
	for _, tc := range tests {
		m, ok := Enclosing(ms, tc.path)
		if !ok || m.Target != tc.target || m.FSType != tc.fstype {
			t.Errorf("Enclosing(%q) = %+v, %v; want %s %s", tc.path, m, ok, tc.target, tc.fstype)
		}
	}
}

func TestAt(t *testing.T) {
	ms, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, source string
		ok           bool
	}{
		{"/tmp/with", "y", true}, // topmost
		{"/tmp/with space", "s3://b/p/", true},
		{"/tmp/with/x", "", false}, // inside a mount is not a mount point
		{"/tm", "", false},
	} {
		m, ok := At(ms, tc.path)
		if ok != tc.ok || m.Source != tc.source {
			t.Errorf("At(%q) = %+v, %v; want source %q, %v", tc.path, m, ok, tc.source, tc.ok)
		}
	}
}

func TestUnder(t *testing.T) {
	ms, _ := Parse(strings.NewReader(table))
	if got, want := Under(ms, "/tmp/with"), []string{"/tmp/with", "/tmp/with"}; !slices.Equal(got, want) {
		t.Errorf("Under(/tmp/with) = %q, want %q", got, want)
	}
	if got := Under(ms, "/tmp"); len(got) != 4 {
		t.Errorf("Under(/tmp) = %q, want 4 targets", got)
	}
}

func TestUnescape(t *testing.T) {
	if got := Unescape(`/mnt/with\040space`); got != "/mnt/with space" {
		t.Errorf("unescape = %q", got)
	}
	if got := Unescape(`a\134b\011c\`); got != "a\\b\tc\\" {
		t.Errorf("unescape = %q", got)
	}
}
