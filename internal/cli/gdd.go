package cli

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/objclient"
)

// gddFlags are the flags of the GPU direct placement service.
type gddFlags struct {
	socket  string // Unix socket path; "" disables the service
	device  string // "cuda" or "sim"
	ordinal int    // CUDA device index
	simDir  string // shared-memory directory of the sim device
	blocks  int    // pinned blocks in the pool
}

func (g *gddFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&g.socket, "gdd-socket", "", "serve GPU direct placement on this Unix socket (mode 0600), e.g. /run/os2g/gdd.sock; clients: gdd/python/os2g_gdd.py")
	fs.StringVar(&g.device, "gdd-device", "cuda", `placement device: "cuda" (driver loaded at run time) or "sim" (host memory standing in for the GPU)`)
	fs.IntVar(&g.ordinal, "gdd-cuda-device", 0, "CUDA device ordinal for --gdd-device=cuda")
	fs.StringVar(&g.simDir, "gdd-sim-dir", "/dev/shm", "shared-memory directory whose files are destinations for --gdd-device=sim")
	fs.IntVar(&g.blocks, "gdd-blocks", 0, "pinned 8 MiB blocks in the placement pool (default 4)")
}

func (g *gddFlags) validate() error {
	if g.socket == "" {
		return nil
	}
	if g.device != "cuda" && g.device != "sim" {
		return usageErr(`--gdd-device must be "cuda" or "sim", not %q`, g.device)
	}
	if g.blocks < 0 || g.ordinal < 0 {
		return usageErr("--gdd-blocks and --gdd-cuda-device must not be negative")
	}
	return nil
}

// gddResolver maps a placement request's path to an object of store: an
// absolute path must lie under the mount point mp; a relative one is taken
// relative to the mount's root (that is, a key under prefix).
func gddResolver(store objclient.Store, mp, prefix string) func(ctx context.Context, path string) (gdd.Source, error) {
	return func(ctx context.Context, p string) (gdd.Source, error) {
		rel := p
		if filepath.IsAbs(p) {
			r, err := filepath.Rel(mp, filepath.Clean(p))
			if err != nil || r == "." || r == ".." || strings.HasPrefix(r, "../") {
				return nil, fmt.Errorf("%s is not a file under the mount %s: %w", p, mp, gdd.ErrNotFound)
			}
			rel = r
		}
		rel = filepath.ToSlash(filepath.Clean(rel))
		if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || strings.HasPrefix(rel, "/") {
			return nil, fmt.Errorf("%q does not name a file under the mount: %w", p, gdd.ErrNotFound)
		}
		info, err := store.Stat(ctx, prefix+rel)
		if err != nil {
			return nil, err
		}
		return gdd.KeySource(store, info.Key, info.ETag, info.Size), nil
	}
}

// startGDD opens the device and serves placements on g.socket until the
// returned stop is called. With no socket it does nothing. stop is never nil.
func startGDD(g *gddFlags, store objclient.Store, mp, prefix string, log *slog.Logger) (stop func(), err error) {
	if g.socket == "" {
		return func() {}, nil
	}
	var dev gdd.Device
	switch g.device {
	case "sim":
		dev, err = gdd.NewSim(gdd.SimOptions{ShmDir: g.simDir})
	default:
		dev, err = gdd.OpenCUDA(gdd.CUDAOptions{Ordinal: g.ordinal, Logger: log})
	}
	if err != nil {
		return nil, fmt.Errorf("opening the %s device: %w", g.device, err)
	}
	placer, err := gdd.NewPlacer(gdd.PlacerOptions{Device: dev, Blocks: g.blocks, Logger: log})
	if err != nil {
		dev.Close()
		return nil, err
	}
	ln, err := gdd.Listen(g.socket, 0o600)
	if err != nil {
		placer.Close()
		dev.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := gdd.Serve(ctx, ln, gdd.ServeOptions{Placer: placer, Resolve: gddResolver(store, mp, prefix), Logger: log}); err != nil {
			log.Error("placement service stopped", "err", err)
		}
	}()
	log.Info("serving GPU direct placement", "socket", g.socket, "device", g.device)
	return func() {
		cancel()
		<-done
		placer.Close()
		dev.Close()
	}, nil
}
