package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// allClients and allWorkloads are the accepted --clients and --workloads
// names, in report order.
var (
	allClients   = []string{"os2g", "s3fs", "rclone", "limit", "local"}
	allWorkloads = []string{"seq", "small", "rand", "list", "loader", "write", "loader-ddp"}
)

// config is everything a run needs, from the command line.
type config struct {
	WorkDir    string // data set, gateway root, mount points, scratch
	ResultsDir string // where tables, CSV and charts go
	Clients    []string
	Workloads  []string
	Runs       int
	Quick      bool
	Keep       bool // keep WorkDir (data set and gateway root) for the next run
	Fresh      bool // regenerate the data set even if a matching one is kept
	// PrepareOnly generates and uploads the data set into a kept work dir
	// and exits, so that a later run measures without generating.
	PrepareOnly bool

	SeqSize       int64 // bytes of the large object
	SmallCount    int
	SmallSize     int64 // bytes per small object
	SmallReaders  int
	RandRuntime   int // seconds per fio random-read run
	RandJobs      int
	ListCount     int
	LoaderCount   int
	LoaderWorkers int
	LoaderBatch   int
	LoaderSrc     string // an existing ImageFolder tree to use instead of generating one
	WriteSize     int64  // bytes written by the write workload

	LimitConcurrency int

	// Placement (placement.go): the S3 server runs on ServerCPUs, this
	// process, its readers and the host placement's daemons on HostCPUs;
	// the offload placement's daemons on ServerCPUs. Empty lists: no
	// fencing (everything shares every core, the old set-up).
	ServerCPUs, HostCPUs []int
	Placements           []string
	Os2gBase             string // a baseline os2g binary, client "os2g-base"

	Os2g, Os2gArgs     string
	Os2gReadArgs       string // added to os2g's flags for read-only workloads
	S3fs, S3fsArgs     string
	Rclone, RcloneArgs string
	Fio, Python        string
	Fusermount         string
	Versitygw          string
	Endpoint           string // use this S3 endpoint instead of starting versitygw
	AccessKey          string
	SecretKey          string
	Bucket             string

	NoDropCaches bool
	NoWarmServer bool
	MountTimeout time.Duration
	StepTimeout  time.Duration
	Verbose      bool
}

// parseConfig parses args (without the program name).
func parseConfig(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	clients := fs.String("clients", strings.Join(allClients, ","), "comma-separated clients: "+strings.Join(allClients, ","))
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "comma-separated workloads: "+strings.Join(allWorkloads, ","))
	fs.StringVar(&c.WorkDir, "work-dir", filepath.Join(os.TempDir(), "os2g-bench"), "work directory (data set, gateway root, mount points)")
	fs.StringVar(&c.ResultsDir, "results", "bench/results", "results directory")
	fs.IntVar(&c.Runs, "runs", 3, "runs per figure (the median is reported; --quick: 1)")
	fs.BoolVar(&c.Quick, "quick", false, "small data set and 1 run (sizes given explicitly still win)")
	fs.BoolVar(&c.Keep, "keep", false, "keep the work directory (data set, gateway root) for the next run")
	fs.BoolVar(&c.Fresh, "fresh", false, "regenerate and re-upload the data set even if a kept one matches")
	fs.BoolVar(&c.PrepareOnly, "prepare-only", false, "generate and upload the data set into the work dir (kept) and exit; a later run with the same sizes reuses it")
	seq := fs.String("seq-size", "1GiB", "size of the large object (seq, rand)")
	fs.IntVar(&c.SmallCount, "small-count", 2000, "number of small objects")
	small := fs.String("small-size", "110KiB", "size of each small object")
	fs.IntVar(&c.SmallReaders, "small-readers", 8, "parallel readers of the small workload")
	fs.IntVar(&c.RandRuntime, "rand-runtime", 5, "seconds per fio random-read run (at most; a run also ends after one pass over the object)")
	fs.IntVar(&c.RandJobs, "rand-jobs", 4, "fio jobs of the random-read runs")
	fs.IntVar(&c.ListCount, "list-count", 20000, "keys in the listed directory")
	fs.IntVar(&c.LoaderCount, "loader-count", 10000, "PNG images in the generated ImageFolder")
	fs.IntVar(&c.LoaderWorkers, "loader-workers", 8, "DataLoader num_workers")
	fs.IntVar(&c.LoaderBatch, "loader-batch", 64, "DataLoader batch_size")
	fs.StringVar(&c.LoaderSrc, "loader-src", "", "existing ImageFolder tree (class dirs of images) to upload instead of generating PNGs")
	wr := fs.String("write-size", "1GiB", "bytes written by the write workload")
	fs.IntVar(&c.LimitConcurrency, "limit-concurrency", 16, "concurrent GETs of the limit client (seq, small)")
	serverCPUs := fs.String("server-cpus", "1", "CPUs of the S3 server (taskset -c list), a stand-in for a remote store; also the offload placement's daemon CPUs; \"\" with --host-cpus \"\": no fencing")
	hostCPUs := fs.String("host-cpus", "0", "CPUs of the host: this process, readers, loader, limit and local clients, host-placement daemons (taskset -c list)")
	placements := fs.String("placements", strings.Join(allPlacements, ","), "comma-separated placements of the mount clients' daemons: "+strings.Join(allPlacements, ","))
	fs.StringVar(&c.Os2gBase, "os2g-base", "", "also run this os2g binary (e.g. built from the code before a change) as client os2g-base, for side-by-side figures")
	fs.StringVar(&c.Os2g, "os2g", "", "os2g binary (default: build ./cmd/os2g into the work dir)")
	fs.StringVar(&c.Os2gArgs, "os2g-args", "--max-memory=2GiB", "extra os2g mount flags (space-separated)")
	fs.StringVar(&c.Os2gReadArgs, "os2g-read-args", "--read-only --immutable", "os2g mount flags added for the read workloads (all but write)")
	fs.StringVar(&c.S3fs, "s3fs", "s3fs", "s3fs binary")
	fs.StringVar(&c.S3fsArgs, "s3fs-args", "", "extra s3fs arguments (space-separated, e.g. \"-o parallel_count=16\")")
	fs.StringVar(&c.Rclone, "rclone", "rclone", "rclone binary")
	fs.StringVar(&c.RcloneArgs, "rclone-args", "", "extra rclone mount flags (space-separated)")
	fs.StringVar(&c.Fio, "fio", "fio", "fio binary")
	fs.StringVar(&c.Python, "python", "/usr/bin/python3", "python with torch and torchvision (loader workload)")
	fs.StringVar(&c.Fusermount, "fusermount", "fusermount3", "fusermount binary used to unmount")
	fs.StringVar(&c.Versitygw, "versitygw", filepath.Join(os.Getenv("HOME"), "go/bin/versitygw"), "versitygw binary (started on loopback unless --endpoint)")
	fs.StringVar(&c.Endpoint, "endpoint", "", "use this S3 endpoint (http://127.0.0.1:PORT) instead of starting versitygw")
	fs.StringVar(&c.AccessKey, "access-key", "benchadmin", "S3 access key (of the started gateway, or of --endpoint)")
	fs.StringVar(&c.SecretKey, "secret-key", "benchsecretkey", "S3 secret key")
	fs.StringVar(&c.Bucket, "bucket", "os2g-bench", "bucket holding the data set")
	fs.BoolVar(&c.NoDropCaches, "no-drop-caches", false, "do not drop the page cache before cold runs (figures are then not cold)")
	fs.BoolVar(&c.NoWarmServer, "no-warm-server", false, "after dropping caches, do not pre-read the gateway's backing files (the server then reads from disk)")
	fs.DurationVar(&c.MountTimeout, "mount-timeout", 60*time.Second, "how long a mount may take to appear")
	fs.DurationVar(&c.StepTimeout, "step-timeout", 5*time.Minute, "hang guard for one measured step")
	fs.BoolVar(&c.Verbose, "v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var err error
	for _, s := range []struct {
		v    string
		dst  *int64
		name string
	}{{*seq, &c.SeqSize, "seq-size"}, {*small, &c.SmallSize, "small-size"}, {*wr, &c.WriteSize, "write-size"}} {
		if *s.dst, err = parseSize(s.v); err != nil {
			return nil, fmt.Errorf("--%s: %w", s.name, err)
		}
	}
	if c.Quick {
		quick := map[string]func(){
			"runs":         func() { c.Runs = 1 },
			"seq-size":     func() { c.SeqSize = 128 << 20 },
			"small-count":  func() { c.SmallCount = 300 },
			"rand-runtime": func() { c.RandRuntime = 3 },
			"list-count":   func() { c.ListCount = 2000 },
			"loader-count": func() { c.LoaderCount = 1000 },
			"write-size":   func() { c.WriteSize = 64 << 20 },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	if c.PrepareOnly {
		c.Keep = true
	}
	if c.Clients, err = parseList(*clients, allClients, "clients"); err != nil {
		return nil, err
	}
	if c.Workloads, err = parseList(*workloads, allWorkloads, "workloads"); err != nil {
		return nil, err
	}
	c.Clients = withBase(c.Clients, c.Os2gBase)
	if c.Placements, err = parseList(*placements, allPlacements, "placements"); err != nil {
		return nil, err
	}
	if c.ServerCPUs, c.HostCPUs, err = parseFences(*serverCPUs, *hostCPUs); err != nil {
		return nil, err
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.Runs < 1:
		return errors.New("--runs must be at least 1")
	case c.SeqSize < 1<<20 || c.SeqSize%(4<<20) != 0:
		return errors.New("--seq-size must be a positive multiple of 4 MiB")
	case c.SmallCount < 1 || c.SmallSize < 1 || c.SmallReaders < 1:
		return errors.New("--small-count, --small-size and --small-readers must be positive")
	case c.RandRuntime < 1 || c.RandJobs < 1:
		return errors.New("--rand-runtime and --rand-jobs must be positive")
	case c.SeqSize%(int64(c.RandJobs)<<20) != 0:
		return errors.New("--seq-size must be a multiple of --rand-jobs MiB (each random-read job covers an equal share)")
	case c.ListCount < 1:
		return errors.New("--list-count must be positive")
	case c.LoaderCount < 10 || c.LoaderWorkers < 0 || c.LoaderBatch < 1:
		return errors.New("--loader-count must be at least 10, --loader-batch positive")
	case c.WriteSize < 1<<20:
		return errors.New("--write-size must be at least 1 MiB")
	case c.LimitConcurrency < 1:
		return errors.New("--limit-concurrency must be positive")
	case c.Bucket == "":
		return errors.New("--bucket is empty")
	}
	return nil
}

// parseList splits a comma list and checks every name against allowed,
// keeping allowed's order.
func parseList(s string, allowed []string, what string) ([]string, error) {
	want := map[string]bool{}
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(allowed, p) {
			return nil, fmt.Errorf("--%s: unknown %q (want some of %s)", what, p, strings.Join(allowed, ","))
		}
		want[p] = true
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("--%s is empty", what)
	}
	var out []string
	for _, a := range allowed {
		if want[a] {
			out = append(out, a)
		}
	}
	return out, nil
}

// parseSize parses a byte count with an optional binary suffix: 512, 4k,
// 4KiB, 8M, 8MiB, 1G, 1GiB (K, M, G are powers of 1024).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	lower := strings.ToLower(t)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1}} {
		if strings.HasSuffix(lower, u.suf) {
			mult = u.m
			t = t[:len(t)-len(u.suf)]
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return n * mult, nil
}

// formatSize renders bytes with a binary unit, as few digits as exact.
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		m    int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + " " + u.name
		}
	}
	if n >= 1<<20 {
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	}
	if n >= 1<<10 {
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
