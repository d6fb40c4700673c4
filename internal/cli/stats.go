package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/os2g/os2g/internal/mountinfo"
)

const statsUsage = `Usage: os2g stats [--raw] MOUNTPOINT

Prints the metrics of the os2g daemon serving MOUNTPOINT (or the os2g mount
that holds the path): range GETs by origin, bytes fetched and read, cache hits,
memory budget, epoch pre-reading, disk cache, and the daemon's RSS and CPU
time. Every daemon serves its Prometheus metrics on a Unix socket found from
the mount point (/run/os2g/HASH.sock, or under the temporary directory when
/run is not writable); --raw prints them as they come, in the Prometheus text
format.
`

// osFSType is the file system type an os2g mount has in the mount table
// (go-fuse: "fuse." + fuse.MountOptions.Name).
const osFSType = "fuse.os2g"

// resolvePath makes p absolute and resolves symlinks; a path that does not
// exist is an error saying so. On a stale mount (ENOTCONN) it returns the
// absolute path unresolved.
func resolvePath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	r, err := filepath.EvalSymlinks(abs)
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%s does not exist", abs)
	case errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED):
		return abs, nil
	default:
		return "", fmt.Errorf("%s: %w", abs, err)
	}
}

func newStatsCmd(e Env) *cobra.Command {
	var raw bool
	c := &cobra.Command{
		Use:   "stats [--raw] MOUNTPOINT",
		Short: "show the metrics of a mount's daemon",
		Long:  statsUsage,
		Args:  exactArgs(1, "MOUNTPOINT"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
		RunE: func(c *cobra.Command, args []string) error {
			return runStats(c.Context(), e, raw, args[0])
		},
	}
	c.Flags().BoolVar(&raw, "raw", false, "print the metrics as served, in the Prometheus text format")
	return c
}

func runStats(ctx context.Context, e Env, raw bool, target string) error {
	p, err := resolvePath(target)
	if err != nil {
		return err
	}
	m, ok := mountinfo.Enclosing(mountinfo.Self(), p)
	if !ok || m.FSType != osFSType {
		if ok {
			return fmt.Errorf("%s is not an os2g mount (it is on %s, file system %s from %s)", p, m.Target, m.FSType, m.Source)
		}
		return fmt.Errorf("%s is not an os2g mount", p)
	}
	var errs []string
	var body []byte
	for _, sock := range controlSocketPaths(m.Target) {
		b, err := fetchMetrics(ctx, sock)
		if err == nil {
			body = b
			break
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errs = append(errs, sock+": no such socket")
		case errors.Is(err, fs.ErrPermission):
			errs = append(errs, sock+": permission denied (run os2g stats as the user that mounted)")
		case errors.Is(err, syscall.ECONNREFUSED):
			errs = append(errs, sock+": nothing answers (the daemon is gone)")
		default:
			errs = append(errs, sock+": "+oneLine(err.Error()))
		}
	}
	if body == nil {
		return fmt.Errorf("cannot reach the os2g daemon of %s (%s); if the daemon died, clear the stale mount with: fusermount3 -u %s",
			m.Target, strings.Join(errs, "; "), m.Target)
	}
	if raw {
		_, err := e.Stdout.Write(body)
		return err
	}
	ms, err := parseMetrics(body)
	if err != nil {
		return fmt.Errorf("the daemon of %s sent metrics that do not parse: %w", m.Target, err)
	}
	renderStats(e.Stdout, m.Target, m.Source, ms, time.Now())
	return nil
}

// metricSet maps a metric name to its samples.
type metricSet map[string][]sample

// sample is one labelled value.
type sample struct {
	labels map[string]string
	value  float64
}

// parseMetrics parses the Prometheus text format.
func parseMetrics(b []byte) (metricSet, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out := metricSet{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			s := sample{labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.value = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				s.value = m.GetUntyped().GetValue()
			case dto.MetricType_HISTOGRAM:
				// Kept as NAME_sum and NAME_count, for means.
				h := m.GetHistogram()
				out[name+"_sum"] = append(out[name+"_sum"], sample{labels: s.labels, value: h.GetSampleSum()})
				out[name+"_count"] = append(out[name+"_count"], sample{labels: s.labels, value: float64(h.GetSampleCount())})
				continue
			default:
				continue // summaries are not shown
			}
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}

// get returns the sum of name's samples whose labels include want
// (label, value pairs), and whether any matched.
func (ms metricSet) get(name string, want ...string) (float64, bool) {
	var sum float64
	found := false
	for _, s := range ms[name] {
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			if s.labels[want[i]] != want[i+1] {
				ok = false
			}
		}
		if ok {
			sum += s.value
			found = true
		}
	}
	return sum, found
}

// renderStats writes the readable summary of ms, the metrics of the daemon
// of the mount at mp (from source), as a two-column table. Missing metrics
// show as "-"; now dates the daemon's uptime. The hit ratio is hits over
// hits + joins + misses (joins found their bytes already being fetched).
func renderStats(w io.Writer, mp, source string, ms metricSet, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }
	num := func(name string, want ...string) string {
		v, ok := ms.get(name, want...)
		if !ok {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	size := func(name string) string {
		v, ok := ms.get(name)
		if !ok {
			return "-"
		}
		return FormatSize(int64(v))
	}
	pct := func(a, b float64) string {
		if b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*a/b)
	}
	const pf = "os2g_prefetch_"
	row("mount", "%s (%s)", mp, source)
	if bi := ms["os2g_build_info"]; len(bi) > 0 {
		l := bi[0].labels
		v := l["version"]
		if l["commit"] != "" {
			v += " (commit " + l["commit"] + ")"
		}
		row("version", "%s, %s", v, l["goversion"])
	}
	if li := ms["os2g_log_info"]; len(li) > 0 {
		row("log", "%s", li[0].labels["destination"])
	}
	if start, ok := ms.get("process_start_time_seconds"); ok && start > 0 {
		up := now.Sub(time.Unix(int64(start), 0)).Round(time.Second)
		row("daemon uptime", "%v", up)
	}

	row("range GETs", "%s (demand %s, read-ahead %s, epoch %s)", num(pf+"requests_total"),
		num(pf+"requests_total", "origin", "demand"), num(pf+"requests_total", "origin", "readahead"), num(pf+"requests_total", "origin", "epoch"))
	fetched, okF := ms.get(pf + "fetched_bytes_total")
	read, okR := ms.get(pf + "read_bytes_total")
	row("bytes fetched", "%s", size(pf+"fetched_bytes_total"))
	ratio := "-"
	if okF && okR && read > 0 {
		ratio = fmt.Sprintf("%.2f", fetched/read)
	}
	row("bytes read", "%s (fetched/read %s)", size(pf+"read_bytes_total"), ratio)

	hits, _ := ms.get(pf + "cache_hits_total")
	joins, _ := ms.get(pf + "cache_joins_total")
	misses, _ := ms.get(pf + "cache_misses_total")
	row("cache", "hits %s, joins %s, misses %s (hit ratio %s; %s without a new GET)", num(pf+"cache_hits_total"), num(pf+"cache_joins_total"),
		num(pf+"cache_misses_total"), pct(hits, hits+joins+misses), pct(hits+joins, hits+joins+misses))
	row("evictions", "%s", num(pf+"evictions_total"))
	row("fetch errors", "%s", num(pf+"fetch_errors_total"))
	inUse, _ := ms.get(pf + "budget_in_use_bytes")
	maxB, _ := ms.get(pf + "budget_max_bytes")
	row("memory budget", "%s in use of %s (%s); demand waits %s, read-ahead skipped %s", size(pf+"budget_in_use_bytes"),
		size(pf+"budget_max_bytes"), pct(inUse, maxB), num(pf+"budget_waits_total"), num(pf+"readahead_skipped_total"))
	row("epoch pre-read", "%s files, %s opens found them ready", num(pf+"epoch_files_total"), num(pf+"epoch_hit_opens_total"))
	row("order hints", "%s accepted, %s dropped stale, %s files pre-read", num(pf+"hints_total"), num(pf+"hints_stale_total"), num(pf+"hint_files_total"))
	row("pre-read use", "%s files opened, %s not opened in their epoch (%s wasted), %s held back", num(pf+"epoch_opened_files_total"),
		num(pf+"epoch_unopened_files_total"), size(pf+"epoch_wasted_bytes_total"), num(pf+"epoch_refused_total"))
	if _, ok := ms.get("os2g_diskcache_bytes"); ok {
		dh, _ := ms.get("os2g_diskcache_hits_total")
		dm, _ := ms.get("os2g_diskcache_misses_total")
		row("disk cache", "%s objects, %s; hits %s, misses %s (hit ratio %s); puts %s, put errors %s, evictions %s, corrupt %s",
			num("os2g_diskcache_entries"), size("os2g_diskcache_bytes"), num("os2g_diskcache_hits_total"), num("os2g_diskcache_misses_total"),
			pct(dh, dh+dm), num(pf+"disk_puts_total"), num(pf+"disk_put_errors_total"), num("os2g_diskcache_evictions_total"), num("os2g_diskcache_corrupt_total"))
	} else {
		row("disk cache", "none")
	}
	if _, ok := ms.get("os2g_fuse_ops_total"); ok {
		row("FUSE ops", "%s", opSummary(ms, "os2g_fuse_ops_total", "os2g_fuse_op_duration_seconds"))
		row("FUSE errors", "%s", errorSummary(ms, "os2g_fuse_ops_total", func(st string) bool { return st == "ok" }))
	}
	if _, ok := ms.get("os2g_s3_requests_total"); ok {
		row("S3 requests", "%s", opSummary(ms, "os2g_s3_requests_total", "os2g_s3_request_duration_seconds"))
		row("S3 errors", "%s", errorSummary(ms, "os2g_s3_requests_total", func(st string) bool { return len(st) == 3 && st[0] == '2' }))
	}
	if _, ok := ms.get("os2g_uploads_started_total"); ok {
		mean := "-"
		if n, _ := ms.get("os2g_upload_commit_duration_seconds_count"); n > 0 {
			sum, _ := ms.get("os2g_upload_commit_duration_seconds_sum")
			mean = formatSeconds(sum / n)
		}
		row("uploads", "%s started, %s committed, %s failed; %s written in %s parts; commit %s on average",
			num("os2g_uploads_started_total"), num("os2g_uploads_committed_total"), num("os2g_uploads_failed_total"),
			size("os2g_upload_bytes_total"), num("os2g_upload_parts_total"), mean)
	}
	// Retries, when some layer exports them.
	var retries []string
	for name := range ms {
		if strings.HasPrefix(name, "os2g_") && strings.Contains(name, "retr") {
			retries = append(retries, name)
		}
	}
	sort.Strings(retries)
	for _, name := range retries {
		what := strings.TrimPrefix(name, "os2g_")
		if name == "os2g_s3_retries_total" {
			what = "S3 requests sent again (throttled or failed)"
		}
		row("retries", "%s %s", num(name), what)
	}
	cpu := "-"
	if v, ok := ms.get("process_cpu_seconds_total"); ok {
		cpu = fmt.Sprintf("%.2f s", v)
	}
	row("process", "RSS %s, CPU %s, goroutines %s", size("process_resident_memory_bytes"), cpu, num("go_goroutines"))
	row("daemon CPU", "%s", daemonCPU(ms))
	tw.Flush()
}

// opSummary renders the counts of metric by its "op" label, largest
// first, each with its mean time from the histogram hist ("read 120 (1.5 ms)").
func opSummary(ms metricSet, metric, hist string) string {
	counts := map[string]float64{}
	for _, smp := range ms[metric] {
		counts[smp.labels["op"]] += smp.value
	}
	ops := make([]string, 0, len(counts))
	for op := range counts {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		if counts[ops[i]] != counts[ops[j]] {
			return counts[ops[i]] > counts[ops[j]]
		}
		return ops[i] < ops[j]
	})
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		p := fmt.Sprintf("%s %s", op, strconv.FormatFloat(counts[op], 'f', -1, 64))
		if n, ok := ms.get(hist+"_count", "op", op); ok && n > 0 {
			sum, _ := ms.get(hist+"_sum", "op", op)
			p += " (" + formatSeconds(sum/n) + ")"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// errorSummary renders the samples of metric whose "status" label is not
// a success, by operation and status ("read EIO 2"), or "none".
func errorSummary(ms metricSet, metric string, success func(status string) bool) string {
	var parts []string
	for _, smp := range ms[metric] {
		if st := smp.labels["status"]; !success(st) && smp.value > 0 {
			parts = append(parts, fmt.Sprintf("%s %s %s", smp.labels["op"], st, strconv.FormatFloat(smp.value, 'f', -1, 64)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// daemonCPU renders os2g_cpu_seconds_total (else process_cpu_seconds_total)
// per GiB read and per file opened (os2g_prefetch_read_bytes_total,
// os2g_prefetch_opens_total): the daemon's cost of the work it served since
// it started. Missing metrics show as "-".
func daemonCPU(ms metricSet) string {
	cpu, ok := ms.get("os2g_cpu_seconds_total")
	if !ok {
		if cpu, ok = ms.get("process_cpu_seconds_total"); !ok {
			return "-"
		}
	}
	perGiB, perFile := "-", "-"
	if read, ok := ms.get("os2g_prefetch_read_bytes_total"); ok && read > 0 {
		perGiB = fmt.Sprintf("%.2f s", cpu/(read/(1<<30)))
	}
	if opens, ok := ms.get("os2g_prefetch_opens_total"); ok && opens > 0 {
		perFile = formatSeconds(cpu / opens)
	}
	return fmt.Sprintf("%.2f s; %s per GiB read, %s per file opened", cpu, perGiB, perFile)
}

// formatSeconds renders a duration in seconds readably ("1.5 ms", "2.3 s").
func formatSeconds(s float64) string {
	switch {
	case s < 1e-3:
		return fmt.Sprintf("%.0f µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.1f ms", s*1e3)
	}
	return fmt.Sprintf("%.2f s", s)
}
