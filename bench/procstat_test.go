package main

import (
	"os"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	// A comm with spaces and parentheses must not shift the fields.
	line := "4242 (os2g (mount) x) S 1 4242 4242 0 -1 4194560 1234 0 5 0 250 125 0 0 20 0 12 0 987654 2000000 9000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	c, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if c.User != 2.5 || c.System != 1.25 || c.Total() != 3.75 {
		t.Fatalf("got %+v, want user 2.5 s, system 1.25 s", c)
	}
	if st := parseProcStatState([]byte(line)); st != "S" {
		t.Fatalf("state %q", st)
	}
	if s := parseStartTime([]byte(line)); s != 987654 {
		t.Fatalf("start time %d, want 987654", s)
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 5 0"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

func TestParseProcStatSelf(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc")
	}
	if _, err := parseProcStat(b); err != nil {
		t.Fatal(err)
	}
	hwm, err := readProcHWM(os.Getpid())
	if err != nil || hwm <= 0 {
		t.Fatalf("VmHWM of self = %d, %v", hwm, err)
	}
}

func TestParseVmHWM(t *testing.T) {
	status := "Name:\tos2g\nVmPeak:\t 2000000 kB\nVmHWM:\t   51324 kB\nVmRSS:\t   40000 kB\n"
	v, err := parseVmHWM([]byte(status))
	if err != nil || v != 51324*1024 {
		t.Fatalf("got %d, %v; want %d", v, err, 51324*1024)
	}
	if _, err := parseVmHWM([]byte("Name:\tx\n")); err == nil {
		t.Fatal("no error without VmHWM")
	}
	if _, err := parseVmHWM([]byte("VmHWM:\t12 MB\n")); err == nil {
		t.Fatal("no error for a unit other than kB")
	}
}

func TestSplitCmdlineAndMountinfo(t *testing.T) {
	args := splitCmdline([]byte("os2g\x00mount\x00--foreground\x00/tmp/a b\x00"))
	if len(args) != 4 || args[3] != "/tmp/a b" {
		t.Fatalf("got %q", args)
	}
	if splitCmdline(nil) != nil {
		t.Fatal("empty cmdline gives args")
	}
	mi := "36 35 98:0 / /mnt1 rw - ext3 /dev/root rw\n" +
		"50 36 0:45 / /tmp/os2g-bench/mnt/os2g\\0401 ro - fuse.os2g s3://b ro\n"
	if !mountinfoHas([]byte(mi), "/tmp/os2g-bench/mnt/os2g 1") {
		t.Fatal("escaped mount point not found")
	}
	if mountinfoHas([]byte(mi), "/tmp/os2g-bench/mnt") || mountinfoHas([]byte(mi), "/mnt") {
		t.Fatal("prefix matched as a mount point")
	}
}

func TestUnixMinor(t *testing.T) {
	// makedev(0, 45) and makedev(0, 300)
	if m := unixMinor(45); m != 45 {
		t.Fatalf("minor(45) = %d", m)
	}
	dev := uint64(300&0xff) | uint64(300&^0xff)<<12
	if m := unixMinor(dev); m != 300 {
		t.Fatalf("minor = %d, want 300", m)
	}
}
