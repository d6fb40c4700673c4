package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Workload loader-ddp (issue 15): several os2g mounts of one bucket stand
// in for the nodes of a data-parallel job; each is read by one rank of
// DistributedSampler (bench/ddp.py) over the loader ImageFolder, all ranks
// at once, for a cold epoch and a second one (a different shard). Reported
// per variant (2 or 4 ranks; default flags, --sharded, or the exact-order
// hint of os2g.epoch) and epoch: images/s of all ranks together, the
// daemons' CPU, and the worst mount's bytes fetched / bytes read (rows
// ending in "f/r"). The page cache is dropped before each epoch and the
// mounts get a budget of an eighth of the data set (at least 16 MiB), as
// if the data set did not fit in memory. A data set smaller than that
// floor (the generated one is) stays in the daemon's cache, so the second
// epoch's fetched/read then shows cache hits (below 1) rather than the
// pre-reader; the cold epoch's is the pre-reader's own figure. (e2e's
// TestShardedRanks measures later epochs with a budget below a share.)

//go:embed ddp.py
var ddpScript []byte

// ddpVariants are the measured variants, in report order.
var ddpVariants = []struct {
	ranks int
	mode  string // "default", "sharded" (os2g mount --sharded) or "hint" (os2g.epoch.hint)
}{{2, "default"}, {2, "sharded"}, {2, "hint"}, {4, "default"}, {4, "sharded"}, {4, "hint"}}

var ddpEpochs = []string{"cold", "second"}

// ddpCase names a report row.
func ddpCase(ranks int, mode, epoch string, ratio bool) string {
	n := fmt.Sprintf("ddp%d-%s-%s", ranks, mode, epoch)
	if ratio {
		n += " f/r"
	}
	return n
}

// ddpCases are the report rows of loader-ddp.
func ddpCases() []struct{ Name, Workload, Unit string } {
	var out []struct{ Name, Workload, Unit string }
	for _, v := range ddpVariants {
		for _, e := range ddpEpochs {
			out = append(out,
				struct{ Name, Workload, Unit string }{ddpCase(v.ranks, v.mode, e, false), "loader-ddp", "images/s"},
				struct{ Name, Workload, Unit string }{ddpCase(v.ranks, v.mode, e, true), "loader-ddp", "fetched/read"})
		}
	}
	return out
}

// ddpTrial runs every variant once (os2g only).
func (h *harness) ddpTrial(ctx context.Context, run int) []sample {
	var out []sample
	for _, v := range ddpVariants {
		if ctx.Err() != nil {
			break
		}
		out = append(out, h.ddpVariant(ctx, run, v.ranks, v.mode)...)
	}
	return out
}

// ddpRank is one running ddp.py.
type ddpRank struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *strings.Builder
}

// ddpLine is one JSON line of ddp.py.
type ddpLine struct {
	Ready    bool    `json:"ready"`
	Epoch    int     `json:"epoch"`
	Images   int     `json:"images"`
	Seconds  float64 `json:"seconds"`
	PixelSum int64   `json:"pixel_sum"`
	Hint     *struct {
		Files, Unknown int
	} `json:"hint"`
}

func (r *ddpRank) line() (ddpLine, error) {
	var l ddpLine
	s, err := r.out.ReadString('\n')
	if err != nil {
		return l, fmt.Errorf("ddp.py ended early: %w; stderr: %s", err, lastLines(r.stderr.String(), 4))
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &l); err != nil {
		return l, fmt.Errorf("ddp.py: bad line %q: %w", s, err)
	}
	return l, nil
}

// ddpBudget is the mounts' --max-memory: an eighth of the data set, at
// least 16 MiB.
func (h *harness) ddpBudget() int64 {
	return max(16<<20, h.man.LoaderBytes/8)
}

// ddpVariant mounts ranks mounts, runs one rank on each for two epochs and
// records the four samples of the variant.
func (h *harness) ddpVariant(ctx context.Context, run, ranks int, mode string) []sample {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StepTimeout)
	defer cancel()
	const client = "os2g"
	fail := func(err error) []sample {
		var out []sample
		for _, e := range ddpEpochs {
			out = append(out, h.record(run, client, ddpCase(ranks, mode, e, false), nanSample(err), nil),
				h.record(run, client, ddpCase(ranks, mode, e, true), nanSample(err), nil))
		}
		return out
	}
	// The mount flags of this variant go after the configured ones (the
	// last --max-memory wins).
	saved := h.cfg.Os2gReadArgs
	h.cfg.Os2gReadArgs += " --max-memory=" + strconv.FormatInt(h.ddpBudget(), 10)
	if mode == "sharded" {
		h.cfg.Os2gReadArgs += " --sharded"
	}
	var mounts []*mounted
	var err error
	for range ranks {
		var m *mounted
		if m, err = h.mount(ctx, runner{Label: client, Client: client, Placement: "host"}, true); err != nil {
			break
		}
		mounts = append(mounts, m)
	}
	h.cfg.Os2gReadArgs = saved
	for _, m := range mounts {
		defer m.undo()
		defer context.AfterFunc(ctx, func() { h.abort(m) })()
	}
	if err != nil {
		return fail(err)
	}
	script := filepath.Join(h.tmpDir, "ddp.py")
	if err := os.WriteFile(script, ddpScript, 0o644); err != nil {
		return fail(err)
	}
	pyPath, _ := filepath.Abs("python") // the os2g package, for --hint
	var rs []*ddpRank
	defer func() {
		for _, r := range rs {
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
			_ = r.cmd.Wait()
		}
	}()
	for i, m := range mounts {
		args := []string{script, filepath.Join(m.Dir, filepath.FromSlash(strings.TrimSuffix(loaderPrefix, "/"))),
			"--rank", strconv.Itoa(i), "--world", strconv.Itoa(ranks), "--epochs", strconv.Itoa(len(ddpEpochs)),
			"--workers", strconv.Itoa(h.cfg.LoaderWorkers), "--batch", strconv.Itoa(h.cfg.LoaderBatch)}
		if mode == "hint" {
			args = append(args, "--hint")
		}
		cmd := exec.CommandContext(ctx, h.cfg.Python, args...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+pyPath)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 10 * time.Second
		r := &ddpRank{cmd: cmd, stderr: &strings.Builder{}}
		cmd.Stderr = r.stderr
		if r.stdin, err = cmd.StdinPipe(); err != nil {
			return fail(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return fail(err)
		}
		r.out = bufio.NewReader(stdout)
		if err := cmd.Start(); err != nil {
			return fail(fmt.Errorf("start %s: %w", h.cfg.Python, err))
		}
		rs = append(rs, r)
	}
	for _, r := range rs {
		if _, err := r.line(); err != nil {
			return fail(err)
		}
	}
	var out []sample
	for _, ename := range ddpEpochs {
		if err := h.prepareCold(loaderPrefix); err != nil {
			return fail(err)
		}
		before := make([][2]float64, ranks)
		meters := make([]*meter, ranks)
		for i, m := range mounts {
			if before[i], err = h.fetchedRead(ctx, m.Dir); err != nil {
				return fail(err)
			}
			meters[i] = startMeter(m.PID, false)
		}
		start := time.Now()
		for _, r := range rs {
			if _, err := io.WriteString(r.stdin, "go\n"); err != nil {
				return fail(err)
			}
		}
		images, pixels := 0, int64(0)
		var problems []string
		for i, r := range rs {
			l, err := r.line()
			if err != nil {
				return fail(err)
			}
			images += l.Images
			pixels += l.PixelSum
			if want := (h.man.LoaderImages + ranks - 1) / ranks; l.Images != want {
				problems = append(problems, fmt.Sprintf("rank %d read %d images, want %d", i, l.Images, want))
			}
			if mode == "hint" && (l.Hint == nil || l.Hint.Unknown != 0) {
				problems = append(problems, fmt.Sprintf("rank %d: hint reply %+v", i, l.Hint))
			}
		}
		secs := time.Since(start).Seconds()
		cpu, worst := 0.0, math.NaN()
		var ratios []string
		for i, m := range mounts {
			cpu += meters[i].cpu()
			after, err := h.fetchedRead(ctx, m.Dir)
			if err != nil {
				return fail(err)
			}
			fr := math.NaN()
			if read := after[1] - before[i][1]; read > 0 {
				fr = (after[0] - before[i][0]) / read // 0 when the daemon's cache served it all
			}
			ratios = append(ratios, fmt.Sprintf("%.2f", fr))
			if math.IsNaN(worst) || fr > worst {
				worst = fr
			}
		}
		progress("loader-ddp %d ranks %s %s epoch: %.0f images/s, fetched/read per mount %s, daemons' CPU %.2f s",
			ranks, mode, ename, float64(images)/secs, strings.Join(ratios, " "), cpu)
		if h.man.LoaderImages%ranks == 0 && h.man.LoaderPixelSum >= 0 && pixels != h.man.LoaderPixelSum {
			problems = append(problems, fmt.Sprintf("pixel sum over the ranks %d, want %d", pixels, h.man.LoaderPixelSum))
		}
		var perr error
		if len(problems) > 0 {
			perr = fmt.Errorf("%w: %s", errWrongBytes, strings.Join(problems, "; "))
		}
		bytes := h.man.LoaderBytes * int64(images) / int64(max(1, h.man.LoaderImages))
		out = append(out,
			h.record(run, client, ddpCase(ranks, mode, ename, false), sample{Value: float64(images) / secs, MiBps: mibps(bytes, secs),
				Bytes: bytes, Seconds: secs, CPU: cpu, P50: math.NaN(), P99: math.NaN()}, perr),
			h.record(run, client, ddpCase(ranks, mode, ename, true), sample{Value: worst, MiBps: math.NaN(), Seconds: secs,
				CPU: math.NaN(), P50: math.NaN(), P99: math.NaN()}, nil))
	}
	for _, r := range rs {
		r.stdin.Close()
	}
	for _, r := range rs {
		if err := r.cmd.Wait(); err != nil {
			h.log.Warn("ddp.py did not exit cleanly after its epochs", "err", err, "stderr", lastLines(r.stderr.String(), 4))
		}
	}
	rs = nil
	return out
}

// fetchedRead returns the os2g daemon's bytes fetched and bytes read so
// far (os2g stats --raw).
func (h *harness) fetchedRead(ctx context.Context, mp string) ([2]float64, error) {
	out, err := runCmd(ctx, 30*time.Second, h.os2gBin, "stats", "--raw", mp)
	if err != nil {
		return [2]float64{}, fmt.Errorf("os2g stats --raw %s: %w: %s", mp, err, lastLines(out, 4))
	}
	var v [2]float64
	for i, name := range []string{"os2g_prefetch_fetched_bytes_total", "os2g_prefetch_read_bytes_total"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == name {
				if v[i], err = strconv.ParseFloat(f[1], 64); err == nil {
					found = true
				}
			}
		}
		if !found {
			return v, errors.New("os2g stats --raw: no " + name)
		}
	}
	return v, nil
}
