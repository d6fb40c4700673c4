// Command os2g mounts an S3-compatible bucket as a POSIX directory for
// deep-learning training, uploads local trees into buckets, warms a mount's
// caches and prints a running daemon's statistics.
//
// Usage:
//
//	os2g mount [flags] s3://BUCKET[/PREFIX] MOUNTPOINT
//	os2g umount [-z] MOUNTPOINT
//	os2g upload [flags] LOCALDIR s3://BUCKET[/PREFIX]
//	os2g warm [--concurrency N] PATH...
//	os2g stats [--raw] MOUNTPOINT
//	os2g completion bash|zsh|fish
//	os2g version (or os2g --version)
//
// Run "os2g help COMMAND" or "os2g COMMAND --help" for each command's flags.
// The work is done by package github.com/os2g/os2g/internal/cli; this file
// only hands it the process environment.
package main

import (
	"context"
	"os"

	"github.com/os2g/os2g/internal/cli"
)

// version and commit are set at link time (the Makefile does):
//
//	go build -ldflags "-X main.version=v0.1.0 -X main.commit=$(git rev-parse HEAD)"
//
// Empty means "take it from the module's build information".
var version, commit string

func main() {
	os.Exit(cli.Main(context.Background(), cli.Env{
		Args:    os.Args[1:],
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Getenv:  os.Getenv,
		Version: version,
		Commit:  commit,
	}))
}
