package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func testSamples() []sample {
	nan := math.NaN()
	mk := func(run int, client, cs string, v float64, bytes int64, cpu float64, rss int64) sample {
		return sample{Run: run, Client: client, Case: cs, Value: v, MiBps: v, P50: 1, P99: 2, Bytes: bytes, Seconds: 1, CPU: cpu, RSS: rss}
	}
	return []sample{
		mk(1, "os2g", "seq-1j", 900, 1<<30, 0.5, 100<<20),
		mk(2, "os2g", "seq-1j", 1000, 1<<30, 0.4, 120<<20),
		mk(3, "os2g", "seq-1j", 950, 1<<30, 0.6, 110<<20),
		mk(1, "s3fs", "seq-1j", 300, 1<<30, 2, 20<<20),
		mk(2, "s3fs", "seq-1j", 0, 0, nan, 0),
		mk(1, "limit", "seq-1j", 1000, 1<<30, 0.2, 0),
		mk(1, "os2g", "list", 5000, 0, 0.1, 30<<20),
	}
}

func TestAggregate(t *testing.T) {
	ss := testSamples()
	ss[4].Err = "wrong bytes: x"
	figs := aggregate(ss, []string{"os2g", "s3fs", "rclone", "limit"})
	if len(figs) != 4 {
		t.Fatalf("%d figures, want 4: %+v", len(figs), figs)
	}
	o := findFigure(figs, "seq-1j", "os2g")
	if o.Value.Median != 950 || o.Value.Min != 900 || o.Value.Max != 1000 || o.Runs != 3 || o.Failed != 0 {
		t.Fatalf("os2g seq: %+v", o)
	}
	if o.CPUPerGiB != 0.5 || o.RSS != 120<<20 || o.VsLimit != 0.95 {
		t.Fatalf("os2g seq cpu/rss/limit: %v %d %v", o.CPUPerGiB, o.RSS, o.VsLimit)
	}
	s := findFigure(figs, "seq-1j", "s3fs")
	if s.Runs != 2 || s.Failed != 1 || s.Value.N != 1 || s.Value.Median != 300 {
		t.Fatalf("s3fs seq: %+v", s)
	}
	l := findFigure(figs, "list", "os2g")
	if !math.IsNaN(l.CPUPerGiB) || l.CPU != 0.1 {
		t.Fatalf("list has CPU per GiB without bytes: %+v", l)
	}
	if findFigure(figs, "seq-1j", "rclone") != nil {
		t.Fatal("figure for a client without samples")
	}
	if !math.IsNaN(findFigure(figs, "seq-1j", "limit").VsLimit) {
		t.Fatal("limit has a ratio to itself")
	}
}

func TestRenderMarkdown(t *testing.T) {
	ss := testSamples()
	ss[4].Err = "wrong bytes: small/f00001.bin"
	figs := aggregate(ss, []string{"os2g", "s3fs", "limit"})
	var b bytes.Buffer
	meta := runMeta{Started: time.Date(2026, 12, 1, 20, 35, 0, 0, time.UTC), Finished: time.Date(2026, 12, 1, 20, 45, 0, 0, time.UTC),
		LoadStart: "1.00 2.00 3.00", LoadEnd: "4.00 5.00 6.00", Machine: "2 CPUs", Runs: 3, Sizes: "seq 1 GiB"}
	renderMarkdown(&b, meta, figs, ss)
	out := b.String()
	for _, want := range []string{
		"# os2g benchmark, 2026-12-01 20:35 UTC",
		"load average (1/5/15 min) 1.00 2.00 3.00 at start, 4.00 5.00 6.00 at end",
		"Duration: 10m0s",
		"| seq-1j | os2g | 950 | 900–1000 | MiB/s | 950 | 1.00 | 2.00 | 0.50 | 0.50 | 120 | 0.95× |",
		"| seq-1j | s3fs | 300 (1 failed) | 300–300 | MiB/s |",
		"| seq-1j | limit | 1000 | 1000–1000 | MiB/s | 1000 | 1.00 | 2.00 | 0.20 | 0.20 | — | — |",
		"| list | os2g | 5000 | 5000–5000 | entries/s | 5000 | 1.00 | 2.00 | — | 0.10 | 30 | — |",
		"| workload | ÷ s3fs | CPU ÷ s3fs | ÷ limit | CPU ÷ limit |",
		"| seq-1j | 3.17× | 0.25× | 0.95× | 2.50× |",
		"## Failures",
		"- run 2, s3fs, seq-1j: wrong bytes: small/f00001.bin",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q\n---\n%s", want, out)
		}
	}
}

func TestRenderCSV(t *testing.T) {
	figs := aggregate(testSamples()[:3], []string{"os2g"})
	var b bytes.Buffer
	if err := renderCSV(&b, figs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), lines)
	}
	// No files counted and no host CPU measured in these samples: per-file
	// columns empty, host CPU 0.
	if want := "seq-1j,os2g,MiB/s,950,900,1000,3,0,950,1,2,0.5,0.5,120,,,0,,0"; lines[1] != want {
		t.Fatalf("row %q, want %q", lines[1], want)
	}
}

func TestFmtNum(t *testing.T) {
	for in, want := range map[float64]string{1234.5: "1234", 12.345: "12.3", 1.234: "1.23", 0: "0.00", 0.0012: "0.0012"} {
		if got := fmtNum(in); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", in, got, want)
		}
	}
	if fmtNum(math.NaN()) != "—" {
		t.Error("NaN not rendered as a dash")
	}
}

func TestParseSizeAndList(t *testing.T) {
	for in, want := range map[string]int64{"512": 512, "4k": 4096, "4KiB": 4096, "8M": 8 << 20, "110KiB": 110 << 10, "1GiB": 1 << 30, "2g": 2 << 30} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1.5G", "1PB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q): no error", bad)
		}
	}
	got, err := parseList("local, os2g,limit", allClients, "clients")
	if err != nil || strings.Join(got, ",") != "os2g,limit,local" {
		t.Fatalf("parseList = %v, %v", got, err)
	}
	if _, err := parseList("os2g,goofys", allClients, "clients"); err == nil {
		t.Fatal("unknown client accepted")
	}
}

func TestQuickDefaults(t *testing.T) {
	c, err := parseConfig([]string{"--quick", "--list-count", "500"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Runs != 1 || c.SeqSize != 128<<20 || c.ListCount != 500 || c.SmallCount != 300 {
		t.Fatalf("quick config %+v", c)
	}
	c, err = parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runs != 3 || c.SeqSize != 1<<30 || c.SmallCount != 2000 || c.SmallSize != 110<<10 || c.ListCount != 20000 || c.LoaderCount != 10000 || c.WriteSize != 1<<30 {
		t.Fatalf("default config %+v", c)
	}
}

func TestChunkCRCWriter(t *testing.T) {
	w := &chunkCRCWriter{chunk: 4}
	_, _ = w.Write([]byte("abcdefghij")) // chunks "abcd" "efgh" "ij"
	w2 := &chunkCRCWriter{chunk: 4}
	for _, p := range []string{"a", "bcdef", "ghi", "j"} {
		_, _ = w2.Write([]byte(p))
	}
	s1, s2 := w.Sums(), w2.Sums()
	if len(s1) != 3 || len(s2) != 3 {
		t.Fatalf("sums %v %v", s1, s2)
	}
	for i := range s1 {
		if s1[i] != s2[i] {
			t.Fatalf("chunking depends on write sizes: %v vs %v", s1, s2)
		}
	}
	if err := compareCRCs("k", s1, s2); err != nil {
		t.Fatal(err)
	}
	s2[1]++
	if err := compareCRCs("k", s1, s2); err == nil || !strings.Contains(err.Error(), "chunk 1") {
		t.Fatalf("mismatch not reported: %v", err)
	}
}

func TestPercentileAndRotate(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if percentile(xs, 50) != 5 || percentile(xs, 99) != 10 || percentile(xs, 0) != 1 {
		t.Fatalf("percentiles %v %v", percentile(xs, 50), percentile(xs, 99))
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Fatal("percentile of nothing")
	}
	if got := strings.Join(rotate([]string{"a", "b", "c"}, 4), ""); got != "bca" {
		t.Fatalf("rotate = %s", got)
	}
}

func TestParseIDX(t *testing.T) {
	b := []byte{0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6}
	dims, data, err := parseIDX(b)
	if err != nil || len(dims) != 2 || dims[0] != 2 || dims[1] != 3 || len(data) != 6 {
		t.Fatalf("got %v %v %v", dims, data, err)
	}
	if _, _, err := parseIDX(b[:len(b)-1]); err == nil {
		t.Fatal("short payload accepted")
	}
}
