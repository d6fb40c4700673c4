// Command bench measures os2g side by side with its peers (s3fs, rclone
// mount) and two references, against one versitygw on loopback holding one
// generated data set.
//
// The references are "limit" (the same bytes fetched by aws-sdk-go-v2 range
// GETs in this process, no file system: the best the server and network
// path give) and "local" (the same files read from a local directory).
// Workloads: seq (fio sequential read, 1 and 4 jobs), small (many small
// files read whole by parallel readers), rand (fio random reads, 4 KiB and
// 1 MiB), list (ls -l of a large directory), loader (a PyTorch DataLoader
// epoch over an ImageFolder, cold and warm) and write (a large sequential
// write). Every figure is the median of --runs runs (min and max shown);
// clients alternate within each run so that drift hits all of them alike.
// Every read is checked against the source; a client that returns wrong
// bytes makes the run fail.
//
// Results go to bench/results/: a Markdown table and a CSV (timestamped
// and latest.md/latest.csv) and the charts throughput.png and cpu.png.
// docs/benchmarks.md explains the flags and how to read the figures.
//
// Usage (from the repository root):
//
//	go run ./bench [--quick] [--runs N] [--clients os2g,s3fs,rclone,limit,local]
//	               [--workloads seq,small,rand,list,loader,write] [--os2g PATH] [--keep] ...
//
// It installs nothing; it says what is missing and stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// progress prints one timestamped progress line on stdout.
func progress(format string, args ...any) {
	fmt.Printf("[%s] %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(args []string) int {
	if code, ok := maybeRunTensors(args); ok { // --workloads tensors: bench/tensors.go
		return code
	}
	cfg, err := parseConfig(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	level := slog.LevelInfo
	if cfg.Verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if missing := checkTools(cfg); len(missing) > 0 {
		fmt.Fprintln(os.Stderr, "bench: missing, install or drop the clients/workloads that need them:")
		for _, m := range missing {
			fmt.Fprintln(os.Stderr, "  -", m)
		}
		return 2
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := newCleanups(log)
	finished := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			progress("%v: stopping; unmounting and stopping the gateway", s)
			cancel()
			select {
			case <-finished:
			case <-time.After(15 * time.Second):
				// The main goroutine may be stuck in a syscall on a hung
				// mount; a lazy unmount from here frees it.
				cl.runAll()
				os.Exit(130)
			case <-sigs:
				cl.runAll()
				os.Exit(130)
			}
		case <-finished:
		}
	}()
	defer close(finished)
	defer cl.runAll()

	h, err := setup(ctx, cfg, log, cl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if cfg.PrepareOnly {
		progress("data set prepared in %s; rerun without --prepare-only (same sizes, same --work-dir) to measure", h.workDir)
		return 0
	}
	// From here on this process and everything it starts (readers, fio,
	// dd, the loader; daemons unless fenced elsewhere) run on the host CPUs.
	if err := cfg.pinSelf(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: --host-cpus:", err)
		return 1
	}
	runners := cfg.runners()
	loadStart := loadAvg()
	started := time.Now()
	total := 0
	for _, w := range cfg.Workloads {
		for _, r := range runners {
			if applies(r.Client, w) {
				total++
			}
		}
	}
	total *= cfg.Runs
	step, done := 0, 0
	for run := 1; run <= cfg.Runs && ctx.Err() == nil; run++ {
		for _, w := range cfg.Workloads {
			// Rotate the client order each run so that no client always
			// goes first (after the drop of caches) or last.
			order := rotate(runners, run-1)
			for _, c := range order {
				if !applies(c.Client, w) || ctx.Err() != nil {
					continue
				}
				step++
				t := time.Now()
				nSamples, nFailures := len(h.samples), len(h.failures)
				line := h.trial(ctx, run, c, w)
				if ctx.Err() != nil {
					// Cut short by the interrupt: not a measurement.
					h.samples, h.failures = h.samples[:nSamples], h.failures[:nFailures]
					break
				}
				done = step
				el := time.Since(started)
				eta := time.Duration(float64(el) / float64(step) * float64(total-step)).Round(time.Second)
				progress("step %d/%d run %d/%d %-6s %-6s %s (%.0fs; eta %v)", step, total, run, cfg.Runs, w, c.Label, line, time.Since(t).Seconds(), eta)
			}
		}
	}
	meta := h.runMeta(loadStart, loadAvg(), started)
	interrupted := ctx.Err() != nil
	if interrupted {
		meta.Notes = append(meta.Notes, fmt.Sprintf("INTERRUPTED: partial report, %d of %d steps measured", done, total))
	}
	paths, err := writeReport(cfg.ResultsDir, meta, h.samples, labels(runners), log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing the report:", err)
		return 1
	}
	progress("report: %s", strings.Join(paths, ", "))
	if b, err := os.ReadFile(filepath.Join(cfg.ResultsDir, "latest.md")); err == nil {
		fmt.Println()
		fmt.Print(string(b))
	}
	if len(h.failures) > 0 {
		fmt.Fprintf(os.Stderr, "\nbench: %d failure(s):\n", len(h.failures))
		for _, f := range h.failures {
			fmt.Fprintln(os.Stderr, "  -", f)
		}
	}
	switch {
	case interrupted:
		fmt.Fprintf(os.Stderr, "bench: interrupted after %d of %d steps; the report is partial\n", done, total)
		return 130
	case len(h.failures) > 0:
		return 1
	}
	return 0
}

func rotate[T any](xs []T, k int) []T {
	if len(xs) == 0 {
		return nil
	}
	k %= len(xs)
	return append(append([]T{}, xs[k:]...), xs[:k]...)
}

// checkTools lists every program a requested client or workload needs and
// cannot find.
func checkTools(c *config) []string {
	var missing []string
	need := func(bin, why, pkg string) {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, fmt.Sprintf("%s (%s; Debian package %s)", bin, why, pkg))
		}
	}
	has := slices.Contains[[]string]
	anyMount := has(c.Clients, "os2g") || has(c.Clients, baseClient) || has(c.Clients, "s3fs") || has(c.Clients, "rclone")
	if c.fenced() {
		need("taskset", "fencing the server and the daemons (--server-cpus, --host-cpus)", "util-linux")
	}
	if anyMount && has(c.Workloads, "seq") {
		need("dd", "the seq workload's dd reader", "coreutils")
	}
	if has(c.Clients, baseClient) {
		need(c.Os2gBase, "client os2g-base (--os2g-base)", "none: build the baseline's ./cmd/os2g")
	}
	if anyMount {
		need(c.Fusermount, "unmounting", "fuse3")
	}
	if anyMount && (has(c.Workloads, "seq") || has(c.Workloads, "rand")) {
		need(c.Fio, "seq and rand workloads", "fio")
	}
	if has(c.Clients, "s3fs") {
		need(c.S3fs, "client s3fs", "s3fs")
	}
	if has(c.Clients, "rclone") {
		need(c.Rclone, "client rclone", "rclone")
	}
	if has(c.Clients, "os2g") && c.Os2g != "" {
		need(c.Os2g, "client os2g (--os2g)", "none: build ./cmd/os2g")
	}
	if has(c.Clients, "os2g") && c.Os2g == "" {
		need("go", "building ./cmd/os2g (or pass --os2g)", "golang")
	}
	if c.Endpoint == "" {
		need(c.Versitygw, "the S3 server (or pass --endpoint)", "none: go install github.com/versity/versitygw/cmd/versitygw")
	}
	if (has(c.Workloads, "loader") || has(c.Workloads, "loader-ddp")) && (anyMount || has(c.Clients, "local")) {
		if _, err := exec.LookPath(c.Python); err != nil {
			missing = append(missing, fmt.Sprintf("%s (loader workload; Debian packages python3-torch python3-torchvision python3-pil)", c.Python))
		} else if out, err := exec.Command(c.Python, "-c", "import torch, torchvision, PIL").CombinedOutput(); err != nil {
			missing = append(missing, fmt.Sprintf("torch/torchvision/PIL for %s (loader workload; Debian packages python3-torch python3-torchvision python3-pil): %s",
				c.Python, lastLines(string(out), 1)))
		}
	}
	return missing
}

// runCmd runs a command with a timeout and returns its combined output.
func runCmd(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}
