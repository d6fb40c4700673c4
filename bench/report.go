package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// figure is the aggregate of one client on one case over all runs.
type figure struct {
	Case, Client, Unit string
	Value              summary // headline figure
	MiBps, P50, P99    float64 // medians; NaN where not measured
	CPU                float64 // median daemon CPU seconds per run
	CPUPerGiB          float64 // median daemon CPU seconds per GiB delivered; NaN without bytes
	RSS                int64   // largest peak RSS over the runs, bytes; 0 unknown
	// Per-file and host figures (medians over the runs; NaN unknown):
	// daemon CPU seconds per file, host CPU seconds per file and per GiB,
	// host CPU seconds per run.
	CPUPerFile, HostPerFile, HostPerGiB, HostCPU float64
	Runs, Failed                                 int
	VsLimit                                      float64 // Value / limit's Value for the same case
}

// aggregate folds samples into one figure per (case, client), in case
// order then client order; failed samples count in Failed only.
func aggregate(samples []sample, clients []string) []figure {
	var out []figure
	for _, cs := range cases {
		for _, cl := range clients {
			var vals, mib, p50, p99, cpu, cpg, cpf, hpf, hpg, hcpu []float64
			f := figure{Case: cs.Name, Client: cl, Unit: cs.Unit}
			for _, s := range samples {
				if s.Case != cs.Name || s.Client != cl {
					continue
				}
				f.Runs++
				if s.Err != "" {
					f.Failed++
					continue
				}
				vals = append(vals, s.Value)
				mib = append(mib, s.MiBps)
				p50 = append(p50, s.P50)
				p99 = append(p99, s.P99)
				cpu = append(cpu, s.CPU)
				if s.Bytes > 0 {
					cpg = append(cpg, s.CPU/(float64(s.Bytes)/(1<<30)))
					hpg = append(hpg, s.HostCPU/(float64(s.Bytes)/(1<<30)))
				}
				if s.Files > 0 {
					cpf = append(cpf, s.CPU/float64(s.Files))
					hpf = append(hpf, s.HostCPU/float64(s.Files))
				}
				hcpu = append(hcpu, s.HostCPU)
				f.RSS = max(f.RSS, s.RSS)
			}
			if f.Runs == 0 {
				continue
			}
			f.Value = summarize(vals)
			f.MiBps = summarize(mib).Median
			f.P50 = summarize(p50).Median
			f.P99 = summarize(p99).Median
			f.CPU = summarize(cpu).Median
			f.CPUPerGiB = summarize(cpg).Median
			f.CPUPerFile = summarize(cpf).Median
			f.HostPerFile = summarize(hpf).Median
			f.HostPerGiB = summarize(hpg).Median
			f.HostCPU = summarize(hcpu).Median
			out = append(out, f)
		}
	}
	for i := range out {
		out[i].VsLimit = math.NaN()
		if out[i].Client == "limit" {
			continue
		}
		if l := findFigure(out, out[i].Case, "limit"); l != nil {
			out[i].VsLimit = ratio(out[i].Value.Median, l.Value.Median)
		}
	}
	return out
}

func findFigure(fs []figure, cs, client string) *figure {
	for i := range fs {
		if fs[i].Case == cs && fs[i].Client == client {
			return &fs[i]
		}
	}
	return nil
}

// fmtNum renders a figure with about three significant digits; NaN as "—".
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case math.Abs(v) >= 0.01 || v == 0:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmtNum(v) + "×"
}

func fmtRSS(b int64) string {
	if b <= 0 {
		return "—"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 0, 64)
}

// renderMarkdown writes the report: metadata, the main table, os2g's
// ratios to every other client, and the failures.
func renderMarkdown(w io.Writer, meta runMeta, figs []figure, samples []sample) {
	fmt.Fprintf(w, "# os2g benchmark, %s\n\n", meta.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- Machine: %s; load average (1/5/15 min) %s at start, %s at end\n", meta.Machine, meta.LoadStart, meta.LoadEnd)
	fmt.Fprintf(w, "- Duration: %s; runs per figure: %d (median, with min–max)\n", meta.Finished.Sub(meta.Started).Round(time.Second), meta.Runs)
	fmt.Fprintf(w, "- Sizes: %s\n", meta.Sizes)
	for _, v := range meta.Versions {
		fmt.Fprintf(w, "- %s\n", v)
	}
	for _, n := range meta.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintln(w)
	renderHostTable(w, figs)
	fmt.Fprint(w, "\n## All figures\n\n")
	fmt.Fprintln(w, "| workload | client | median | min–max | unit | MiB/s | p50 ms | p99 ms | CPU s/GiB | CPU s | peak RSS MiB | × limit |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, f := range figs {
		med, rng := fmtNum(f.Value.Median), fmtNum(f.Value.Min)+"–"+fmtNum(f.Value.Max)
		if f.Value.N == 0 {
			med, rng = "FAIL", "—"
		} else if f.Failed > 0 {
			med += fmt.Sprintf(" (%d failed)", f.Failed)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			f.Case, f.Client, med, rng, f.Unit, fmtNum(f.MiBps), fmtNum(f.P50), fmtNum(f.P99),
			fmtNum(f.CPUPerGiB), fmtNum(f.CPU), fmtRSS(f.RSS), fmtRatio(f.VsLimit))
	}
	renderRatios(w, figs)
	var errs []string
	for _, s := range samples {
		if s.Err != "" {
			errs = append(errs, fmt.Sprintf("- run %d, %s, %s: %s", s.Run, s.Client, s.Case, s.Err))
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\n## Failures\n\n%s\n", strings.Join(errs, "\n"))
	}
}

// renderRatios writes os2g's throughput and CPU per GiB relative to each
// other client, per case.
func renderRatios(w io.Writer, figs []figure) {
	var others []string
	seen := map[string]bool{}
	for _, f := range figs {
		if f.Client != "os2g" && !seen[f.Client] {
			seen[f.Client] = true
			others = append(others, f.Client)
		}
	}
	if !findAny(figs, "os2g") || len(others) == 0 {
		return
	}
	fmt.Fprint(w, "\n## os2g relative to each client\n\n")
	fmt.Fprint(w, "Throughput: os2g ÷ client (above 1: os2g faster). CPU: os2g's daemon CPU per GiB ÷ the client's (below 1: os2g cheaper).\n\n")
	fmt.Fprint(w, "| workload |")
	for _, o := range others {
		fmt.Fprintf(w, " ÷ %s | CPU ÷ %s |", o, o)
	}
	fmt.Fprint(w, "\n|---|")
	for range others {
		fmt.Fprint(w, "---:|---:|")
	}
	fmt.Fprintln(w)
	for _, cs := range cases {
		me := findFigure(figs, cs.Name, "os2g")
		if me == nil {
			continue
		}
		fmt.Fprintf(w, "| %s |", cs.Name)
		for _, o := range others {
			f := findFigure(figs, cs.Name, o)
			if f == nil {
				fmt.Fprint(w, " — | — |")
				continue
			}
			fmt.Fprintf(w, " %s | %s |", fmtRatio(ratio(me.Value.Median, f.Value.Median)), fmtRatio(ratio(me.CPUPerGiB, f.CPUPerGiB)))
		}
		fmt.Fprintln(w)
	}
}

func findAny(figs []figure, client string) bool {
	for _, f := range figs {
		if f.Client == client && f.Value.N > 0 {
			return true
		}
	}
	return false
}

func csvNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// renderCSV writes one row per figure.
func renderCSV(w io.Writer, figs []figure) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"workload", "client", "unit", "median", "min", "max", "runs", "failed", "mib_s", "p50_ms", "p99_ms",
		"cpu_s", "cpu_s_per_gib", "peak_rss_mib", "vs_limit", "cpu_s_per_file", "host_cpu_s", "host_cpu_s_per_file", "host_cpu_s_per_gib"})
	for _, f := range figs {
		rss := ""
		if f.RSS > 0 {
			rss = csvNum(float64(f.RSS) / (1 << 20))
		}
		_ = cw.Write([]string{f.Case, f.Client, f.Unit, csvNum(f.Value.Median), csvNum(f.Value.Min), csvNum(f.Value.Max),
			strconv.Itoa(f.Runs), strconv.Itoa(f.Failed), csvNum(f.MiBps), csvNum(f.P50), csvNum(f.P99), csvNum(f.CPU),
			csvNum(f.CPUPerGiB), rss, csvNum(f.VsLimit), csvNum(f.CPUPerFile), csvNum(f.HostCPU), csvNum(f.HostPerFile), csvNum(f.HostPerGiB)})
	}
	cw.Flush()
	return cw.Error()
}

// renderSamplesCSV writes every raw sample.
func renderSamplesCSV(w io.Writer, samples []sample) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"run", "client", "workload", "value", "unit", "mib_s", "p50_ms", "p99_ms", "bytes", "seconds", "cpu_s", "peak_rss_bytes", "error", "host_cpu_s", "files"})
	for _, s := range samples {
		_ = cw.Write([]string{strconv.Itoa(s.Run), s.Client, s.Case, csvNum(s.Value), caseUnit(s.Case), csvNum(s.MiBps), csvNum(s.P50),
			csvNum(s.P99), strconv.FormatInt(s.Bytes, 10), csvNum(s.Seconds), csvNum(s.CPU), strconv.FormatInt(s.RSS, 10), s.Err, csvNum(s.HostCPU), strconv.FormatInt(s.Files, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// writeReport writes the timestamped and latest Markdown and CSV files and
// the charts into dir, and returns the paths written.
func writeReport(dir string, meta runMeta, samples []sample, clients []string, log *slog.Logger) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	figs := aggregate(samples, clients)
	ts := meta.Started.Format("20060102-150405")
	var paths []string
	write := func(name string, fn func(io.Writer) error) error {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		paths = append(paths, p)
		return f.Close()
	}
	md := func(w io.Writer) error { renderMarkdown(w, meta, figs, samples); return nil }
	cs := func(w io.Writer) error { return renderCSV(w, figs) }
	for _, x := range []struct {
		name string
		fn   func(io.Writer) error
	}{{ts + ".md", md}, {ts + ".csv", cs}, {ts + "-samples.csv", func(w io.Writer) error { return renderSamplesCSV(w, samples) }},
		{"latest.md", md}, {"latest.csv", cs}} {
		if err := write(x.name, x.fn); err != nil {
			return paths, err
		}
	}
	for _, ch := range []struct {
		name string
		fn   func([]figure, string) error
	}{{"throughput", throughputChart}, {"cpu", cpuChart}} {
		for _, n := range []string{ch.name + ".png", ch.name + "-" + ts + ".png"} {
			p := filepath.Join(dir, n)
			if err := ch.fn(figs, p); err != nil {
				log.Warn("chart not written", "chart", p, "err", err)
				continue
			}
			paths = append(paths, p)
		}
	}
	return paths, nil
}
