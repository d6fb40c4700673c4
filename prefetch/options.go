package prefetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/os2g/os2g/objclient"
)

// Errors returned by this package (wrapped with %w).
var (
	// ErrClosed: the Reader or its Manager was closed.
	ErrClosed = errors.New("prefetch: closed")
	// ErrInvalidOptions: Options failed validation in New.
	ErrInvalidOptions = errors.New("prefetch: invalid options")
	// ErrInvalidOffset: ReadAt was called with a negative offset.
	ErrInvalidOffset = errors.New("prefetch: negative offset")
	// ErrShortObject: the store returned fewer bytes than File.Size promised
	// (the object is shorter than its listing said).
	ErrShortObject = errors.New("prefetch: object shorter than its size")
)

// Getter reads object bytes [off, off+len(buf)) into buf and returns the
// count, short only at the end of the object. With ifMatch != "" it fails
// (objclient.ErrChanged) when the object's ETag differs. objclient.Store
// implements it.
type Getter interface {
	GetRange(ctx context.Context, key string, off int64, buf []byte, ifMatch string) (int, error)
}

// Allocator provides block buffers. Alloc(n) returns a slice of length n
// (nil or shorter on failure); Free gives back a slice Alloc returned, once.
// Free may be called with the Manager's lock held, so it must be fast and
// must not call into the Manager. Both must be safe for concurrent use.
type Allocator interface {
	Alloc(n int) []byte
	Free(b []byte)
}

// objclient.Store is a Getter.
var _ Getter = objclient.Store(nil)

// heapAlloc is an Allocator of plain Go slices left to the GC (used by
// tests and measurements).
type heapAlloc struct{}

var _ Allocator = heapAlloc{}

func (heapAlloc) Alloc(n int) []byte { return make([]byte, n) }
func (heapAlloc) Free([]byte)        {}

// File names one immutable object version.
type File struct {
	Key  string
	Size int64 // bytes
	ETag string
}

// Options configures a Manager. Zero values take the defaults noted; negative
// values are errors.
type Options struct {
	// Getter fetches bytes (required).
	Getter Getter
	// MaxMemory bounds all bytes held: extents in flight and cached
	// (required, bytes, at least PartSize).
	MaxMemory int64
	// PartSize is the block size and alignment in bytes (default 8 MiB). No
	// GET crosses a part boundary.
	PartSize int64
	// InitialWindow is a new sequential stream's read-ahead window in bytes
	// (default 1 MiB, at most PartSize); it is also the size of the first GET.
	InitialWindow int64
	// MaxWindow caps the read-ahead window in bytes (default 256 MiB). The
	// effective cap is min(MaxWindow, MaxMemory/4), so one stream cannot
	// take the whole budget.
	MaxWindow int64
	// SmallFileSize: objects of at most this many bytes are fetched whole on
	// first read, in one GET (default 2 MiB, at most PartSize).
	SmallFileSize int64
	// MaxConcurrency caps the read-ahead GETs in flight per Reader (default 16).
	// Demand reads are never held back by it.
	MaxConcurrency int
	// RandomGranularity: a random read fetches its range rounded out to
	// multiples of this many bytes (default 64 KiB, at most PartSize).
	RandomGranularity int64
	// Tolerance: how far behind (Back) and ahead (Forward) of a stream's
	// cursor a read still continues the stream, in bytes (defaults 256 KiB
	// and 512 KiB).
	ToleranceBack, ToleranceForward int64
	// Streams is the number of cursors tracked per Reader (default 8).
	Streams int

	// EpochTrigger: distinct files of one directory read whole in quick
	// succession before pre-reading starts (default 8; -1 disables
	// epoch pre-reading).
	EpochTrigger int
	// EpochIdle: pre-reading of a directory stops when none of its files
	// was opened for this long (default 2 s); it is also the "quick
	// succession" of EpochTrigger.
	EpochIdle time.Duration
	// EpochConcurrency caps pre-reading GETs in flight (default 32).
	EpochConcurrency int
	// EpochMemory caps bytes held by pre-read files not yet read (default
	// MaxMemory/4).
	EpochMemory int64
	// EpochFileSize: only files of at most this many bytes are pre-read
	// (default PartSize, at most PartSize).
	EpochFileSize int64
	// Sharded says this node reads only a share of each directory (a rank
	// of DistributedSampler; "os2g mount --sharded"): pre-reading then
	// never assumes that every file will be read, not even in the first
	// epoch, and follows the usefulness controller (useful.go) from the
	// start.
	Sharded bool
	// HintWindow: an exact-order hint (Manager.Hint) is pre-read at most
	// this many files ahead of the reader (default DefaultHintWindow), and
	// within EpochMemory bytes.
	HintWindow int

	// Logger receives debug and warning lines (nil: discard).
	Logger *slog.Logger
	// Registerer receives the package's metrics (nil: none).
	Registerer prometheus.Registerer
	// DiskCache, when set, receives a copy of every file of at most
	// DiskCacheMaxFile bytes that a handle read whole while all its bytes
	// were still cached, in the background; Invalidate also removes the
	// key from it (nil: no disk cache; pass a nil interface, not a nil
	// *diskcache.Cache).
	DiskCache DiskCache
	// DiskCacheMaxFile: larger files are not copied to DiskCache, in bytes
	// (default 64 MiB).
	DiskCacheMaxFile int64
	// DiskCacheConcurrency caps copies to DiskCache in progress; a file
	// read whole while that many run is not copied (default 2).
	DiskCacheConcurrency int

	// Alloc provides block buffers (nil: an MmapAllocator with default
	// MmapOptions, owned and closed by the Manager, so freed blocks go back
	// to the kernel at once; Go slices where mmap is not supported).
	Alloc Allocator
}

// Defaults, in bytes unless noted.
const (
	DefaultPartSize          = 8 << 20
	DefaultInitialWindow     = 1 << 20
	DefaultMaxWindow         = 256 << 20
	DefaultSmallFileSize     = 2 << 20
	DefaultMaxConcurrency    = 16
	DefaultRandomGranularity = 64 << 10
	DefaultToleranceBack     = 256 << 10
	DefaultToleranceForward  = 512 << 10
	DefaultStreams           = 8
	DefaultEpochTrigger      = 8
	DefaultEpochIdle         = 2 * time.Second
	DefaultEpochConcurrency  = 32
)

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, a...)...)
}

// withDefaults validates o and returns it with defaults filled in.
func (o Options) withDefaults() (Options, error) {
	if o.Getter == nil {
		return o, invalid("Getter is required")
	}
	if o.MaxMemory <= 0 {
		return o, invalid("MaxMemory must be > 0, got %d", o.MaxMemory)
	}
	for name, v := range map[string]int64{
		"PartSize": o.PartSize, "InitialWindow": o.InitialWindow, "MaxWindow": o.MaxWindow,
		"SmallFileSize": o.SmallFileSize, "RandomGranularity": o.RandomGranularity,
		"ToleranceBack": o.ToleranceBack, "ToleranceForward": o.ToleranceForward,
		"EpochMemory": o.EpochMemory, "EpochFileSize": o.EpochFileSize,
		"MaxConcurrency": int64(o.MaxConcurrency), "Streams": int64(o.Streams),
		"EpochConcurrency": int64(o.EpochConcurrency), "HintWindow": int64(o.HintWindow), "EpochIdle": int64(o.EpochIdle),
		"DiskCacheMaxFile": o.DiskCacheMaxFile, "DiskCacheConcurrency": int64(o.DiskCacheConcurrency),
	} {
		if v < 0 {
			return o, invalid("%s must not be negative, got %d", name, v)
		}
	}
	if o.EpochTrigger < -1 {
		return o, invalid("EpochTrigger must be >= -1, got %d", o.EpochTrigger)
	}
	def := func(p *int64, d int64) {
		if *p == 0 {
			*p = d
		}
	}
	defi := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	def(&o.PartSize, DefaultPartSize)
	def(&o.InitialWindow, min(DefaultInitialWindow, o.PartSize))
	def(&o.MaxWindow, DefaultMaxWindow)
	def(&o.SmallFileSize, min(DefaultSmallFileSize, o.PartSize))
	def(&o.RandomGranularity, min(DefaultRandomGranularity, o.PartSize))
	def(&o.ToleranceBack, DefaultToleranceBack)
	def(&o.ToleranceForward, DefaultToleranceForward)
	def(&o.EpochMemory, o.MaxMemory/4)
	def(&o.EpochFileSize, o.PartSize)
	defi(&o.MaxConcurrency, DefaultMaxConcurrency)
	defi(&o.Streams, DefaultStreams)
	defi(&o.EpochTrigger, DefaultEpochTrigger)
	defi(&o.EpochConcurrency, DefaultEpochConcurrency)
	defi(&o.HintWindow, DefaultHintWindow)
	def(&o.DiskCacheMaxFile, DefaultDiskCacheMaxFile)
	defi(&o.DiskCacheConcurrency, DefaultDiskCacheConcurrency)
	if o.EpochIdle == 0 {
		o.EpochIdle = DefaultEpochIdle
	}
	if o.MaxMemory < o.PartSize {
		return o, invalid("MaxMemory (%d) must be at least PartSize (%d)", o.MaxMemory, o.PartSize)
	}
	if o.InitialWindow > o.PartSize {
		return o, invalid("InitialWindow (%d) must be at most PartSize (%d)", o.InitialWindow, o.PartSize)
	}
	if o.MaxWindow < o.InitialWindow {
		return o, invalid("MaxWindow (%d) must be at least InitialWindow (%d)", o.MaxWindow, o.InitialWindow)
	}
	if o.SmallFileSize > o.PartSize {
		return o, invalid("SmallFileSize (%d) must be at most PartSize (%d)", o.SmallFileSize, o.PartSize)
	}
	if o.RandomGranularity > o.PartSize {
		return o, invalid("RandomGranularity (%d) must be at most PartSize (%d)", o.RandomGranularity, o.PartSize)
	}
	if o.EpochFileSize > o.PartSize {
		return o, invalid("EpochFileSize (%d) must be at most PartSize (%d)", o.EpochFileSize, o.PartSize)
	}
	if o.EpochMemory > o.MaxMemory {
		return o, invalid("EpochMemory (%d) must be at most MaxMemory (%d)", o.EpochMemory, o.MaxMemory)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// effectiveMaxWindow is the window cap after the budget share rule.
func (o *Options) effectiveMaxWindow() int64 {
	w := min(o.MaxWindow, o.MaxMemory/4)
	return max(w, o.InitialWindow)
}
