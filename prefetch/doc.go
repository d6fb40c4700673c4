// Package prefetch turns positional reads of immutable object versions into
// as few, as large and as early range GETs as the access pattern allows,
// inside one global memory budget.
//
// # Concepts
//
// A [Manager] serves every open handle of a mount. [Manager.Open] returns one
// [Reader] per handle; [Reader.ReadAt] is safe for concurrent use, because the
// kernel issues parallel, slightly out-of-order reads on one file.
//
// Bytes live in extents: byte ranges of one object version (key, ETag) held
// in one buffer from an [Allocator]. An extent never crosses a part boundary
// (multiples of [Options.PartSize]); extents of a part never overlap. The
// extents form a block cache shared by all Readers, so many readers of a hot
// file share bytes, and concurrent misses on one range make one GET (the
// in-flight extent is registered before the GET starts and later readers wait
// on it).
//
// Each Reader tracks several streams (cursors, [Options.Streams]). A read that lands near a
// stream's cursor (up to 256 KiB behind or 512 KiB ahead, the disorder that
// Linux async readahead produces) continues it; a stream that starts at
// offset 0, or a random stream that reads on past its start by at least
// [Options.RandomGranularity] bytes, is sequential. A sequential
// stream keeps a read-ahead window filled: it starts at
// [Options.InitialWindow] (a small first GET, for a fast first byte) and
// doubles each time the reader consumes half of it, up to
// [Options.MaxWindow]; the window is fetched in pieces of at most one part by
// up to [Options.MaxConcurrency] concurrent GETs per Reader, ahead of the
// reader. Any other read is random: it fetches the request rounded out to
// [Options.RandomGranularity], never a window, so tail reads of zip, parquet
// or HDF5 files stay cheap. When one Reader has made 16 random reads of a
// file no larger than half of [Options.MaxMemory] (an LMDB, HDF5 or zip
// data file read by index), the file is also fetched whole, front to back,
// in part-sized read-ahead GETs within the budget and the concurrency cap,
// so that later random reads are served from memory; the bytes fetched
// then stay near the file's size. Objects of at most [Options.SmallFileSize]
// bytes are fetched whole on the first read, in one GET.
//
// # Memory budget
//
// [Options.MaxMemory] bounds every byte the package holds: extents being
// fetched and extents cached. A reader's own (demand) read may evict any
// cached extent no one is copying from and, if everything is in flight,
// waits until a fetch completes; it never waits on itself, so it cannot
// deadlock. Read-ahead and epoch pre-reading only evict extents that were
// already read, and are skipped when the budget is tight (or when a demand
// read is waiting). The cache is the package's own two-list LRU rather than
// ristretto: ristretto admits and evicts asynchronously and may drop a Set,
// which makes an exact byte budget and a safe Free of a buffer a reader may
// still be copying from hard to guarantee; here eviction, reference counts
// and the budget change under one mutex.
//
// Block buffers come from an [Allocator]. The default, [MmapAllocator],
// maps them outside the Go heap and unmaps them on eviction, so the
// process's resident memory follows the budget at once instead of waiting
// for the garbage collector (which lets a heap of Go slices grow to about
// twice the live bytes): reading 1 GiB through a 256 MiB budget peaks at
// about 275 MiB RSS with it, against about 520 MiB with Go slices and 330
// MiB with Go slices under debug.SetMemoryLimit. Blocks under
// [MmapOptions.MinSize] (64 KiB) still come from the heap, so a daemon
// should also call debug.SetMemoryLimit([MemoryLimitFor](budget)).
// A buffer passed to a [Reader.View] callback holds a reference on its
// extent and is not freed (unmapped) before the callback returns, even if
// the extent is evicted, invalidated or the Manager closed meanwhile.
//
// # Disk cache fill
//
// With [Options.DiskCache] set, a file that a handle has read whole, whose
// bytes are all still cached, is copied from memory to the disk cache in the
// background ([Options.DiskCacheConcurrency] copies at most; a file read
// whole while that many run is skipped; files over
// [Options.DiskCacheMaxFile] are never copied). The copy holds a reference
// on one extent at a time; if an extent is evicted before the copy reaches
// it, the Put fails and leaves nothing. [Manager.Invalidate] removes the key
// from the disk cache too, again after a copy that raced with it.
//
// # Epoch pre-reading
//
// A training epoch reads every file of a directory once, in a shuffled
// order. [Manager.NoteDir] tells the Manager a directory's files
// ([Manager.AddDirFiles] page by page while a large directory is still
// being listed, so that pre-reading need not wait for the end). When
// [Options.EpochTrigger] distinct files of one directory have been read whole
// in quick succession, a pre-reader fetches the directory's files that have
// not been read this epoch, whole, with [Options.EpochConcurrency] GETs in
// flight and within [Options.EpochMemory] bytes, so the next Open finds its
// bytes in memory. Pre-read files are held until read once; the pre-reader
// stops when no file of the directory was opened for [Options.EpochIdle],
// and a new epoch begins when every file was read (of a complete list) or a
// file is read again.
//
// A pre-read file that nobody opens in its epoch is waste. Each directory
// has a usefulness controller (useful.go) that counts pre-read files
// opened and not opened and learns, from each finished epoch, the share of
// the directory this node reads (a rank of DistributedSampler reads 1/N):
// when that share is below [FullShare], or with [Options.Sharded], a file
// is pre-read only while the expected wasted bytes stay under
// [WasteTarget] of the bytes read. The first epoch of a rank looks exactly
// like a single node reading everything, so without Sharded it is
// pre-read in full (and fetches about N times what it reads); the
// controller acts from the second epoch on.
//
// A training script that knows its sampler's order can say it:
// [Manager.Hint] takes the keys a reader (a stream, e.g. one rank) will
// open next, in order, and pre-reads exactly those, at most
// [Options.HintWindow] files ahead of its opens, and nothing speculative
// in the directories the hint covers. A hint is dropped when done, or as
// stale when the reader opens other files or its files again.
//
// # Locking
//
// Lock order: Reader.mu before Manager.mu before MmapAllocator.mu.
// Manager.mu guards the cache index, the LRU lists, the budget, the epoch
// state (usefulness controllers and hints included) and the disk-cache
// copies in progress; it is never held across a
// GET, a wait, a DiskCache call or an Allocator call other than Free.
package prefetch
