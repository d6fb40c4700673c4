package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// placementOf is the placement of a report label (see runner): "offload"
// for CLIENT-offload, "host" otherwise (limit and local run on the host).
func placementOf(label string) string {
	if strings.HasSuffix(label, "-offload") {
		return "offload"
	}
	return "host"
}

// clientOf is the client of a report label.
func clientOf(label string) string {
	return strings.TrimSuffix(label, "-offload")
}

// fmtMicros renders seconds as microseconds; NaN as "—".
func fmtMicros(s float64) string {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return "—"
	}
	return fmtNum(s * 1e6)
}

// hostRef returns the reference figure for host CPU of case cs: local disk
// where it ran the case, else the limit client.
func hostRef(figs []figure, cs string) *figure {
	if f := findFigure(figs, cs, "local"); f != nil && f.Value.N > 0 {
		return f
	}
	if f := findFigure(figs, cs, "limit"); f != nil && f.Value.N > 0 {
		return f
	}
	return nil
}

// hostRatio is f's host CPU relative to ref's: per file where both count
// files, else per GiB. It returns NaN when neither applies.
func hostRatio(f, ref *figure) float64 {
	if ref == nil {
		return math.NaN()
	}
	if r := ratio(f.HostPerFile, ref.HostPerFile); !math.IsNaN(r) {
		return r
	}
	return ratio(f.HostPerGiB, ref.HostPerGiB)
}

// renderHostTable writes the headline table of a fenced run: per case and
// runner the throughput, the daemon's CPU per GiB and per file, the host
// CPUs' busy time per file (µs) and per GiB, and that host cost relative to
// local disk (or, without a local figure, the limit client). os2g rows
// also give their daemon CPU per file relative to os2g-base in the same
// placement when a baseline ran.
func renderHostTable(w io.Writer, figs []figure) {
	fmt.Fprint(w, "## Host CPU by placement\n\n")
	fmt.Fprint(w, "Daemon CPU: the mount daemon's own time (limit: this process's). Host CPU: busy time of the host CPUs over the measured part (see the placement note). "+
		"× ref: host CPU per file (else per GiB) ÷ local disk's (else the limit's) for the same workload. × base: daemon CPU per file (else per GiB) ÷ os2g-base's in the same placement.\n\n")
	fmt.Fprintln(w, "| workload | client | placement | median | unit | daemon CPU s/GiB | daemon µs/file | host µs/file | host CPU s/GiB | host × ref | daemon × base |")
	fmt.Fprintln(w, "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, f := range figs {
		if f.Value.N == 0 {
			continue
		}
		ref := hostRef(figs, f.Case)
		refName := ""
		if ref != nil && ref.Client != f.Client {
			refName = " " + ref.Client
		}
		hr := math.NaN()
		if ref != nil && ref.Client != f.Client {
			hr = hostRatio(&f, ref)
		}
		vsBase := math.NaN()
		if clientOf(f.Client) == "os2g" {
			base := baseClient
			if placementOf(f.Client) == "offload" {
				base += "-offload"
			}
			if b := findFigure(figs, f.Case, base); b != nil && b.Value.N > 0 {
				if vsBase = ratio(f.CPUPerFile, b.CPUPerFile); math.IsNaN(vsBase) {
					vsBase = ratio(f.CPUPerGiB, b.CPUPerGiB)
				}
			}
		}
		hrs := fmtRatio(hr)
		if !math.IsNaN(hr) {
			hrs += refName
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			f.Case, f.Client, placementOf(f.Client), fmtNum(f.Value.Median), f.Unit, fmtNum(f.CPUPerGiB),
			fmtMicros(f.CPUPerFile), fmtMicros(f.HostPerFile), fmtNum(f.HostPerGiB), hrs, fmtRatio(vsBase))
	}
}
