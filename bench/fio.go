package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// fioResult is what the harness takes from one fio run (all jobs summed).
type fioResult struct {
	Bytes     int64   // bytes transferred by all jobs
	BWBytes   float64 // bytes/s, all jobs together
	IOPS      float64 // operations/s, all jobs together
	RuntimeMS int64   // longest job runtime, milliseconds
	P50, P99  float64 // completion latency percentiles, milliseconds (NaN if absent)
}

type fioJSON struct {
	Jobs []struct {
		JobName string     `json:"jobname"`
		Error   int        `json:"error"`
		Read    fioDirJSON `json:"read"`
		Write   fioDirJSON `json:"write"`
	} `json:"jobs"`
}

type fioDirJSON struct {
	IOBytes int64   `json:"io_bytes"`
	BWBytes float64 `json:"bw_bytes"`
	IOPS    float64 `json:"iops"`
	Runtime int64   `json:"runtime"` // ms
	ClatNS  struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// parseFioJSON parses fio --output-format=json output for direction dir
// ("read" or "write"). Text fio prints before the JSON object (warnings)
// is skipped. With several job entries (no --group_reporting) bytes,
// bandwidth and IOPS are summed and the percentiles are the largest of
// the jobs' (an upper bound, since fio does not report merged histograms).
func parseFioJSON(out []byte, dir string) (fioResult, error) {
	i := bytes.IndexByte(out, '{')
	if i < 0 {
		return fioResult{}, errors.New("fio: no JSON object in output")
	}
	var doc fioJSON
	if err := json.Unmarshal(out[i:], &doc); err != nil {
		return fioResult{}, fmt.Errorf("fio: parse JSON: %w", err)
	}
	if len(doc.Jobs) == 0 {
		return fioResult{}, errors.New("fio: JSON has no jobs")
	}
	r := fioResult{P50: math.NaN(), P99: math.NaN()}
	for _, j := range doc.Jobs {
		if j.Error != 0 {
			return fioResult{}, fmt.Errorf("fio: job %q failed with error %d", j.JobName, j.Error)
		}
		d := j.Read
		if dir == "write" {
			d = j.Write
		}
		r.Bytes += d.IOBytes
		r.BWBytes += d.BWBytes
		r.IOPS += d.IOPS
		r.RuntimeMS = max(r.RuntimeMS, d.Runtime)
		if p, ok := percentileMS(d.ClatNS.Percentile, 50); ok && (math.IsNaN(r.P50) || p > r.P50) {
			r.P50 = p
		}
		if p, ok := percentileMS(d.ClatNS.Percentile, 99); ok && (math.IsNaN(r.P99) || p > r.P99) {
			r.P99 = p
		}
	}
	if r.Bytes == 0 {
		return fioResult{}, fmt.Errorf("fio: no %s bytes transferred", dir)
	}
	return r, nil
}

// percentileMS finds percentile q (keys like "50.000000") in fio's map of
// nanosecond values and returns it in milliseconds.
func percentileMS(m map[string]float64, q float64) (float64, bool) {
	for k, v := range m {
		f, err := strconv.ParseFloat(k, 64)
		if err == nil && math.Abs(f-q) < 1e-9 {
			return v / 1e6, true
		}
	}
	return 0, false
}

// fioJob describes one fio invocation on a single file.
type fioJob struct {
	Name      string
	File      string
	RW        string // read, randread
	BS        string // 1M, 4k
	NumJobs   int
	Size      int64 // bytes each job covers (sequential: the file divided by NumJobs)
	OffsetInc int64 // bytes between the jobs' start offsets (0: all start at 0)
	// Runtime caps the run in seconds (0: none). Without TimeBased the run
	// ends at whichever comes first, the runtime or one pass over Size.
	Runtime   int
	TimeBased bool // keep going (repeating offsets) until Runtime
}

// args returns fio's command-line arguments for j, writing JSON to out.
func (j fioJob) args(out string) []string {
	a := []string{
		"--name=" + j.Name,
		"--filename=" + j.File,
		"--readonly",
		"--rw=" + j.RW,
		"--bs=" + j.BS,
		"--ioengine=psync",
		"--numjobs=" + strconv.Itoa(j.NumJobs),
		"--size=" + strconv.FormatInt(j.Size, 10),
		"--group_reporting",
		"--output-format=json",
		"--output=" + out,
	}
	if j.OffsetInc > 0 {
		a = append(a, "--offset_increment="+strconv.FormatInt(j.OffsetInc, 10))
	}
	if j.Runtime > 0 {
		a = append(a, "--runtime="+strconv.Itoa(j.Runtime)+"s")
	}
	if j.TimeBased {
		a = append(a, "--time_based")
	}
	return a
}

// runFio runs fio (binary path fioBin) for j with scratch files in tmp.
func runFio(ctx context.Context, fioBin, tmp string, j fioJob) (fioResult, error) {
	out := filepath.Join(tmp, j.Name+".json")
	if j.Runtime > 0 {
		// A run that overruns its runtime by a minute is hung.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(j.Runtime)*time.Second+time.Minute)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, fioBin, j.args(out)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	// fio forks one process per job: on a timeout kill the whole group
	// (a job stuck in a read of a hung mount dies of SIGKILL), and do not
	// wait forever for output pipes those jobs still hold.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fioResult{}, fmt.Errorf("fio %s: no result in time (reads hung?): %w", j.Name, ctx.Err())
		}
		return fioResult{}, fmt.Errorf("fio %s: %w: %s", j.Name, err, lastLines(stderr.String(), 5))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return fioResult{}, fmt.Errorf("fio %s: %w", j.Name, err)
	}
	return parseFioJSON(b, "read")
}
