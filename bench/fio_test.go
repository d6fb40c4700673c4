package main

import (
	"math"
	"os"
	"slices"
	"testing"
)

func TestParseFioJSON(t *testing.T) {
	b, err := os.ReadFile("testdata/fio-read.json")
	if err != nil {
		t.Fatal(err)
	}
	// fio sometimes prints warnings before the JSON document.
	b = append([]byte("fio: some warning\n"), b...)
	r, err := parseFioJSON(b, "read")
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 8388608 || r.BWBytes != 2796202666 || r.RuntimeMS != 3 {
		t.Fatalf("got %+v", r)
	}
	if math.Abs(r.IOPS-2666.666667) > 1e-6 {
		t.Fatalf("IOPS = %v", r.IOPS)
	}
	if r.P50 != 0.236544 || r.P99 != 0.872448 {
		t.Fatalf("p50 %v p99 %v, want 0.236544 0.872448 ms", r.P50, r.P99)
	}
}

func TestParseFioJSONMultiJob(t *testing.T) {
	doc := `{"jobs":[
	 {"jobname":"a","error":0,"read":{"io_bytes":100,"bw_bytes":10,"iops":1,"runtime":5,"clat_ns":{"percentile":{"50.000000":1000000,"99.000000":3000000}}}},
	 {"jobname":"b","error":0,"read":{"io_bytes":300,"bw_bytes":30,"iops":3,"runtime":7,"clat_ns":{"percentile":{"50.000000":2000000,"99.000000":2500000}}}}]}`
	r, err := parseFioJSON([]byte(doc), "read")
	if err != nil {
		t.Fatal(err)
	}
	want := fioResult{Bytes: 400, BWBytes: 40, IOPS: 4, RuntimeMS: 7, P50: 2, P99: 3}
	if r != want {
		t.Fatalf("got %+v, want %+v", r, want)
	}
}

func TestParseFioJSONErrors(t *testing.T) {
	cases := map[string]string{
		"no json":    "fio: failed to open file",
		"bad json":   "{\"jobs\": [",
		"no jobs":    `{"jobs":[]}`,
		"job error":  `{"jobs":[{"jobname":"x","error":5,"read":{"io_bytes":1}}]}`,
		"zero bytes": `{"jobs":[{"jobname":"x","error":0,"read":{"io_bytes":0}}]}`,
	}
	for name, in := range cases {
		if _, err := parseFioJSON([]byte(in), "read"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Percentiles absent: NaN, not zero.
	r, err := parseFioJSON([]byte(`{"jobs":[{"jobname":"x","error":0,"write":{"io_bytes":9}}]}`), "write")
	if err != nil || r.Bytes != 9 || !math.IsNaN(r.P50) || !math.IsNaN(r.P99) {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func TestFioJobArgs(t *testing.T) {
	j := fioJob{Name: "seq4", File: "/m/big", RW: "read", BS: "1M", NumJobs: 4, Size: 256 << 20, OffsetInc: 256 << 20}
	a := j.args("/tmp/o.json")
	for _, want := range []string{"--readonly", "--rw=read", "--numjobs=4", "--size=268435456", "--offset_increment=268435456", "--output=/tmp/o.json", "--filename=/m/big"} {
		if !slices.Contains(a, want) {
			t.Errorf("args %v lack %s", a, want)
		}
	}
	if slices.Contains(a, "--time_based") {
		t.Errorf("sequential job is time based: %v", a)
	}
	j = fioJob{Name: "r", File: "/m/big", RW: "randread", BS: "4k", NumJobs: 1, Size: 1 << 30, Runtime: 15}
	a = j.args("o")
	if slices.Contains(a, "--time_based") || !slices.Contains(a, "--runtime=15s") {
		t.Errorf("random job args %v", a)
	}
	j.TimeBased = true
	if a = j.args("o"); !slices.Contains(a, "--time_based") {
		t.Errorf("time-based job args %v", a)
	}
}
