// Package faults holds os2g's fault-injection suite (issue 14): a real
// FUSE mount (fusefs over prefetch over objclient) talks to a real S3
// server (versitygw) through objtest.FaultProxy, which answers a share of
// the requests with 503 SlowDown or 500, cuts or stalls response bodies,
// drops replies after the server applied the request, or never answers.
//
// The tests, all in faults_test.go, check what an application sees:
//
//   - integrity: thousands of checksummed reads of a bucket, in the
//     default and the dataset (read-only, immutable) mode, at a few
//     percent of faults: no wrong byte and no error;
//   - the write-fault matrix: a fault on CreateMultipartUpload, UploadPart,
//     CompleteMultipartUpload or a single PutObject, once and for good;
//     close()'s answer must match what the server then holds;
//   - bounded waits: a frozen server (accepts, never answers) and a killed
//     one (connection refused) give EIO within the op timeout, with the
//     reason in the log, for reads, lookups and writes; after a part has
//     failed, close() answers at once;
//   - a web server that is not S3 is refused.
//
// The same integrity test is the soak (make soak, scripts/soak.sh): with
// OS2G_SOAK_READS and OS2G_SOAK_FILES set it runs 100,000 reads or more
// and prints reads, faults injected by kind, errors by kind and the
// slowest read.
//
// The package has no code of its own: it imports only what it tests.
package faults
