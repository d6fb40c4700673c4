package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// sample is one measured figure of one run.
type sample struct {
	Run    int
	Client string
	Case   string
	// Value is the headline figure in caseUnit(Case).
	Value    float64
	MiBps    float64
	P50, P99 float64 // latency, milliseconds; NaN where not measured
	Bytes    int64   // bytes delivered to (or written by) the application
	Seconds  float64 // wall time of the measured part
	CPU      float64 // daemon CPU seconds (utime+stime) of the measured part; NaN if unknown
	// HostCPU is the busy time of the host CPUs over the measured part,
	// seconds (placement.go); NaN if unknown.
	HostCPU float64
	Files   int64  // files (images) delivered; 0 where not counted
	RSS     int64  // daemon peak RSS (VmHWM), bytes; 0 if unknown
	Err     string // non-empty: the figure is missing and why
}

// cases are the report rows, in order, with their headline unit.
var cases = append([]struct{ Name, Workload, Unit string }{
	{"seq-1j", "seq", "MiB/s"},
	{"seq-4j", "seq", "MiB/s"},
	{"seq-dd", "seq", "MiB/s"},
	{"small", "small", "files/s"},
	{"rand-4k", "rand", "IOPS"},
	{"rand-1m", "rand", "IOPS"},
	{"list", "list", "entries/s"},
	{"loader-cold", "loader", "images/s"},
	{"loader-warm", "loader", "images/s"},
	{"write", "write", "MiB/s"},
}, ddpCases()...)

func caseUnit(name string) string {
	for _, c := range cases {
		if c.Name == name {
			return c.Unit
		}
	}
	return "?"
}

// applies reports whether client takes part in workload: the limit has no
// file system (no loader), local has no S3 (only the read-only file
// workloads it is a reference for).
func applies(client, workload string) bool {
	if workload == "loader-ddp" {
		return client == "os2g"
	}
	switch client {
	case "limit":
		return workload != "loader"
	case "local":
		return workload == "small" || workload == "loader"
	}
	return true
}

// meter measures a daemon's (or this process's) CPU over a measured part.
type meter struct {
	pid   int
	self  bool
	start procCPU
	ok    bool
}

func startMeter(pid int, self bool) *meter {
	m := &meter{pid: pid, self: self}
	switch {
	case self:
		m.start, m.ok = selfCPU(), true
	case pid != 0:
		c, err := readProcCPU(pid)
		m.start, m.ok = c, err == nil
	}
	return m
}

// cpu returns the CPU seconds used since startMeter, NaN if unknown.
func (m *meter) cpu() float64 {
	if !m.ok {
		return math.NaN()
	}
	if m.self {
		return selfCPU().Total() - m.start.Total()
	}
	c, err := readProcCPU(m.pid)
	if err != nil {
		return math.NaN()
	}
	return c.Total() - m.start.Total()
}

// rss returns the daemon's peak RSS in bytes, 0 if unknown.
func (m *meter) rss() int64 {
	if m.self || m.pid == 0 {
		return 0
	}
	v, err := readProcHWM(m.pid)
	if err != nil {
		return 0
	}
	return v
}

func mibps(bytes int64, secs float64) float64 {
	if secs <= 0 {
		return math.NaN()
	}
	return float64(bytes) / (1 << 20) / secs
}

// verifySeqFile reads path sequentially and compares each 8 MiB chunk's
// CRC32C with the manifest.
func verifySeqFile(ctx context.Context, path string, want []uint32, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, seqChunk)
	var off int64
	for i := 0; ; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			if i >= len(want) {
				return fmt.Errorf("%w: %s is longer than %d bytes", errWrongBytes, path, size)
			}
			if got := crc32.Checksum(buf[:n], castagnoli); got != want[i] {
				return fmt.Errorf("%w: %s bytes [%d, %d) have CRC32C %08x, want %08x", errWrongBytes, path, off, off+int64(n), got, want[i])
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", path, off, err)
		}
	}
	if off != size {
		return fmt.Errorf("%w: %s has %d bytes, want %d", errWrongBytes, path, off, size)
	}
	return nil
}

// fsSeq runs fio sequential reads of the large object under root with
// jobs jobs, each covering 1/jobs of the file.
func (h *harness) fsSeq(ctx context.Context, root string, jobs int, mt *meter) (sample, error) {
	size := h.man.Params.SeqSize
	per := size / int64(jobs)
	j := fioJob{Name: fmt.Sprintf("seq%dj", jobs), File: filepath.Join(root, filepath.FromSlash(seqKey)),
		RW: "read", BS: "1M", NumJobs: jobs, Size: per}
	if jobs > 1 {
		j.OffsetInc = per
	}
	r, err := runFio(ctx, h.cfg.Fio, h.tmpDir, j)
	if err != nil {
		return sample{}, err
	}
	secs := float64(r.RuntimeMS) / 1000
	return sample{Value: r.BWBytes / (1 << 20), MiBps: r.BWBytes / (1 << 20), P50: r.P50, P99: r.P99,
		Bytes: r.Bytes, Seconds: secs, CPU: mt.cpu()}, nil
}

// fsRand runs fio random reads of block size bs: RandJobs jobs, each on
// its own 1/RandJobs of the file, every block of it read at most once (fio's
// random map), until RandRuntime seconds or the end of the pass. No offset
// is read twice, so the page cache only helps through read-ahead and the
// client's own prefetch.
func (h *harness) fsRand(ctx context.Context, root, bs string, mt *meter) (sample, error) {
	per := h.man.Params.SeqSize / int64(h.cfg.RandJobs)
	j := fioJob{Name: "rand" + bs, File: filepath.Join(root, filepath.FromSlash(seqKey)), RW: "randread", BS: bs,
		NumJobs: h.cfg.RandJobs, Size: per, Runtime: h.cfg.RandRuntime}
	if h.cfg.RandJobs > 1 {
		j.OffsetInc = per
	}
	r, err := runFio(ctx, h.cfg.Fio, h.tmpDir, j)
	if err != nil {
		return sample{}, err
	}
	secs := float64(r.RuntimeMS) / 1000
	return sample{Value: r.IOPS, MiBps: r.BWBytes / (1 << 20), P50: r.P50, P99: r.P99, Bytes: r.Bytes, Seconds: secs, CPU: mt.cpu()}, nil
}

// fsSmall reads every small object whole with SmallReaders goroutines
// (os.ReadFile, names known in advance) and checks each CRC.
func (h *harness) fsSmall(ctx context.Context, root string, mt *meter) (sample, error) {
	files := h.man.Small
	var next atomic.Int64
	var bytes atomic.Int64
	var mu sync.Mutex // guards bad
	var bad []string
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range h.cfg.SmallReaders {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) || gctx.Err() != nil {
					return gctx.Err()
				}
				f := files[i]
				b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Key)))
				if err != nil {
					return err
				}
				bytes.Add(int64(len(b)))
				if int64(len(b)) != f.Size || crc32.Checksum(b, castagnoli) != f.CRC {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s (%d bytes, want %d)", f.Key, len(b), f.Size))
					mu.Unlock()
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return sample{}, err
	}
	secs := time.Since(start).Seconds()
	s := sample{Value: float64(len(files)) / secs, MiBps: mibps(bytes.Load(), secs), Bytes: bytes.Load(), Files: int64(len(files)), Seconds: secs,
		CPU: mt.cpu(), P50: math.NaN(), P99: math.NaN()}
	if len(bad) > 0 {
		return s, fmt.Errorf("%w: %d of %d small files differ from the source, first %s", errWrongBytes, len(bad), len(files), bad[0])
	}
	return s, nil
}

// fsList is ls -l of the list directory: readdir, then lstat of every entry.
func (h *harness) fsList(ctx context.Context, root string, mt *meter) (sample, error) {
	dir := filepath.Join(root, filepath.FromSlash(listPrefix))
	start := time.Now()
	f, err := os.Open(dir)
	if err != nil {
		return sample{}, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return sample{}, err
	}
	wrong := 0
	for _, n := range names {
		if ctx.Err() != nil {
			return sample{}, ctx.Err()
		}
		fi, err := os.Lstat(filepath.Join(dir, n))
		if err != nil {
			return sample{}, err
		}
		if fi.Size() != listObjSize || !fi.Mode().IsRegular() {
			wrong++
		}
	}
	secs := time.Since(start).Seconds()
	s := sample{Value: float64(len(names)) / secs, Seconds: secs, CPU: mt.cpu(), P50: math.NaN(), P99: math.NaN(), MiBps: math.NaN()}
	if len(names) != h.man.Params.ListCount || wrong > 0 {
		return s, fmt.Errorf("%w: listing %s gave %d entries (want %d), %d with a wrong size or type", errWrongBytes, dir, len(names), h.man.Params.ListCount, wrong)
	}
	return s, nil
}

// fsWrite writes WriteSize bytes sequentially in 1 MiB writes to path,
// fsyncs and closes; the time includes the close (where uploads finish).
func (h *harness) fsWrite(ctx context.Context, path string, mt *meter) (sample, error) {
	start := time.Now()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return sample{}, err
	}
	if err := h.writeStream(ctx, f); err != nil {
		f.Close()
		return sample{}, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return sample{}, fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return sample{}, fmt.Errorf("close %s: %w", path, err)
	}
	secs := time.Since(start).Seconds()
	n := h.cfg.WriteSize
	return sample{Value: mibps(n, secs), MiBps: mibps(n, secs), Bytes: n, Seconds: secs, CPU: mt.cpu(), P50: math.NaN(), P99: math.NaN()}, nil
}

// writeStream writes the write workload's bytes (a pre-generated 16 MiB
// pattern, repeated) to w in 1 MiB writes.
func (h *harness) writeStream(ctx context.Context, w io.Writer) error {
	pat := h.writePattern
	var off int64
	for off < h.cfg.WriteSize {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p := int(off % int64(len(pat)))
		n := min(int64(1<<20), h.cfg.WriteSize-off, int64(len(pat)-p))
		if _, err := w.Write(pat[p : p+int(n)]); err != nil {
			return fmt.Errorf("write at %d: %w", off, err)
		}
		off += n
	}
	return nil
}
