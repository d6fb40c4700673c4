package fusefs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

// Defaults applied by Mount to zero-valued Options fields.
const (
	// DefaultMetadataTTL is how long a listed or looked-up name, and its
	// attributes, are trusted before the store is asked again; it is also
	// the kernel's entry and attribute timeout.
	DefaultMetadataTTL = 60 * time.Second
	// DefaultNegativeTTL is how long "this name does not exist" is trusted;
	// it is also the kernel's negative entry timeout.
	DefaultNegativeTTL = 5 * time.Second
	// DefaultFileMode is the permission of every regular file.
	DefaultFileMode os.FileMode = 0o644
	// DefaultDirMode is the permission of every directory.
	DefaultDirMode os.FileMode = 0o755
	// DefaultFSName is the mount source shown in /proc/mounts and df.
	DefaultFSName = "os2g"
	// DefaultMaxBackground is the kernel's limit of asynchronous requests
	// (readahead) in flight to the daemon.
	DefaultMaxBackground = 128
	// DefaultKernelReadAheadKB is the kernel readahead per file, in KiB,
	// set on the mount's backing device after mounting (root only).
	DefaultKernelReadAheadKB = 4096
)

// immutableTTL stands in for "forever" in Immutable mode (about 100 years).
const immutableTTL = 100 * 365 * 24 * time.Hour

// Options configures a mount. Zero values take the documented defaults.
type Options struct {
	// Store is the bucket. Required.
	Store objclient.Store
	// Prefix is the key prefix mounted as the root: "" for the whole
	// bucket, otherwise a string ending in "/" (and not starting with "/").
	Prefix string
	// Prefetch, if set, serves every read (read-ahead, block cache, epoch
	// pre-reading) and is told about listings and overwrites; nil reads
	// with one Store.GetRange per kernel request (small objects whole).
	// The caller owns it and closes it after the mount is gone.
	Prefetch *prefetch.Manager
	// ReadOnly mounts with the "ro" flag; every mutation fails with EROFS.
	ReadOnly bool
	// UID and GID own every file and directory. Unless UIDSet (GIDSet)
	// is true, 0 means the mounting process's uid (gid).
	UID, GID uint32
	// UIDSet and GIDSet make UID and GID apply as given, 0 included
	// (root-owned files on a mount by another user).
	UIDSet, GIDSet bool
	// FileMode and DirMode are the permission bits (0 to 0777) of regular
	// files and directories; 0 means 0644 and 0755. Object metadata
	// (x-amz-meta-mode/uid/gid) is ignored.
	FileMode, DirMode os.FileMode
	// MetadataTTL bounds how stale a name or attribute may be (default
	// 60 s); also the kernel entry/attr timeout. Negative is invalid.
	MetadataTTL time.Duration
	// NegativeTTL bounds how long a missing name is cached (default 5 s).
	NegativeTTL time.Duration
	// Immutable declares that objects never change while mounted:
	// metadata is cached forever and the kernel page cache is kept across
	// opens.
	Immutable bool
	// AllowOther lets users other than the mounter access the mount
	// (needs user_allow_other in /etc/fuse.conf when not root).
	AllowOther bool
	// Debug logs every FUSE request (very verbose).
	Debug bool
	// Logger receives warnings (skipped keys, failed uploads). Nil
	// discards them.
	Logger *slog.Logger
	// PartSize is the first multipart part size of uploads in bytes
	// (0: the store's default). Parts grow with the object.
	PartSize int64
	// WriteWindow is how many of the last bytes written an upload handle
	// holds in memory (default DefaultWriteWindow, 8 MiB; at least 2 MiB):
	// writes and reads back within its newer half always succeed, writes
	// before it fail with EINVAL.
	WriteWindow int64
	// DiskCache, if set, is a local cache of whole object versions
	// (normally the *diskcache.Cache that Prefetch fills; pass nil, not a
	// nil pointer, when there is none). A read open of a version it holds
	// with the right size reads the cached file and never the store
	// (through the daemon, or by the kernel itself with Passthrough).
	// Every overwrite, delete and rename through the mount removes the key.
	// The caller owns it and closes it after the mount is gone.
	DiskCache DiskCache
	// Passthrough lets the kernel read files held whole in DiskCache
	// itself (FUSE passthrough, Linux 6.9+, root), so reads skip the
	// daemon. Off by default: the kernel refuses (EIO) to mix passthrough
	// and ordinary opens of one inode, and an open racing an overwrite's
	// asynchronous RELEASE can still hit that (docs/semantics.md).
	Passthrough bool
	// Registerer, if set, receives the FUSE operation metrics (requests
	// by operation and result, with latency histograms; metrics.go).
	Registerer prometheus.Registerer
	// FSName is the mount source shown in /proc/mounts (default "os2g").
	FSName string
	// MaxBackground is the kernel's limit of asynchronous requests
	// (default 128).
	MaxBackground int
	// KernelReadAheadKB is the per-file kernel readahead in KiB written to
	// /sys/class/bdi/<dev>/read_ahead_kb after mounting (default 4096;
	// negative leaves the kernel default of 128). Failure is logged only.
	KernelReadAheadKB int

	clock func() int64 // tests: replaces the wall clock of the caches (unix ns)
	// ioctlViaBridge (tests): leave FUSE IOCTL to go-fuse's node bridge
	// instead of ioctlFastFS, the baseline of BenchmarkIoctlRoundTrip.
	ioctlViaBridge bool
	// ptTest (tests): 1 withholds FUSE_PASSTHROUGH from the kernel; 2
	// also skips the probe, so handles are offered and refused.
	ptTest int
	// Listing tunables, set per mount by tests (zero: the defaults in
	// withDefaults): listWait bounds a lookup's wait for a background
	// listing to reach its name, refreshWait a readdir's wait for a
	// background listing of its directory to end; preListConcurrency
	// and preListEntries bound the background listings of one detected
	// walk (listings at a time on the mount, entries in all); listPageSize
	// is the LIST page size in keys.
	listWait, refreshWait time.Duration
	preListConcurrency    int
	preListEntries        int64
	listPageSize          int32
}

// Defaults of the listing tunables (Options' unexported fields).
const (
	// defaultListWait: see dirNode.awaitListingLocked.
	defaultListWait = 500 * time.Millisecond
	// defaultRefreshWait: see dirNode.awaitRefresh.
	defaultRefreshWait = time.Second
	// defaultPreListConcurrency: background listings of walks running at
	// a time on the mount.
	defaultPreListConcurrency = 8
	// defaultPreListEntries is the entry budget of the background
	// listings one detected walk starts (about ImageNet-1k's training
	// set): an accidental walk (ls a; ls b) lists at most this much that
	// nobody asked for.
	defaultPreListEntries int64 = 1 << 20
	// defaultListPageSize is the LIST page size (the S3 maximum).
	defaultListPageSize int32 = 1000
)

// errBadOptions wraps every Options validation failure.
var errBadOptions = errors.New("fusefs: invalid options")

// withDefaults validates o and returns a copy with defaults filled in.
func (o Options) withDefaults() (Options, error) {
	if o.Store == nil {
		return o, fmt.Errorf("%w: Store is nil", errBadOptions)
	}
	if o.Prefix != "" && (!strings.HasSuffix(o.Prefix, "/") || strings.HasPrefix(o.Prefix, "/")) {
		return o, fmt.Errorf("%w: Prefix %q must be empty or end in \"/\" (and not start with \"/\")", errBadOptions, o.Prefix)
	}
	if o.FileMode&^0o777 != 0 || o.DirMode&^0o777 != 0 {
		return o, fmt.Errorf("%w: FileMode %v / DirMode %v must be permission bits only", errBadOptions, o.FileMode, o.DirMode)
	}
	if o.MetadataTTL < 0 || o.NegativeTTL < 0 {
		return o, fmt.Errorf("%w: negative TTL", errBadOptions)
	}
	if o.PartSize < 0 {
		return o, fmt.Errorf("%w: negative PartSize", errBadOptions)
	}
	if o.WriteWindow != 0 && o.WriteWindow < 2<<20 {
		return o, fmt.Errorf("%w: WriteWindow %d below 2 MiB", errBadOptions, o.WriteWindow)
	}
	if o.WriteWindow == 0 {
		o.WriteWindow = DefaultWriteWindow
	}
	if o.MaxBackground < 0 || o.MaxBackground > 65535 {
		return o, fmt.Errorf("%w: MaxBackground %d out of range", errBadOptions, o.MaxBackground)
	}
	o.UID = ownerID(o.UID, o.UIDSet, os.Getuid())
	o.GID = ownerID(o.GID, o.GIDSet, os.Getgid())
	if o.FileMode == 0 {
		o.FileMode = DefaultFileMode
	}
	if o.DirMode == 0 {
		o.DirMode = DefaultDirMode
	}
	if o.MetadataTTL == 0 {
		o.MetadataTTL = DefaultMetadataTTL
	}
	if o.NegativeTTL == 0 {
		o.NegativeTTL = DefaultNegativeTTL
	}
	if o.Immutable {
		o.MetadataTTL = immutableTTL
		o.NegativeTTL = immutableTTL
	}
	if o.FSName == "" {
		o.FSName = DefaultFSName
	}
	if o.MaxBackground == 0 {
		o.MaxBackground = DefaultMaxBackground
	}
	if o.KernelReadAheadKB == 0 {
		o.KernelReadAheadKB = DefaultKernelReadAheadKB
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.listWait == 0 {
		o.listWait = defaultListWait
	}
	if o.refreshWait == 0 {
		o.refreshWait = defaultRefreshWait
	}
	if o.preListConcurrency == 0 {
		o.preListConcurrency = defaultPreListConcurrency
	}
	if o.preListEntries == 0 {
		o.preListEntries = defaultPreListEntries
	}
	if o.listPageSize == 0 {
		o.listPageSize = defaultListPageSize
	}
	return o, nil
}

// ownerID is the uid or gid to report: v if set or non-zero, else def
// (the mounting process's).
func ownerID(v uint32, set bool, def int) uint32 {
	if set || v != 0 {
		return v
	}
	return uint32(def)
}
