package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// TestMeteredStore: uploads through the decorator are counted once each
// (committed, or failed whether the commit failed or the upload was
// aborted), with their bytes and commit times; the bytes reach the store.
func TestMeteredStore(t *testing.T) {
	mem := objtest.NewMem()
	reg := prometheus.NewRegistry()
	registerBuildInfo(reg, "v9.9.9", "abcdef0123456789")
	st := meteredStore{mem, newUploadMetrics(reg)}
	ctx := context.Background()

	w, err := st.Put(ctx, "a", objclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("hello "))
	w.Write([]byte("world"))
	if _, err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	w.Abort(ctx) // after a commit: not counted again
	w, err = st.Put(ctx, "b", objclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("xyz"))
	w.Abort(ctx)
	if info, err := mem.Stat(ctx, "a"); err != nil || info.Size != 11 {
		t.Fatalf("stored object: %+v, %v", info, err)
	}

	var buf bytes.Buffer
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		expfmt.MetricFamilyToText(&buf, f)
	}
	ms, err := parseMetrics(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"os2g_uploads_started_total": 2, "os2g_uploads_committed_total": 1, "os2g_uploads_failed_total": 1,
		"os2g_upload_bytes_total": 14, "os2g_upload_commit_duration_seconds_count": 1,
	} {
		if got, _ := ms.get(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got, ok := ms.get("os2g_build_info", "version", "v9.9.9", "commit", "abcdef012345"); !ok || got != 1 {
		t.Errorf("os2g_build_info: %v %v (%v)", got, ok, ms["os2g_build_info"])
	}
}

// TestRenderStatsInWords: FUSE operations, S3 requests, uploads and the
// build show in words, with mean times from the histograms.
func TestRenderStatsInWords(t *testing.T) {
	const text = `# TYPE os2g_log_info gauge
os2g_log_info{destination="/var/log/os2g/mnt-data.log"} 1
# TYPE os2g_build_info gauge
os2g_build_info{commit="abcdef012345",goversion="go1.26.8",version="v1.2.3"} 1
# TYPE os2g_fuse_ops_total counter
os2g_fuse_ops_total{op="read",status="ok"} 300
os2g_fuse_ops_total{op="lookup",status="ok"} 20
os2g_fuse_ops_total{op="lookup",status="ENOENT"} 5
os2g_fuse_ops_total{op="read",status="EIO"} 2
# TYPE os2g_fuse_op_duration_seconds histogram
os2g_fuse_op_duration_seconds_bucket{op="read",le="+Inf"} 302
os2g_fuse_op_duration_seconds_sum{op="read"} 0.604
os2g_fuse_op_duration_seconds_count{op="read"} 302
# TYPE os2g_s3_requests_total counter
os2g_s3_requests_total{op="GetObject",status="206"} 40
os2g_s3_requests_total{op="GetObject",status="503"} 3
os2g_s3_requests_total{op="ListObjectsV2",status="200"} 2
# TYPE os2g_s3_request_duration_seconds histogram
os2g_s3_request_duration_seconds_bucket{op="GetObject",le="+Inf"} 43
os2g_s3_request_duration_seconds_sum{op="GetObject"} 0.86
os2g_s3_request_duration_seconds_count{op="GetObject"} 43
# TYPE os2g_s3_retries_total counter
os2g_s3_retries_total 7
# TYPE os2g_uploads_started_total counter
os2g_uploads_started_total 4
# TYPE os2g_uploads_committed_total counter
os2g_uploads_committed_total 3
# TYPE os2g_uploads_failed_total counter
os2g_uploads_failed_total 1
# TYPE os2g_upload_bytes_total counter
os2g_upload_bytes_total 3145728
# TYPE os2g_upload_parts_total counter
os2g_upload_parts_total 5
# TYPE os2g_upload_commit_duration_seconds histogram
os2g_upload_commit_duration_seconds_bucket{le="+Inf"} 4
os2g_upload_commit_duration_seconds_sum 0.1
os2g_upload_commit_duration_seconds_count 4
`
	ms, err := parseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderStats(&b, "/mnt/data", "s3://b/", ms, time.Now())
	got := b.String()
	for _, want := range []string{
		"version         v1.2.3 (commit abcdef012345), go1.26.8\n",
		"log             /var/log/os2g/mnt-data.log\n",
		"FUSE ops        read 302 (2.0 ms), lookup 25\n",
		"FUSE errors     lookup ENOENT 5, read EIO 2\n",
		"S3 requests     GetObject 43 (20.0 ms), ListObjectsV2 2\n",
		"S3 errors       GetObject 503 3\n",
		"retries         7 S3 requests sent again (throttled or failed)\n",
		"uploads         4 started, 3 committed, 1 failed; 3.0 MiB written in 5 parts; commit 25.0 ms on average\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "os2g_") {
		t.Errorf("raw metric names in the output:\n%s", got)
	}
}
