// Package fusefs is the FUSE front end of os2g: a go-fuse v2 (fs API) node
// tree that shows the keys of an S3 bucket, under a key prefix, as a POSIX
// directory tree, for reading datasets and writing checkpoints.
//
// # Names
//
// A key maps to a path and a common prefix to a directory: key "a/b/c"
// is the file c in directory a/b, whether or not marker objects "a/" or
// "a/b/" exist. A marker "dir/" (any content type) and a zero-byte "dir"
// with Content-Type application/x-directory are directories; the marker
// never appears as an entry. A directory shadows a file of the same name
// (key "a" beside "a/b": a is a directory; a warning is logged when the
// hidden object has bytes). Keys with a component that cannot be a POSIX
// name (empty, ".", "..", over 255 bytes, NUL) are skipped with a warning,
// never aliased. docs/semantics.md lists every rule and errno; the
// FUSE-free rules (validation, key<->name mapping, listing pages to
// entries, the lookup probe, the marker check) are package namespace.
//
// # Metadata and caching
//
// Nodes are built lazily by Lookup and Readdir. Readdir streams LIST pages
// (1000 keys each) and records every entry's size, ETag and mtime in the
// directory, so the lookups and READDIRPLUS entries that follow (ls -l,
// os.scandir + stat) need no HEAD. A lookup without a fresh listing costs
// one delimiter LIST of Prefix=dir/name (rarely two); after
// coldListMisses (8) such misses within MetadataTTL a directory is listed
// once in the background as readdir would (prefetch NoteDir included), so
// later lookups need none. Positive facts are trusted for
// Options.MetadataTTL, negative ones for NegativeTTL; these
// are the kernel's entry, attribute and negative timeouts too, and are
// infinite with Options.Immutable.
//
// # Reads
//
// Open pins the object version (ETag, size) of the node: reads use
// If-Match, so an object replaced under an open file gives ESTALE, never
// a mix of versions. The kernel page cache is kept across opens
// (FOPEN_KEEP_CACHE) while the ETag is unchanged; mmap works (no direct
// I/O on read handles). Reads go through a prefetch.Manager when one is
// configured, else straight to Store.GetRange. A version held whole in
// Options.DiskCache is read from the cached file instead, by the kernel
// itself (FUSE passthrough, diskread.go) where it allows.
//
// # Writes
//
// A file opened for writing (created, or opened with O_TRUNC) streams its
// bytes, in order, into one Store.Put upload; the owner's close (FLUSH)
// or fsync commits it and returns its real result. Until then the old
// object, if any, stays readable. Write handles use direct I/O so the
// page cache never holds bytes of two versions. The window of bytes a
// writer may still change (seek-back, truncate, zero-fill) is
// upload.Window; write.go is its kernel-facing handle. See
// docs/semantics.md for seek-back, append, truncate, rename and delete.
//
// # Errors
//
// errno.go is the only place where errors become syscall.Errno.
//
// # Locking
//
// Lock order: writeHandle.mu or dirHandle.mu first, then fileNode.mu or
// dirNode.mu, each taken alone (never one while holding the other).
// fileNode.mu and dirNode.mu are never held across a store request;
// writeHandle.mu is (an upload is sequential by nature), as are
// dirHandle.mu (one listing page at a time per open directory) and
// directReader.mu (one whole-object GET per handle).
package fusefs
