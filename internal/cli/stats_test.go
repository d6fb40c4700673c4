package cli

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// cannedMetrics is what a daemon serves, trimmed.
const cannedMetrics = `# HELP os2g_prefetch_requests_total Range GETs started, by origin.
# TYPE os2g_prefetch_requests_total counter
os2g_prefetch_requests_total{origin="demand"} 10
os2g_prefetch_requests_total{origin="epoch"} 5
os2g_prefetch_requests_total{origin="readahead"} 25
# TYPE os2g_prefetch_fetched_bytes_total counter
os2g_prefetch_fetched_bytes_total 3.145728e+06
# TYPE os2g_prefetch_read_bytes_total counter
os2g_prefetch_read_bytes_total 2.097152e+06
# TYPE os2g_prefetch_cache_hits_total counter
os2g_prefetch_cache_hits_total 90
# TYPE os2g_prefetch_cache_joins_total counter
os2g_prefetch_cache_joins_total 6
# TYPE os2g_prefetch_cache_misses_total counter
os2g_prefetch_cache_misses_total 4
# TYPE os2g_prefetch_evictions_total counter
os2g_prefetch_evictions_total 2
# TYPE os2g_prefetch_fetch_errors_total counter
os2g_prefetch_fetch_errors_total 0
# TYPE os2g_prefetch_budget_waits_total counter
os2g_prefetch_budget_waits_total 1
# TYPE os2g_prefetch_readahead_skipped_total counter
os2g_prefetch_readahead_skipped_total 3
# TYPE os2g_prefetch_budget_in_use_bytes gauge
os2g_prefetch_budget_in_use_bytes 2.68435456e+08
# TYPE os2g_prefetch_budget_max_bytes gauge
os2g_prefetch_budget_max_bytes 1.073741824e+09
# TYPE os2g_prefetch_epoch_files_total counter
os2g_prefetch_epoch_files_total 40
# TYPE os2g_prefetch_epoch_hit_opens_total counter
os2g_prefetch_epoch_hit_opens_total 38
# TYPE os2g_prefetch_epoch_opened_files_total counter
os2g_prefetch_epoch_opened_files_total 36
# TYPE os2g_prefetch_epoch_unopened_files_total counter
os2g_prefetch_epoch_unopened_files_total 4
# TYPE os2g_prefetch_epoch_wasted_bytes_total counter
os2g_prefetch_epoch_wasted_bytes_total 65536
# TYPE os2g_prefetch_epoch_refused_total counter
os2g_prefetch_epoch_refused_total 9
# TYPE os2g_prefetch_hints_total counter
os2g_prefetch_hints_total 3
# TYPE os2g_prefetch_hints_stale_total counter
os2g_prefetch_hints_stale_total 1
# TYPE os2g_prefetch_hint_files_total counter
os2g_prefetch_hint_files_total 30
# TYPE os2g_prefetch_disk_puts_total counter
os2g_prefetch_disk_puts_total 7
# TYPE os2g_prefetch_disk_put_errors_total counter
os2g_prefetch_disk_put_errors_total 0
# TYPE os2g_diskcache_bytes gauge
os2g_diskcache_bytes 1.048576e+06
# TYPE os2g_diskcache_entries gauge
os2g_diskcache_entries 7
# TYPE os2g_diskcache_hits_total counter
os2g_diskcache_hits_total 3
# TYPE os2g_diskcache_misses_total counter
os2g_diskcache_misses_total 1
# TYPE os2g_objclient_retries_total counter
os2g_objclient_retries_total 12
# TYPE os2g_prefetch_opens_total counter
os2g_prefetch_opens_total 16
# TYPE os2g_cpu_seconds_total counter
os2g_cpu_seconds_total 0.004
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.31072e+08
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 4.25
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7e+09
# TYPE go_goroutines gauge
go_goroutines 42
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 1e-05
go_gc_duration_seconds_sum 0.1
go_gc_duration_seconds_count 3
`

func TestRenderStats(t *testing.T) {
	ms, err := parseMetrics([]byte(cannedMetrics))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderStats(&b, "/mnt/data", "s3://b/p/", ms, time.Unix(1_700_000_090, 0))
	got := b.String()
	for _, want := range []string{
		"mount           /mnt/data (s3://b/p/)\n",
		"daemon uptime   1m30s\n",
		"range GETs      40 (demand 10, read-ahead 25, epoch 5)\n",
		"bytes fetched   3.0 MiB\n",
		"bytes read      2.0 MiB (fetched/read 1.50)\n",
		"cache           hits 90, joins 6, misses 4 (hit ratio 90.0%; 96.0% without a new GET)\n",
		"evictions       2\n",
		"fetch errors    0\n",
		"memory budget   256.0 MiB in use of 1.0 GiB (25.0%); demand waits 1, read-ahead skipped 3\n",
		"epoch pre-read  40 files, 38 opens found them ready\n",
		"order hints     3 accepted, 1 dropped stale, 30 files pre-read\n",
		"pre-read use    36 files opened, 4 not opened in their epoch (64.0 KiB wasted), 9 held back\n",
		"disk cache      7 objects, 1.0 MiB; hits 3, misses 1 (hit ratio 75.0%); puts 7, put errors 0, evictions -, corrupt -\n",
		"retries         12 objclient_retries_total\n",
		"process         RSS 125.0 MiB, CPU 4.25 s, goroutines 42\n",
		// 0.004 s over 2 MiB read and 16 files.
		"daemon CPU      0.00 s; 2.05 s per GiB read, 250 µs per file opened\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}

	// A daemon without a disk cache, and metrics missing altogether.
	ms, err = parseMetrics([]byte("# TYPE os2g_prefetch_read_bytes_total counter\nos2g_prefetch_read_bytes_total 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	renderStats(&b, "/m", "s3://b/", ms, time.Now())
	got = b.String()
	for _, want := range []string{"bytes fetched   -\n", "bytes read      0 B (fetched/read -)\n", "hit ratio -", "disk cache      none\n", "RSS -, CPU -", "daemon CPU      -\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("sparse output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "retries") || strings.Contains(got, "uptime") {
		t.Errorf("sparse output shows absent metrics:\n%s", got)
	}
	if _, err := parseMetrics([]byte("not metrics {")); err == nil {
		t.Error("parseMetrics accepted garbage")
	}
}

func TestControlSocketPath(t *testing.T) {
	// printf /mnt/data | sha256sum: the name is its first 16 hex digits.
	if got, want := controlSocketName("/mnt/data"), "6faba07f33e642da.sock"; got != want {
		t.Errorf("controlSocketName = %q, want %q", got, want)
	}
	if controlSocketName("/mnt/a") == controlSocketName("/mnt/b") {
		t.Error("two mount points share a socket name")
	}
	ps := controlSocketPaths("/mnt/data")
	if len(ps) != 2 || ps[0] != "/run/os2g/"+controlSocketName("/mnt/data") ||
		!strings.HasPrefix(ps[1], filepath.Join(os.TempDir(), "os2g-")) || filepath.Base(ps[1]) != controlSocketName("/mnt/data") {
		t.Errorf("controlSocketPaths = %q", ps)
	}
}

func TestControlEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "os2g_prefetch_fetched_bytes_total", Help: "x"})
	c.Add(4096)
	reg.MustRegister(c)
	mp := filepath.Join(t.TempDir(), "mnt") // any path works as a key
	stop := startControl(reg, mp, slog.New(slog.DiscardHandler))
	var sock string
	for _, p := range controlSocketPaths(mp) {
		if st, err := os.Stat(p); err == nil {
			if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want a socket with 0600", p, st.Mode())
			}
			sock = p
			break
		}
	}
	if sock == "" {
		stop()
		t.Fatalf("no control socket at %q", controlSocketPaths(mp))
	}
	if st, err := os.Stat(filepath.Dir(sock)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("socket directory: %v, %v; want mode 0700", st, err)
	}
	body, err := fetchMetrics(context.Background(), sock)
	if err != nil || !strings.Contains(string(body), "os2g_prefetch_fetched_bytes_total 4096") {
		t.Errorf("fetchMetrics: %v\n%s", err, body)
	}
	stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after stop: %v", err)
	}
	if _, err := fetchMetrics(context.Background(), sock); err == nil {
		t.Error("fetchMetrics after stop succeeded")
	}
}

func TestStatsErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stats"}, 2, "want 1 argument"},
		{[]string{"stats", filepath.Join(dir, "missing")}, 1, "os2g: stats: " + filepath.Join(dir, "missing") + " does not exist"},
		{[]string{"stats", dir}, 1, "is not an os2g mount"},
		{[]string{"stats", "--help"}, 0, ""},
	}
	for _, tc := range tests {
		code, _, errOut := runMain(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("os2g %q: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, errOut, tc.want)
		}
	}
}
