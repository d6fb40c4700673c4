// Package diskcache is an optional local disk cache of whole objects, for
// os2g's --cache-dir and --cache-size (DESIGN "prefetch": a fully cached
// file can be served by the kernel through FUSE passthrough, Linux 6.9+, so
// the daemon does no per-read work).
//
// # Entries
//
// An entry is the complete content of one object version, identified by
// (object key, ETag). A new ETag is a new entry: a cached file is never
// served for a different version of its key. Putting a key with a new ETag
// drops the entries of its older ETags.
//
// # On-disk layout
//
// Under Dir (created with mode 0700):
//
//	lock                     flock(2)ed by the one Cache using Dir
//	tmp/                     files being written; emptied by New
//	ab/<id>                  content, byte 0 of the object at offset 0
//	ab/<id>.meta             sidecar: key, ETag, size, CRC32C of the content
//
// where id is the lower-case hex SHA-256 of key + "\x00" + ETag and "ab"
// its first two characters (a fan-out so no directory holds millions of
// names). Content files hold nothing but the object's bytes, so a
// read-only descriptor from Open can be handed to the kernel as a FUSE
// passthrough backing file, or read with pread at object offsets.
//
// The sidecar is binary: the magic "os2gdc1\n", then big-endian u32
// length + key, u32 length + ETag, u64 size, u32 CRC32C (Castagnoli) of the
// content, and a final u32 CRC32C of all the sidecar bytes before it.
//
// # Writing
//
// Put reserves the entry's size against MaxBytes first (evicting least
// recently used entries to make room), so the bytes on disk, written or
// being written, never exceed MaxBytes. It writes the content to a
// temporary file under tmp/, computing its CRC32C on the way, checks that
// the reader gave exactly size bytes, writes the sidecar the same way, and
// renames the content and then the sidecar into place. An entry exists only
// once both are in place; a failure at any step (short or long data, read
// or write error) removes the temporary files and leaves no entry. Nothing
// is fsynced: the cache is rebuilt from the bucket, not a store of record,
// and a crash is handled by the checks below.
//
// # Starting and checking
//
// New indexes the entries of a previous run. A sidecar that does not parse
// or whose checksum fails, a sidecar whose name is not the id of its key
// and ETag, a content file without a sidecar (or the other way round), and
// a content file whose size differs from its sidecar's are deleted. The
// content's CRC32C is checked in New when Options.VerifyOnStart is set
// (reading every cached byte); otherwise it is checked on the first Open of
// the entry, before a descriptor is handed out. Either way a corrupted
// entry (a flipped bit, a torn write after a power cut) is dropped and
// never served. Entries written by this process are trusted: their CRC32C
// was computed on the bytes written.
//
// # Eviction
//
// Entries are evicted least recently used first (Open and Put count as a
// use) to keep the content bytes at most MaxBytes. After a restart the
// recency order is the order the sidecars were last written. An entry larger
// than MaxBytes is refused with ErrTooLarge. Sidecars (about 100 bytes) and
// file-system block rounding are not counted against MaxBytes.
//
// A descriptor returned by Open stays valid after its entry is evicted or
// removed: the file is unlinked, and the kernel frees its blocks when the
// last descriptor is closed. Those bytes are not counted against MaxBytes
// while the descriptor is open.
//
// # Concurrency
//
// A Cache is safe for concurrent use. One mutex guards the index; file
// content is written, read and checked outside it, and only the renames
// that publish an entry and the unlinks that retire one happen under it, so
// a retiring unlink can never remove a file a concurrent Put just
// published. One Cache per directory: a second New on a Dir in use fails
// with ErrLocked.
package diskcache
