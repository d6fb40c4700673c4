package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/os2g/os2g/diskcache"
	"github.com/os2g/os2g/fusefs"
	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/hint"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

const mountUsage = `Usage: os2g mount [flags] s3://BUCKET[/PREFIX] MOUNTPOINT

Mounts the bucket (or the part of it under PREFIX/) at MOUNTPOINT, an existing
empty directory. By default os2g returns once the mount is live and keeps
serving it from a background daemon; "os2g umount MOUNTPOINT" (or
"fusermount3 -u MOUNTPOINT") unmounts it and ends the daemon, as does SIGTERM
or SIGINT to the daemon. With --foreground it serves in the calling process
until unmounted or interrupted.

The bucket is checked (one LIST) before anything is mounted: a missing bucket,
rejected credentials or an unreachable endpoint fail with a one-line message
and exit status 1, and nothing is left mounted.

Sizes accept suffixes: 512MiB, 2GiB, 8M (powers of 1024) or 100MB (powers of 1000).
TTLs accept seconds (30), durations (90s, 5m), "indefinite" and "minimal" (1s).
`

// mountFlags holds the parsed flags of "os2g mount".
type mountFlags struct {
	conn        connFlags
	readOnly    bool
	allowOther  bool
	immutable   bool
	foreground  bool
	debug       bool
	nonempty    bool
	uid, gid    uint
	fileMode    modeFlag
	dirMode     modeFlag
	metadataTTL ttlFlag
	negativeTTL ttlFlag
	opTimeout   time.Duration
	maxMemory   sizeFlag
	logFile     string
	logFormat   string
	logSyslog   bool
	logMaxSize  sizeFlag
	metricsAddr string
	cacheDir    string
	passthrough bool
	cacheSize   sizeFlag
	sharded     bool
	gdd         gddFlags
	cpus        cpusFlag
}

// register defines every flag of "os2g mount", in help order, each under
// its help heading. New mount flags go here, one line each, in the group
// they belong to.
func (m *mountFlags) register(fs *pflag.FlagSet) {
	fs.SortFlags = false
	m.fileMode.v, m.dirMode.v = 0o644, 0o755
	m.metadataTTL.v, m.negativeTTL.v = fusefs.DefaultMetadataTTL, fusefs.DefaultNegativeTTL
	m.logMaxSize.v = 100 << 20
	flagGroup(fs, groupSource, func() {
		m.conn.register(fs)
		fs.DurationVar(&m.opTimeout, "op-timeout", 60*time.Second, "bound of one object-store call, retries included (per 64 MiB of a part or range); past it the call fails and the system call gets EIO (see docs/semantics.md)")
	})
	flagGroup(fs, groupMount, func() {
		fs.BoolVarP(&m.foreground, "foreground", "f", false, "serve in this process instead of a background daemon")
		fs.BoolVar(&m.readOnly, "read-only", false, "mount read-only: every write fails with EROFS")
		fs.BoolVar(&m.allowOther, "allow-other", false, "let other users access the mount (non-root needs user_allow_other in /etc/fuse.conf)")
		fs.BoolVar(&m.nonempty, "nonempty", false, "allow mounting over a non-empty directory (its contents are hidden while mounted)")
		fs.UintVar(&m.uid, "uid", uint(os.Getuid()), "owner uid of every file and directory (default: the mounting user's)")
		fs.UintVar(&m.gid, "gid", uint(os.Getgid()), "owner gid of every file and directory (default: the mounting user's)")
		fs.Var(&m.fileMode, "file-mode", "permission bits of files, octal")
		fs.Var(&m.dirMode, "dir-mode", "permission bits of directories, octal")
	})
	flagGroup(fs, groupCaching, func() {
		fs.BoolVar(&m.immutable, "immutable", false, "the bucket does not change while mounted (datasets): metadata and page cache are kept forever")
		fs.Var(&m.metadataTTL, "metadata-ttl", "how long listed names and attributes are trusted before the bucket is asked again: seconds, a duration (90s, 5m), indefinite or minimal")
		fs.Var(&m.negativeTTL, "negative-ttl", "how long a name found missing stays missing before the bucket is asked again (same forms as --metadata-ttl)")
		fs.StringVar(&m.cacheDir, "cache-dir", "", "keep a checksummed local disk cache of wholly read objects in this directory (default: none)")
		fs.Var(&m.cacheSize, "cache-size", "size limit of --cache-dir, e.g. 50GiB (default 10GiB)")
		fs.BoolVar(&m.sharded, "sharded", false, "this node reads only a share of each directory (a DistributedSampler rank): pre-read what the reads show this node uses, not whole directories")
		fs.BoolVar(&m.passthrough, "passthrough", false, "experimental: let the kernel read files held whole in --cache-dir itself (FUSE passthrough, Linux 6.9+); an open racing an overwrite may get EIO")
	})
	flagGroup(fs, groupMemory, func() {
		fs.Var(&m.cpus, "cpus", cpusUsage)
		fs.Var(&m.maxMemory, "max-memory", "memory budget of read-ahead windows, epoch pre-reading and the block cache, e.g. 2GiB (default: 1/4 of min(RAM, cgroup memory limit)); FUSE request buffers and the parts of files being written come on top (see README)")
	})
	flagGroup(fs, groupWrites, func() {
		m.conn.registerPartSize(fs)
	})
	flagGroup(fs, groupLogging, func() {
		fs.BoolVarP(&m.debug, "debug", "d", false, "debug logging, including every FUSE request")
		fs.StringVar(&m.logFile, "log-file", "", "append logs to this file (default: stderr in the foreground; a background daemon logs to syslog/the journal, else to /var/log/os2g or $XDG_STATE_HOME/os2g, see docs/system.md)")
		fs.BoolVar(&m.logSyslog, "log-syslog", false, "log to the local syslog (the journal on systemd hosts)")
		fs.StringVar(&m.logFormat, "log-format", "text", "log line format: text (key=value) or json")
		fs.Var(&m.logMaxSize, "log-max-size", "rotate a log file at this size, keeping 3 old ones; 0 never rotates (default 100MiB)")
		fs.StringVar(&m.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9100")
	})
	flagGroup(fs, groupGPU, func() {
		m.gdd.register(fs)
	})
}

// validate checks every flag value that needs no network or file system;
// its errors are usage errors (exit status 2) naming the flag.
func (m *mountFlags) validate() error {
	if m.uid > 1<<32-1 || m.gid > 1<<32-1 {
		return usageErr("--uid and --gid must fit 32 bits")
	}
	if m.maxMemory.set && m.maxMemory.v <= 0 {
		return usageErr("--max-memory must be positive")
	}
	if m.cacheSize.set && m.cacheSize.v <= 0 {
		return usageErr("--cache-size must be positive (leave out --cache-dir for no disk cache)")
	}
	if m.logFormat != "text" && m.logFormat != "json" {
		return usageErr(`--log-format must be "text" or "json", not %q`, m.logFormat)
	}
	if m.logSyslog && m.logFile != "" {
		return usageErr("--log-syslog and --log-file exclude each other")
	}
	if m.opTimeout <= 0 {
		return usageErr("--op-timeout must be positive, e.g. 60s")
	}
	if m.passthrough && m.cacheDir == "" {
		return usageErr("--passthrough needs --cache-dir")
	}
	if err := m.conn.validate(); err != nil {
		return err
	}
	return m.gdd.validate()
}

// daemonEnv marks a background child; its value is the readiness pipe's fd.
const daemonEnv = "OS2G_DAEMON_READY_FD"

func newMountCmd(e Env) *cobra.Command {
	var m mountFlags
	c := &cobra.Command{
		Use:   "mount [flags] s3://BUCKET[/PREFIX] MOUNTPOINT",
		Short: "mount a bucket (in the background by default)",
		Long:  mountUsage,
		Args:  exactArgs(2, "s3://BUCKET[/PREFIX] MOUNTPOINT"),
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 1 {
				return nil, cobra.ShellCompDirectiveFilterDirs
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			// The background child gets this command line again.
			return runMount(c.Context(), e, &m, args, e.Args[1:])
		},
	}
	m.register(c.Flags())
	return c
}

// runMount validates the parsed flags and arguments pos, then mounts in
// the foreground, as a background child, or by starting one with the
// original command-line arguments raw.
func runMount(ctx context.Context, e Env, m *mountFlags, pos, raw []string) error {
	u, err := ParseS3URL(pos[0])
	if err != nil {
		return usageErr("%v", err)
	}
	if err := m.validate(); err != nil {
		return err
	}
	if _, err := m.conn.options(e, u.Bucket, nil); err != nil {
		return err // a bad --endpoint-url, reported before any daemon starts
	}
	if err := m.cpus.apply(); err != nil {
		return err
	}
	if e.getenv(daemonEnv) != "" {
		return runDaemonChild(ctx, e, m, u, pos[1])
	}
	if !m.foreground {
		var extra []string
		where := ""
		if m.logFile == "" && !m.logSyslog {
			mp, err := filepath.Abs(pos[1])
			if err != nil {
				return err
			}
			d, err := chooseLogDest(e, os.Geteuid(), localSyslog, mp)
			if err != nil {
				return err
			}
			if d.syslog {
				extra, where = []string{"--log-syslog"}, "syslog (journalctl -t os2g)"
			} else {
				extra, where = []string{"--log-file", d.path}, d.path
			}
		}
		return runBackground(ctx, e, raw, extra, where)
	}
	return serveMount(ctx, e, m, u, pos[1], nil)
}

// readyFunc is told once whether the mount is live (nil) or failed; a
// non-nil return aborts the mount.
type readyFunc func(err error) error

// newLogger builds the daemon's logger, in --log-format: to syslog with
// --log-syslog, to the (rotated) --log-file, else to w. With quiet (a
// background daemon, whose stderr reaches the user only until the mount
// is ready) info lines are left out of w, so a successful mount prints
// nothing and warnings still show. The closer, if not nil, closes the
// destination.
func (m *mountFlags) newLogger(w io.Writer, quiet bool) (*slog.Logger, io.Closer, error) {
	level := slog.LevelInfo
	if m.debug {
		level = slog.LevelDebug
	}
	switch {
	case m.logSyslog:
		h, c, err := newSyslogHandler("", "", m.logFormat, level)
		if err != nil {
			return nil, nil, err
		}
		var out slog.Handler = h
		if quiet {
			// Until ready, warnings also reach the user's terminal.
			out = teeHandler{h, newFormatHandler(m.logFormat, w, &slog.HandlerOptions{Level: max(level, slog.LevelWarn)})}
		}
		return slog.New(out), c, nil
	case m.logFile != "":
		f, err := openLogFile(m.logFile, m.logMaxSize.v)
		if err != nil {
			return nil, nil, fmt.Errorf("opening --log-file: %w", err)
		}
		return slog.New(newFormatHandler(m.logFormat, f, &slog.HandlerOptions{Level: level})), f, nil
	}
	if quiet && !m.debug {
		level = slog.LevelWarn
	}
	return slog.New(newFormatHandler(m.logFormat, w, &slog.HandlerOptions{Level: level})), nil, nil
}

// serveMount checks everything, mounts, calls ready, and serves until the
// file system is unmounted (by a signal, os2g umount or fusermount3 -u).
// On any failure before ready nothing stays mounted.
func serveMount(ctx context.Context, e Env, m *mountFlags, u S3URL, mountpoint string, ready readyFunc) (retErr error) {
	log, logFile, err := m.newLogger(e.Stderr, ready != nil)
	if err != nil {
		if ready != nil {
			return ready(err)
		}
		return err
	}
	if logFile != nil {
		defer logFile.Close()
	}
	fail := func(err error) error {
		if logFile != nil {
			log.Error("mount failed", "err", oneLine(err.Error()))
		}
		if ready != nil {
			return ready(err)
		}
		return err
	}

	// Signals cancel the setup and, once mounted, unmount.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	setupCtx, cancelSetup := context.WithCancel(ctx)
	defer cancelSetup()
	var (
		srvMu sync.Mutex // guards srv
		srv   *fusefs.Server
	)
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	var mp string
	go func() {
		for {
			select {
			case <-stopWatch:
				return
			case sig := <-sigc:
				log.Info("signal received, unmounting", "signal", sig.String())
				cancelSetup()
				srvMu.Lock()
				s := srv
				srvMu.Unlock()
				if s != nil {
					unmountServer(log, s, mp)
				}
			}
		}
	}()

	mp, err = checkMountpoint(mountpoint, m.nonempty)
	if err != nil {
		return fail(err)
	}
	if err := checkFUSEAccess(m.allowOther); err != nil {
		return fail(err)
	}
	budget := m.maxMemory.v
	if !m.maxMemory.set {
		if budget, err = defaultMaxMemory(); err != nil {
			return fail(fmt.Errorf("choosing the default --max-memory: %w", err))
		}
	}
	if budget <= 0 {
		return fail(fmt.Errorf("--max-memory: the default budget came out as %d bytes", budget))
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// Block buffers live outside the Go heap (mmap); this keeps the
		// small heap allocations from letting RSS drift past the budget.
		debug.SetMemoryLimit(prefetch.MemoryLimitFor(budget))
	}
	var dc prefetch.DiskCache
	var fdc fusefs.DiskCache // both nil (not a nil pointer) without --cache-dir
	var dcache *diskcache.Cache
	if m.cacheDir != "" {
		size := m.cacheSize.v
		if !m.cacheSize.set {
			size = 10 << 30
		}
		c, err := diskcache.New(diskcache.Options{Dir: m.cacheDir, MaxBytes: size, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("--cache-dir: %w", err))
		}
		defer c.Close()
		dc, fdc = c, c
		dcache = c
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newCPUCounter())
	registerBuildInfo(reg, e.Version, e.Commit)
	switch {
	case m.logSyslog:
		registerLogInfo(reg, "syslog")
	case m.logFile != "":
		if abs, err := filepath.Abs(m.logFile); err == nil {
			registerLogInfo(reg, abs)
		}
	default:
		registerLogInfo(reg, "stderr")
	}
	if dcache != nil {
		reg.MustRegister(newDiskCacheCollector(dcache))
	}
	if m.metricsAddr != "" {
		ln, err := net.Listen("tcp", m.metricsAddr)
		if err != nil {
			return fail(fmt.Errorf("--metrics-addr: %w", err))
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		// Go's profiler, for "go tool pprof http://ADDR/debug/pprof/profile".
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(ln)
		defer hs.Close()
		log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}

	endpoint := m.conn.endpointInUse(e)
	opts, err := m.conn.options(e, u.Bucket, log)
	if err != nil {
		return fail(err)
	}
	if err := checkCredentials(setupCtx, m.conn.profile, e.getenv); err != nil {
		return fail(err)
	}
	opts.RequestTimeout = m.opTimeout
	if err := checkBucket(setupCtx, opts); err != nil {
		if setupCtx.Err() != nil && ctx.Err() == nil {
			return fail(errors.New("interrupted"))
		}
		return fail(errors.New(describeStoreErrIn(err, u.Bucket, endpoint, m.conn.regionInUse(e))))
	}
	opts.Registerer = reg
	store, err := objclient.New(setupCtx, opts)
	if err != nil {
		return fail(fmt.Errorf("object store client: %w", err))
	}
	if u.Prefix != "" {
		// A prefix with no keys is most likely a typo; mount it anyway.
		page, err := store.List(setupCtx, objclient.ListRequest{Prefix: u.Prefix, MaxKeys: 1})
		if err == nil && len(page.Objects) == 0 && len(page.CommonPrefixes) == 0 {
			msg := fmt.Sprintf("%s holds no objects: the mount starts empty (is the prefix right?)", u)
			log.Warn(msg)
			if logFile != nil && !m.logSyslog {
				// The log is not the user's terminal; say it there too.
				fmt.Fprintf(e.Stderr, "os2g: mount: warning: %s\n", msg)
			}
		}
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "os2g", Subsystem: "s3", Name: "retries_total",
		Help: "S3 requests sent again after a throttling reply (SlowDown, 503) or a transient failure",
	}, func() float64 { return float64(store.Retries()) }))
	pm, err := prefetch.New(prefetch.Options{
		Getter:     store,
		MaxMemory:  budget,
		PartSize:   m.conn.partSize.v,
		Logger:     log,
		Registerer: reg,
		DiskCache:  dc,
		Sharded:    m.sharded,
	})
	if err != nil {
		return fail(fmt.Errorf("prefetch: %w", err))
	}
	defer pm.Close()

	s, err := fusefs.Mount(mp, fusefs.Options{
		Store:       meteredStore{store, newUploadMetrics(reg)},
		Registerer:  reg,
		Prefix:      u.Prefix,
		Prefetch:    pm,
		ReadOnly:    m.readOnly,
		UID:         uint32(m.uid), // defaults to the mounting user's
		GID:         uint32(m.gid),
		UIDSet:      true,
		GIDSet:      true,
		DiskCache:   fdc,
		Passthrough: m.passthrough,
		FileMode:    m.fileMode.v,
		DirMode:     m.dirMode.v,
		MetadataTTL: nonzeroTTL(m.metadataTTL.v),
		NegativeTTL: nonzeroTTL(m.negativeTTL.v),
		Immutable:   m.immutable,
		AllowOther:  m.allowOther,
		Debug:       m.debug,
		Logger:      log,
		PartSize:    m.conn.partSize.v,
		FSName:      u.String(),
	})
	if err != nil {
		return fail(fmt.Errorf("mounting %s: %w", mp, err))
	}
	srvMu.Lock()
	srv = s
	srvMu.Unlock()
	abort := func(err error) error {
		unmountServer(log, s, mp)
		s.Wait()
		return fail(err)
	}
	if setupCtx.Err() != nil {
		return abort(errors.New("interrupted"))
	}
	if st, err := os.Stat(mp); err != nil || !st.IsDir() {
		return abort(fmt.Errorf("mount at %s did not come up: %v", mp, err))
	}
	stopGDD, err := startGDD(&m.gdd, store, pm, mp, u.Prefix, m.readOnly, log)
	if errors.Is(err, gdd.ErrNoDevice) {
		// No GPU driver: the mount serves on without placement (issue 6).
		log.Error("GPU direct placement disabled: no usable CUDA device", "socket", m.gdd.socket, "err", err)
		stopGDD, err = func() {}, nil
	}
	if err != nil {
		return abort(fmt.Errorf("--gdd-socket: %w", err))
	}
	defer stopGDD()
	// The control socket os2g stats reads; removed when the mount ends.
	defer startControl(reg, mp, log, controlRoute{"/hint", hint.Handler(pm, mp, u.Prefix, func(format string, a ...any) {
		log.Info(fmt.Sprintf(format, a...))
	})})()

	mode := "read-write"
	if m.readOnly {
		mode = "read-only"
	}
	if ready != nil {
		if err := ready(nil); err != nil {
			unmountServer(log, s, mp)
			s.Wait()
			return err
		}
	}
	// systemd Type=notify: the mount is live now.
	notifySock := e.getenv("NOTIFY_SOCKET")
	if err := sdNotify(notifySock, fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=serving %s at %s", os.Getpid(), u, mp)); err != nil {
		log.Warn("telling the service manager the mount is ready failed", "err", err)
	}
	defer sdNotify(notifySock, "STOPPING=1")
	// After ready: a background daemon's stderr is the log file (or
	// nothing) by now, so a successful mount prints nothing.
	log.Info("mounted", "source", u.String(), "mountpoint", mp, "mode", mode, "endpoint", endpoint,
		"max_memory", FormatSize(budget), "immutable", m.immutable, "pid", os.Getpid())
	s.Wait()
	log.Info("unmounted", "mountpoint", mp)
	return nil
}

// nonzeroTTL maps a TTL of 0 (no caching) to 1 ns, since fusefs takes 0
// as "the default".
func nonzeroTTL(d time.Duration) time.Duration {
	if d == 0 {
		return time.Nanosecond
	}
	return d
}

// checkBucket verifies bucket, endpoint and credentials with a client that
// gives up quickly (3 attempts, at most 30 s), so a wrong endpoint is
// reported in seconds rather than after the data path's long retries.
func checkBucket(ctx context.Context, opts objclient.Options) error {
	probe := opts
	probe.MaxAttempts = 3
	probe.RetryMaxDelay = time.Second
	probe.RequestTimeout = 10 * time.Second
	probe.StallTimeout = 10 * time.Second
	probe.Logger = slog.New(slog.DiscardHandler)
	probe.Registerer = nil // the probe's requests are not the mount's
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := objclient.New(ctx, probe)
	if err != nil {
		return err
	}
	return c.CheckBucket(ctx)
}

// unmountServer unmounts s; if the mount is busy it detaches it lazily
// (fusermount3 -uz), after which the kernel ends the session once the last
// open file is closed and s.Wait returns.
func unmountServer(log *slog.Logger, s *fusefs.Server, mp string) {
	err := s.Unmount()
	if err == nil {
		return
	}
	log.Warn("unmount failed, detaching lazily", "mountpoint", mp, "err", err)
	if out, err := exec.Command(fusermountBin(), "-u", "-z", mp).CombinedOutput(); err != nil {
		log.Error("lazy unmount failed", "mountpoint", mp, "err", err, "output", oneLine(string(out)))
	}
}

// fusermountBin is fusermount3 if installed, else fusermount.
func fusermountBin() string {
	for _, b := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	return "fusermount3"
}
