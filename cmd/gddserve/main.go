// Command gddserve runs the GDD placement service on its own, without a
// FUSE mount: files are object keys of a bucket (-bucket) or paths under a
// local directory (-dir), and clients (the os2g.gdd Python module, python/os2g/gdd.py) ask for byte
// ranges of them to be placed into their GPU buffers.
//
//	gddserve -socket /run/os2g/gdd.sock -bucket data -endpoint http://127.0.0.1:7070
//	gddserve -socket /tmp/gdd.sock -dir /data -backend sim -shm-dir /dev/shm
//
// The protocol is in docs/gdd.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/internal/gddpath"
	"github.com/os2g/os2g/objclient"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gddserve:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		socket    = flag.String("socket", "/run/os2g/gdd.sock", "Unix socket path")
		backend   = flag.String("backend", "cuda", "device backend: cuda or sim")
		device    = flag.Int("device", 0, "CUDA device ordinal")
		shmDir    = flag.String("shm-dir", "/dev/shm", "sim backend: directory of destination files")
		dir       = flag.String("dir", "", "serve files under this local directory")
		bucket    = flag.String("bucket", "", "serve object keys of this bucket")
		prefix    = flag.String("prefix", "", "key prefix prepended to request paths (ending in /)")
		endpoint  = flag.String("endpoint", "", "S3 endpoint URL")
		region    = flag.String("region", "", "S3 region")
		pathStyle = flag.Bool("path-style", false, "path-style bucket addressing")
		checksum  = flag.Bool("checksum-when-required", false, "SDK checksums only when required (S3 clones)")
		blockSize = flag.Int("block-size", 8<<20, "pinned block size in bytes")
		blocks    = flag.Int("blocks", 4, "pinned blocks")
		streams   = flag.Int("streams", 2, "copy streams")
		verbose   = flag.Bool("v", false, "debug logging")
	)
	flag.Parse()
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if (*dir == "") == (*bucket == "") {
		return errors.New("give exactly one of -dir and -bucket")
	}
	var resolve func(ctx context.Context, path string) (gdd.Source, error)
	var create func(ctx context.Context, path string) (gdd.Upload, error)
	if *dir != "" {
		resolve = dirResolver(*dir)
		root, err := os.OpenRoot(*dir)
		if err != nil {
			return err
		}
		defer root.Close()
		create = gdd.DirCreator(root)
	} else {
		store, err := objclient.New(ctx, objclient.Options{
			Bucket: *bucket, Endpoint: *endpoint, Region: *region, ForcePathStyle: *pathStyle,
			ChecksumWhenRequired: *checksum, Logger: log,
		})
		if err != nil {
			return err
		}
		// The mount's resolver, with "/" standing for the mount point.
		resolve = gddpath.Resolver(store, nil, "/", *prefix)
		create = gddpath.Creator(store, nil, "/", *prefix, false)
	}

	var dev gdd.Device
	switch *backend {
	case "cuda":
		d, err := gdd.OpenCUDA(gdd.CUDAOptions{Ordinal: *device, Logger: log})
		if err != nil {
			return err
		}
		defer d.Close()
		dev = d
	case "sim":
		d, err := gdd.NewSim(gdd.SimOptions{Ordinal: *device, ShmDir: *shmDir})
		if err != nil {
			return err
		}
		dev = d
	default:
		return fmt.Errorf("unknown -backend %q (cuda or sim)", *backend)
	}
	p, err := gdd.NewPlacer(gdd.PlacerOptions{Device: dev, BlockSize: *blockSize, Blocks: *blocks, Streams: *streams, Logger: log})
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := gdd.Listen(*socket, 0)
	if err != nil {
		return err
	}
	log.Info("gddserve: listening", "socket", *socket, "backend", dev.Kind(), "device", dev.Ordinal())
	return gdd.Serve(ctx, ln, gdd.ServeOptions{Placer: p, Resolve: resolve, Create: create, Logger: log})
}

// dirResolver serves regular files under root; paths may not leave it.
func dirResolver(root string) func(ctx context.Context, path string) (gdd.Source, error) {
	return func(ctx context.Context, path string) (gdd.Source, error) {
		rel := filepath.Clean("/" + path)[1:]
		if rel == "" {
			return nil, fmt.Errorf("%w: %q is the root", gdd.ErrNotFound, path)
		}
		f, err := os.OpenInRoot(root, rel)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("%w: %s is not a regular file", fs.ErrNotExist, path)
		}
		return &fileSource{Source: gdd.ReaderAtSource(f, fi.Size()), f: f}, nil
	}
}

// fileSource closes its file when the server is done with it.
type fileSource struct {
	gdd.Source
	f *os.File
}

var _ gdd.Source = (*fileSource)(nil)

func (s *fileSource) Close() error { return s.f.Close() }
