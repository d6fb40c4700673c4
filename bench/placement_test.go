package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestRunners(t *testing.T) {
	c := &config{Clients: withBase([]string{"os2g", "s3fs", "limit", "local"}, "/x/os2g-base"), Placements: []string{"host", "offload"}}
	got := labels(c.runners())
	want := []string{"os2g", "os2g-offload", "os2g-base", "os2g-base-offload", "s3fs", "s3fs-offload", "limit", "local"}
	if !slices.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	rs := c.runners()
	if rs[3].Client != baseClient || rs[3].Placement != "offload" || rs[6].Placement != "host" {
		t.Fatalf("runners %+v", rs)
	}
	if got := withBase([]string{"s3fs"}, "/b"); !slices.Equal(got, []string{baseClient, "s3fs"}) {
		t.Fatalf("withBase without os2g: %v", got)
	}
	if got := withBase([]string{"os2g"}, ""); !slices.Equal(got, []string{"os2g"}) {
		t.Fatalf("withBase without a path: %v", got)
	}
	c.Placements = []string{"offload"}
	c.Clients = []string{"rclone", "local"}
	if got := labels(c.runners()); !slices.Equal(got, []string{"rclone-offload", "local"}) {
		t.Fatalf("offload only: %v", got)
	}
}

func TestParseFences(t *testing.T) {
	s, h, err := parseFences("1", "0")
	if err != nil || !slices.Equal(s, []int{1}) || !slices.Equal(h, []int{0}) {
		t.Fatalf("1/0: %v %v %v", s, h, err)
	}
	if s, h, err := parseFences("", " "); err != nil || s != nil || h != nil {
		t.Fatalf("unfenced: %v %v %v", s, h, err)
	}
	for _, tc := range [][2]string{{"0-1", "1"}, {"x", "0"}, {"1", ""}, {"1", "5000"}} {
		if _, _, err := parseFences(tc[0], tc[1]); err == nil {
			t.Errorf("parseFences(%q, %q) accepted", tc[0], tc[1])
		}
	}
	c := &config{ServerCPUs: []int{1}, HostCPUs: []int{0}}
	if !slices.Equal(c.daemonCPUs("offload"), []int{1}) || !slices.Equal(c.daemonCPUs("host"), []int{0}) {
		t.Fatal("daemonCPUs")
	}
	name, args := fencedCommand([]int{2, 3}, "versitygw", "--port", "x")
	if name != "taskset" || !slices.Equal(args, []string{"-c", "2-3", "versitygw", "--port", "x"}) {
		t.Fatalf("fencedCommand: %s %v", name, args)
	}
	if name, args := fencedCommand(nil, "dd", "bs=1M"); name != "dd" || !slices.Equal(args, []string{"bs=1M"}) {
		t.Fatalf("unfenced command: %s %v", name, args)
	}
}

const statBefore = `cpu  100 0 50 1000 10 0 5 0 0 0
cpu0 60 0 30 400 5 0 5 0 0 0
cpu1 40 0 20 600 5 0 0 0 0 0
intr 12345
ctxt 999
`

const statAfter = `cpu  300 0 150 1100 10 0 5 0 0 0
cpu0 210 2 80 420 6 1 7 0 30 0
cpu1 90 0 70 680 4 0 0 0 0 0
`

func TestCPUStat(t *testing.T) {
	b, err := parseCPUStat([]byte(statBefore))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 2 || b[0] != (cpuTicks{Busy: 95, Total: 500}) || b[1] != (cpuTicks{Busy: 60, Total: 665}) {
		t.Fatalf("before: %+v", b)
	}
	a, err := parseCPUStat([]byte(statAfter))
	if err != nil {
		t.Fatal(err)
	}
	// cpu0: busy 210+2+80+1+7 = 300 (guest 30 is inside user), was 95.
	if got := busySeconds(b, a, []int{0}); got != 2.05 {
		t.Fatalf("cpu0 busy %v s, want 2.05", got)
	}
	if got := busySeconds(b, a, []int{0, 1}); math.Abs(got-3.05) > 1e-9 {
		t.Fatalf("cpu0+1 busy %v s, want 3.05", got)
	}
	if got := busySeconds(b, a, []int{7}); !math.IsNaN(got) {
		t.Fatalf("missing CPU: %v", got)
	}
	for _, bad := range []string{"", "intr 1\n", "cpuX 1 2 3 4\n", "cpu0 1 2\n", "cpu0 1 2 x 4 5\n"} {
		if _, err := parseCPUStat([]byte(bad)); err == nil {
			t.Errorf("parseCPUStat(%q) accepted", bad)
		}
	}
}

func TestParseDDBytes(t *testing.T) {
	out := "1024+0 records in\n1024+0 records out\n1073741824 bytes (1.1 GB, 1.0 GiB) copied, 1.87 s, 575 MB/s\n"
	if n, err := parseDDBytes(out); err != nil || n != 1<<30 {
		t.Fatalf("parseDDBytes: %d %v", n, err)
	}
	if _, err := parseDDBytes("dd: failed to open 'x': No such file or directory\n"); err == nil {
		t.Fatal("parseDDBytes accepted an error message")
	}
}

func TestRenderHostTable(t *testing.T) {
	mk := func(client, cs string, v float64, files int64, cpu, host float64) sample {
		return sample{Run: 1, Client: client, Case: cs, Value: v, MiBps: v, Bytes: files * (100 << 10), Files: files, Seconds: 1,
			CPU: cpu, HostCPU: host, P50: math.NaN(), P99: math.NaN()}
	}
	// 1000 files of 100 KiB: 0.0954 GiB.
	ss := []sample{
		mk("os2g", "loader-cold", 1600, 1000, 0.26, 0.66),
		mk("os2g-offload", "loader-cold", 1500, 1000, 0.25, 0.37),
		mk(baseClient, "loader-cold", 1400, 1000, 0.78, 0.9),
		mk("local", "loader-cold", 3500, 1000, math.NaN(), 0.3),
		mk("limit", "seq-dd", 1500, 0, 0.5, 0.6),
		mk("os2g", "seq-dd", 600, 0, 1.0, 0.3),
	}
	ss[4].Bytes, ss[5].Bytes = 1<<30, 1<<30
	figs := aggregate(ss, []string{"os2g", "os2g-offload", baseClient, "limit", "local"})
	var b bytes.Buffer
	renderHostTable(&b, figs)
	out := b.String()
	for _, want := range []string{
		"| loader-cold | os2g | host | 1600 | images/s | 2.73 | 260 | 660 | 6.92 | 2.20× local | 0.33× |",
		"| loader-cold | os2g-offload | offload | 1500 | images/s | 2.62 | 250 | 370 | 3.88 | 1.23× local | — |",
		"| loader-cold | os2g-base | host | 1400 | images/s | 8.18 | 780 | 900 | 9.44 | 3.00× local | — |",
		"| loader-cold | local | host | 3500 | images/s | — | — | 300 | 3.15 | — | — |",
		// No files counted: per GiB only; × ref against the limit.
		"| seq-dd | os2g | host | 600 | MiB/s | 1.00 | — | — | 0.30 | 0.50× limit | — |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("host table lacks %q\n---\n%s", want, out)
		}
	}
}
