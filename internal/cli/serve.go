package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

	"github.com/os2g/os2g/diskcache"
	"github.com/os2g/os2g/fusefs"
	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/hint"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

// serve.go: serveMount, the composition root of a mount, as a sequence of
// named steps.

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

// serveMount checks everything, mounts, calls ready, and serves until the
// file system is unmounted (by a signal, os2g umount or fusermount3 -u).
// On any failure before ready nothing stays mounted.
func serveMount(ctx context.Context, e Env, m *mountFlags, u S3URL, mountpoint string, ready readyFunc) error {
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
	sig := watchSignals(ctx, log)
	defer sig.stop()

	mp, err := checkMountpoint(mountpoint, m.nonempty)
	if err != nil {
		return fail(err)
	}
	if err := checkFUSEAccess(m.allowOther); err != nil {
		return fail(err)
	}
	budget, err := m.memoryBudget()
	if err != nil {
		return fail(err)
	}
	dcache, err := m.openDiskCache(log)
	if err != nil {
		return fail(err)
	}
	if dcache != nil {
		defer dcache.Close()
	}
	reg := newMountRegistry(e, m, dcache)
	stopMetrics, err := serveMetrics(m.metricsAddr, reg, log)
	if err != nil {
		return fail(err)
	}
	defer stopMetrics()
	store, endpoint, err := m.openStore(ctx, sig.setupCtx, e, u, reg, log, logFile != nil)
	if err != nil {
		return fail(err)
	}
	pm, err := m.newPrefetch(store, budget, dcache, reg, log)
	if err != nil {
		return fail(err)
	}
	defer pm.Close()

	s, err := fusefs.Mount(mp, m.fusefsOptions(store, reg, u, pm, dcache, log))
	if err != nil {
		return fail(fmt.Errorf("mounting %s: %w", mp, err))
	}
	sig.mounted(s, mp)
	abort := func(err error) error {
		unmountServer(log, s, mp)
		s.Wait()
		return fail(err)
	}
	if sig.setupCtx.Err() != nil {
		return abort(errors.New("interrupted"))
	}
	if st, err := os.Stat(mp); err != nil || !st.IsDir() {
		return abort(fmt.Errorf("mount at %s did not come up: %v", mp, err))
	}
	stopServices, err := startServices(m, store, pm, reg, mp, u.Prefix, log)
	if err != nil {
		return abort(err)
	}
	defer stopServices()

	if ready != nil {
		if err := ready(nil); err != nil {
			unmountServer(log, s, mp)
			s.Wait()
			return err
		}
	}
	stopNotify := announce(e, m, u, mp, endpoint, budget, log)
	defer stopNotify()
	s.Wait()
	log.Info("unmounted", "mountpoint", mp)
	return nil
}

// signalWatch turns SIGINT, SIGTERM and SIGHUP into the cancellation of
// the setup (setupCtx) and, once mounted, an unmount.
type signalWatch struct {
	setupCtx context.Context
	cancel   context.CancelFunc
	sigc     chan os.Signal
	done     chan struct{}

	mu  sync.Mutex // guards srv and mp
	srv *fusefs.Server
	mp  string
}

// watchSignals starts watching; stop ends it.
func watchSignals(ctx context.Context, log *slog.Logger) *signalWatch {
	w := &signalWatch{sigc: make(chan os.Signal, 4), done: make(chan struct{})}
	signal.Notify(w.sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	w.setupCtx, w.cancel = context.WithCancel(ctx)
	go func() {
		for {
			select {
			case <-w.done:
				return
			case sig := <-w.sigc:
				log.Info("signal received, unmounting", "signal", sig.String())
				w.cancel()
				w.mu.Lock()
				s, mp := w.srv, w.mp
				w.mu.Unlock()
				if s != nil {
					unmountServer(log, s, mp)
				}
			}
		}
	}()
	return w
}

// mounted tells the watch what a signal unmounts from now on.
func (w *signalWatch) mounted(s *fusefs.Server, mp string) {
	w.mu.Lock()
	w.srv, w.mp = s, mp
	w.mu.Unlock()
}

// stop ends the watch.
func (w *signalWatch) stop() {
	close(w.done)
	w.cancel()
	signal.Stop(w.sigc)
}

// memoryBudget is --max-memory in bytes (or its default), also applied as
// the Go runtime's soft memory limit unless GOMEMLIMIT is set.
func (m *mountFlags) memoryBudget() (int64, error) {
	budget := m.maxMemory.v
	if !m.maxMemory.set {
		var err error
		if budget, err = defaultMaxMemory(); err != nil {
			return 0, fmt.Errorf("choosing the default --max-memory: %w", err)
		}
	}
	if budget <= 0 {
		return 0, fmt.Errorf("--max-memory: the default budget came out as %d bytes", budget)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// Block buffers live outside the Go heap (mmap); this keeps the
		// small heap allocations from letting RSS drift past the budget.
		debug.SetMemoryLimit(prefetch.MemoryLimitFor(budget))
	}
	return budget, nil
}

// openDiskCache opens --cache-dir (default size 10 GiB); nil without it.
func (m *mountFlags) openDiskCache(log *slog.Logger) (*diskcache.Cache, error) {
	if m.cacheDir == "" {
		return nil, nil
	}
	size := m.cacheSize.v
	if !m.cacheSize.set {
		size = 10 << 30
	}
	c, err := diskcache.New(diskcache.Options{Dir: m.cacheDir, MaxBytes: size, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--cache-dir: %w", err)
	}
	return c, nil
}

// newMountRegistry is the mount's metrics registry: Go and process
// collectors, CPU time, build and log information, and the disk cache's
// counters when there is one.
func newMountRegistry(e Env, m *mountFlags, dcache *diskcache.Cache) *prometheus.Registry {
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
	return reg
}

// openStore checks credentials and the bucket with a quick probe, then
// opens the mount's store client (its metrics in reg), warns when the
// prefix holds nothing (on the terminal too when logToFile), and returns
// it with the endpoint in use. ctx is the caller's, setupCtx the one a
// signal cancels.
func (m *mountFlags) openStore(ctx, setupCtx context.Context, e Env, u S3URL, reg *prometheus.Registry, log *slog.Logger, logToFile bool) (*objclient.S3, string, error) {
	endpoint := m.conn.endpointInUse(e)
	opts, err := m.conn.options(e, u.Bucket, log)
	if err != nil {
		return nil, "", err
	}
	if err := checkCredentials(setupCtx, m.conn.profile, e.getenv); err != nil {
		return nil, "", err
	}
	opts.RequestTimeout = m.opTimeout
	if err := checkBucket(setupCtx, opts); err != nil {
		if setupCtx.Err() != nil && ctx.Err() == nil {
			return nil, "", errors.New("interrupted")
		}
		return nil, "", errors.New(describeStoreErrIn(err, u.Bucket, endpoint, m.conn.regionInUse(e)))
	}
	opts.Registerer = reg
	store, err := objclient.New(setupCtx, opts)
	if err != nil {
		return nil, "", fmt.Errorf("object store client: %w", err)
	}
	if u.Prefix != "" {
		// A prefix with no keys is most likely a typo; mount it anyway.
		page, err := store.List(setupCtx, objclient.ListRequest{Prefix: u.Prefix, MaxKeys: 1})
		if err == nil && len(page.Objects) == 0 && len(page.CommonPrefixes) == 0 {
			msg := fmt.Sprintf("%s holds no objects: the mount starts empty (is the prefix right?)", u)
			log.Warn(msg)
			if logToFile && !m.logSyslog {
				// The log is not the user's terminal; say it there too.
				fmt.Fprintf(e.Stderr, "os2g: mount: warning: %s\n", msg)
			}
		}
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "os2g", Subsystem: "s3", Name: "retries_total",
		Help: "S3 requests sent again after a throttling reply (SlowDown, 503) or a transient failure",
	}, func() float64 { return float64(store.Retries()) }))
	return store, endpoint, nil
}

// newPrefetch is the mount's prefetcher: budget bytes of memory, the disk
// cache (if any) behind it.
func (m *mountFlags) newPrefetch(store objclient.Store, budget int64, dcache *diskcache.Cache, reg prometheus.Registerer, log *slog.Logger) (*prefetch.Manager, error) {
	var dc prefetch.DiskCache // nil, not a nil pointer, without --cache-dir
	if dcache != nil {
		dc = dcache
	}
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
		return nil, fmt.Errorf("prefetch: %w", err)
	}
	return pm, nil
}

// fusefsOptions maps the flags to the FUSE front end's options.
func (m *mountFlags) fusefsOptions(store objclient.Store, reg prometheus.Registerer, u S3URL, pm *prefetch.Manager, dcache *diskcache.Cache, log *slog.Logger) fusefs.Options {
	var fdc fusefs.DiskCache // nil, not a nil pointer, without --cache-dir
	if dcache != nil {
		fdc = dcache
	}
	return fusefs.Options{
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
	}
}

// startServices starts what serves beside the mount: GPU direct placement
// (--gdd-socket; without a usable CUDA device the mount serves on without
// it) and the control socket that os2g stats and hints use. stop ends
// both and removes the sockets.
func startServices(m *mountFlags, store objclient.Store, pm *prefetch.Manager, reg *prometheus.Registry, mp, prefix string, log *slog.Logger) (stop func(), err error) {
	stopGDD, err := startGDD(&m.gdd, store, pm, mp, prefix, m.readOnly, log)
	if errors.Is(err, gdd.ErrNoDevice) {
		// No GPU driver: the mount serves on without placement (issue 6).
		log.Error("GPU direct placement disabled: no usable CUDA device", "socket", m.gdd.socket, "err", err)
		stopGDD, err = func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--gdd-socket: %w", err)
	}
	stopControl := startControl(reg, mp, log, controlRoute{"/hint", hint.Handler(pm, mp, prefix, func(format string, a ...any) {
		log.Info(fmt.Sprintf(format, a...))
	})})
	return func() {
		stopControl()
		stopGDD()
	}, nil
}

// announce tells the service manager (systemd Type=notify) and the log
// that the mount is live; the returned function tells the service manager
// it is stopping.
func announce(e Env, m *mountFlags, u S3URL, mp, endpoint string, budget int64, log *slog.Logger) (stopping func()) {
	notifySock := e.getenv("NOTIFY_SOCKET")
	if err := sdNotify(notifySock, fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=serving %s at %s", os.Getpid(), u, mp)); err != nil {
		log.Warn("telling the service manager the mount is ready failed", "err", err)
	}
	mode := "read-write"
	if m.readOnly {
		mode = "read-only"
	}
	// After ready: a background daemon's stderr is the log file (or
	// nothing) by now, so a successful mount prints nothing.
	log.Info("mounted", "source", u.String(), "mountpoint", mp, "mode", mode, "endpoint", endpoint,
		"max_memory", FormatSize(budget), "immutable", m.immutable, "pid", os.Getpid())
	return func() { _ = sdNotify(notifySock, "STOPPING=1") }
}
