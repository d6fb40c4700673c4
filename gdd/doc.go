// Package gdd places file bytes directly into GPU memory ("GPU direct
// placement").
//
// The data path has three parts:
//
//   - A [Device]: page-locked ("pinned") host memory, asynchronous
//     host-to-device copies on streams, events, and device buffers, either
//     allocated locally or opened from a CUDA IPC memory handle exported by
//     another process. Two backends exist: [OpenCUDA] drives the CUDA driver
//     API (libcuda.so.1) loaded at run time with purego, so the package
//     builds without cgo and without the CUDA toolkit and reports
//     [ErrNoDevice] where no driver is installed; [NewSim] stands in host
//     memory for device memory and counts every copy and every byte that
//     crosses host memory ([SimStats]), so tests can prove the path makes no
//     extra copies.
//
//   - A [Placer]: reads a [Source] (an object key through [KeySource], or any
//     ReadAt-style reader such as a prefetch.Reader) straight into blocks of
//     a bounded pinned pool, computes CRC32C (Castagnoli) on each pinned
//     block in file order, and issues the asynchronous copy of each block to
//     the destination. Blocks are fetched concurrently and copied on several
//     streams in turn, so fetching block k+1 overlaps copying block k; a
//     block returns to the pool only once its copy has completed (an event
//     recorded after the copy), so a block is never overwritten while the
//     device still reads it. The bytes cross host memory exactly once: the
//     source writes them into the pinned block, the device DMA reads them
//     from there.
//
//   - A placement service ([Serve], [Listen]): a Unix socket on which a
//     client (the Python package python/os2g, module os2g.gdd, or [Client]) asks
//     for "bytes [off, off+n) of file F into destination D", where D is a
//     CUDA IPC handle plus offset (or, for the simulated device, the name of
//     a shared-memory file). Replies carry the byte count and the CRC32C of
//     the bytes placed. The wire format, version 1, is specified in
//     docs/gdd.md: each message is a 4-byte big-endian length followed by a
//     JSON object, so a client needs nothing beyond a language's standard
//     library.
//
// Lock order: Server.connState.wmu (reply writes) and handleCache.mu are
// leaves; no lock is held across a Device call except the CUDA backend's
// per-call OS-thread lock.
package gdd
