package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/os2g/os2g/fusefs"
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
