package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
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

// loaderScript is bench/loader.py, written to the work dir at start so the
// harness runs from any directory.
//
//go:embed loader.py
var loaderScript []byte

// loaderEpoch is one epoch line of loader.py.
type loaderEpoch struct {
	Epoch       int     `json:"epoch"`
	Images      int     `json:"images"`
	Seconds     float64 `json:"seconds"`
	ScanSeconds float64 `json:"scan_seconds"`
	PixelSum    int64   `json:"pixel_sum"`
	Classes     int     `json:"classes"`
	Ready       bool    `json:"ready"`
}

// parseLoaderLine parses one JSON line of loader.py.
func parseLoaderLine(line string) (loaderEpoch, error) {
	var e loaderEpoch
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		return e, fmt.Errorf("loader.py: bad line %q: %w", line, err)
	}
	return e, nil
}

// fsLoader runs two epochs of loader.py over the ImageFolder under root.
// beforeCold runs once python has imported torch, just before the first
// epoch (it drops caches). It returns the cold and the warm sample.
func (h *harness) fsLoader(ctx context.Context, root string, pid int, self bool, beforeCold func() error) ([]sample, error) {
	script := filepath.Join(h.tmpDir, "loader.py")
	if err := os.WriteFile(script, loaderScript, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, h.cfg.Python, script, filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(loaderPrefix, "/"))),
		"--workers", strconv.Itoa(h.cfg.LoaderWorkers), "--batch", strconv.Itoa(h.cfg.LoaderBatch), "--epochs", "2", "--handshake")
	// The DataLoader forks workers: kill the whole group on a timeout and
	// do not wait for pipes a stuck worker still holds.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", h.cfg.Python, err)
	}
	fail := func(err error) ([]sample, error) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("loader.py did not finish in time (--step-timeout): %w", ctx.Err())
		}
		return nil, fmt.Errorf("%w; loader.py stderr: %s", err, lastLines(stderr.String(), 4))
	}
	rd := bufio.NewReader(stdout)
	readLine := func() (loaderEpoch, error) {
		line, err := rd.ReadString('\n')
		if err != nil {
			return loaderEpoch{}, fmt.Errorf("loader.py ended early: %w", err)
		}
		return parseLoaderLine(strings.TrimSpace(line))
	}
	if _, err := readLine(); err != nil {
		return fail(err)
	}
	if err := beforeCold(); err != nil {
		return fail(err)
	}
	hm := h.startHostMeter()
	mt := startMeter(pid, self)
	var out []sample
	for epoch := 1; epoch <= 2; epoch++ {
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			return fail(err)
		}
		e, err := readLine()
		if err != nil {
			return fail(err)
		}
		cpu, host := mt.cpu(), hm.seconds()
		hm = h.startHostMeter()
		mt = startMeter(pid, self)
		secs := e.Seconds + e.ScanSeconds
		name := "loader-cold"
		if epoch == 2 {
			name = "loader-warm"
		}
		bytes := h.man.LoaderBytes * int64(e.Images) / int64(max(1, h.man.LoaderImages))
		s := sample{Case: name, Value: float64(e.Images) / secs, MiBps: mibps(bytes, secs), Bytes: bytes, Seconds: secs,
			CPU: cpu, HostCPU: host, Files: int64(e.Images), RSS: mt.rss(), P50: math.NaN(), P99: math.NaN()}
		if e.Images != h.man.LoaderImages || e.Classes != h.man.LoaderClasses ||
			(h.man.LoaderPixelSum >= 0 && e.PixelSum != h.man.LoaderPixelSum) {
			s.Err = fmt.Sprintf("%v: epoch %d saw %d images in %d classes with pixel sum %d, want %d images in %d classes, pixel sum %d",
				errWrongBytes, epoch, e.Images, e.Classes, e.PixelSum, h.man.LoaderImages, h.man.LoaderClasses, h.man.LoaderPixelSum)
		}
		out = append(out, s)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return out, fmt.Errorf("loader.py: %w: %s", err, lastLines(stderr.String(), 4))
	}
	return out, nil
}
