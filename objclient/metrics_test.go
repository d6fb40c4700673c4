package objclient_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// TestRequestMetrics: every request is counted by S3 operation and HTTP
// status, with its duration, and multipart parts are counted.
func TestRequestMetrics(t *testing.T) {
	srv := objtest.StartFakeS3Server(t)
	reg := prometheus.NewRegistry()
	o := srv.Options()
	o.Registerer = reg
	o.PartSize = 5 << 20
	s := objtest.NewS3(t, o)
	// A second store on the same registry shares the collectors.
	o2 := o
	objtest.NewS3(t, o2)
	ctx := context.Background()

	data := bytes.Repeat([]byte("x"), 11<<20) // three parts
	w, err := s.Put(ctx, "big", objclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	if n, err := s.GetRange(ctx, "big", 0, buf, ""); err != nil || n != 100 {
		t.Fatalf("GetRange: %d, %v", n, err)
	}
	if _, err := s.Stat(ctx, "missing"); !errors.Is(err, objclient.ErrNotFound) {
		t.Fatalf("Stat(missing): %v", err)
	}
	if _, err := s.List(ctx, objclient.ListRequest{Prefix: "b"}); err != nil {
		t.Fatal(err)
	}

	want := map[[2]string]float64{
		{"CreateMultipartUpload", "200"}:   1,
		{"UploadPart", "200"}:              3,
		{"CompleteMultipartUpload", "200"}: 1,
		{"GetObject", "206"}:               1,
		{"HeadObject", "404"}:              1,
		{"ListObjectsV2", "200"}:           1,
	}
	got := requestCounts(t, reg)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("os2g_s3_requests_total{op=%q,status=%q} = %v, want %v (all: %v)", k[0], k[1], got[k], v, got)
		}
	}
	if n := partsTotal(t, reg); n != 3 {
		t.Errorf("os2g_upload_parts_total = %v, want 3", n)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "os2g_s3_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h.GetSampleCount() == 0 || h.GetSampleSum() <= 0 {
				t.Errorf("duration histogram %v: %d samples, sum %v", m.GetLabel(), h.GetSampleCount(), h.GetSampleSum())
			}
		}
		if n := len(f.GetMetric()); n < 6 {
			t.Errorf("request duration histograms: %d series, want one per operation (6)", n)
		}
	}
}

// requestCounts gathers os2g_s3_requests_total by (op, status).
func requestCounts(t *testing.T, reg *prometheus.Registry) map[[2]string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]float64{}
	for _, f := range fams {
		if f.GetName() != "os2g_s3_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var k [2]string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "op":
					k[0] = l.GetValue()
				case "status":
					k[1] = l.GetValue()
				}
			}
			out[k] = m.GetCounter().GetValue()
		}
	}
	return out
}

func partsTotal(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "os2g_upload_parts_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}
