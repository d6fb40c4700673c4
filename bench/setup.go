package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/os2g/os2g/internal/mountinfo"
)

// setup prepares the work dir, the gateway, the data set and the client
// configuration. Everything it starts is registered in cl.
func setup(ctx context.Context, cfg *config, log *slog.Logger, cl *cleanups) (*harness, error) {
	wd, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, log: log, cleanups: cl, workDir: wd,
		srcDir: filepath.Join(wd, "data", "src"), tmpDir: filepath.Join(wd, "tmp")}
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(wd, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("work dir %s is in use by another bench run (%v); pass another --work-dir", wd, err)
	}
	// Logs are per run; the data set and gateway root may be kept. A mount
	// left over from a killed run must not be walked into.
	if m := mountsUnder(wd); len(m) > 0 {
		lock.Close()
		return nil, fmt.Errorf("work dir %s has mounts left (unmount them first: fusermount3 -u): %s", wd, strings.Join(m, ", "))
	}
	if err := os.RemoveAll(filepath.Join(wd, "logs")); err != nil {
		lock.Close()
		return nil, err
	}
	for _, d := range []string{h.tmpDir, filepath.Join(wd, "logs"), filepath.Join(wd, "mnt"), filepath.Join(wd, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			lock.Close()
			return nil, err
		}
	}
	// Registered first, so it runs last: remove the work dir unless kept.
	cl.add("work dir", func(context.Context) error {
		defer lock.Close()
		if cfg.Keep {
			progress("kept work dir %s (data set reused by the next run with the same sizes)", wd)
			return nil
		}
		if m := mountsUnder(wd); len(m) > 0 {
			return fmt.Errorf("not removing %s: still mounted: %s", wd, strings.Join(m, ", "))
		}
		return os.RemoveAll(wd)
	})
	if cfg.Endpoint == "" {
		progress("gateway: starting %s (posix backend in %s)", cfg.Versitygw, filepath.Join(wd, "gw"))
		gw, stop, err := startGateway(ctx, cfg, filepath.Join(wd, "gw"), filepath.Join(wd, "logs", "versitygw.log"), log)
		if err != nil {
			return nil, err
		}
		cl.add("stop versitygw", stop)
		h.gw = gw
		progress("gateway: %s", gw.Endpoint)
	} else {
		h.gw = &gateway{Endpoint: cfg.Endpoint}
		progress("gateway: using %s", cfg.Endpoint)
	}
	if h.store, err = newStore(ctx, cfg, h.gw.Endpoint, log); err != nil {
		return nil, err
	}
	if err := ensureBucket(ctx, h.store); err != nil {
		return nil, err
	}
	t := time.Now()
	if h.man, err = prepareData(ctx, cfg, h.store, h.srcDir, cfg.Fresh, log); err != nil {
		return nil, fmt.Errorf("data set: %w", err)
	}
	progress("data set ready (%.0fs): %s object, %d small, %d list keys, %d images (%s) in %d classes",
		time.Since(t).Seconds(), formatSize(h.man.Params.SeqSize), len(h.man.Small), h.man.Params.ListCount,
		h.man.LoaderImages, formatSize(h.man.LoaderBytes), h.man.LoaderClasses)

	var pat bytes.Buffer
	_ = fillRandom(&pat, 16<<20, 99)
	h.writePattern = pat.Bytes()
	cw := &chunkCRCWriter{chunk: seqChunk}
	_ = h.writeStream(ctx, cw)
	h.writeCRCs = cw.Sums()

	h.s3fsPasswd = filepath.Join(wd, "s3fs.passwd")
	if err := os.WriteFile(h.s3fsPasswd, []byte(cfg.AccessKey+":"+cfg.SecretKey+"\n"), 0o600); err != nil {
		return nil, err
	}
	h.rcloneConf = filepath.Join(wd, "rclone.conf")
	if err := os.WriteFile(h.rcloneConf, nil, 0o600); err != nil {
		return nil, err
	}
	for _, c := range cfg.Clients {
		if c == "os2g" {
			if h.os2gBin, err = h.buildOS2G(ctx); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) []string {
	ms := mountinfo.Self()
	if ms == nil {
		return []string{"(cannot read " + mountinfo.SelfPath + ")"}
	}
	return mountinfo.Under(ms, dir)
}

// runMeta describes the machine, the tools and the sizes of one run.
type runMeta struct {
	Started, Finished time.Time
	LoadStart         string
	LoadEnd           string
	Machine           string
	Versions          []string
	Sizes             string
	Runs              int
	Notes             []string
}

func (h *harness) runMeta(loadStart, loadEnd string, started time.Time) runMeta {
	c := h.cfg
	m := runMeta{Started: started.UTC(), Finished: time.Now().UTC(), LoadStart: loadStart, LoadEnd: loadEnd, Runs: c.Runs}
	var uts syscall.Utsname
	kernel := "?"
	if syscall.Uname(&uts) == nil {
		kernel = utsString(uts.Release[:])
	}
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	m.Machine = fmt.Sprintf("%d CPUs, %s RAM, Linux %s, %s/%s", runtime.NumCPU(), mem, kernel, runtime.GOOS, runtime.GOARCH)
	ver := func(name string, args ...string) {
		out, err := runCmd(context.Background(), 10*time.Second, args[0], args[1:]...)
		line := strings.TrimSpace(strings.SplitN(strings.TrimSpace(out), "\n", 2)[0])
		if err != nil && line == "" {
			line = "?"
		}
		m.Versions = append(m.Versions, name+" "+line)
	}
	for _, cl := range c.Clients {
		switch cl {
		case "os2g":
			ver("os2g:", h.os2gBin, "version")
		case baseClient:
			ver("os2g-base:", c.Os2gBase, "version")
		case "s3fs":
			ver("s3fs:", c.S3fs, "--version")
		case "rclone":
			ver("rclone:", c.Rclone, "version")
		}
	}
	ver("fio:", c.Fio, "--version")
	if c.Endpoint == "" {
		ver("versitygw:", c.Versitygw, "--version")
	}
	m.Sizes = fmt.Sprintf("seq %s; small %d × %s, %d readers; rand %ds × %d jobs; list %d keys; loader %d images (%s), %d workers, batch %d; write %s; limit %d concurrent × 8 MiB",
		formatSize(h.man.Params.SeqSize), h.man.Params.SmallCount, formatSize(h.man.Params.SmallSize), c.SmallReaders,
		c.RandRuntime, c.RandJobs, h.man.Params.ListCount, h.man.LoaderImages, formatSize(h.man.LoaderBytes),
		c.LoaderWorkers, c.LoaderBatch, formatSize(c.WriteSize), c.LimitConcurrency)
	m.Notes = append(m.Notes, placementNote(c))
	m.Notes = append(m.Notes, "os2g flags: "+strings.TrimSpace(c.Os2gArgs+" (read workloads add "+c.Os2gReadArgs+")"))
	if c.S3fsArgs != "" {
		m.Notes = append(m.Notes, "s3fs extra: "+c.S3fsArgs)
	}
	if c.RcloneArgs != "" {
		m.Notes = append(m.Notes, "rclone extra: "+c.RcloneArgs)
	}
	if c.NoDropCaches || h.dropWarn {
		m.Notes = append(m.Notes, "page cache NOT dropped before cold runs")
	}
	if c.NoWarmServer || h.gw.Root == "" {
		m.Notes = append(m.Notes, "gateway files not pre-read after dropping caches (server reads from disk)")
	}
	return m
}

func utsString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}
