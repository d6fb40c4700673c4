package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/prefetch"
)

// gddFlags are the flags of the GPU direct placement service.
type gddFlags struct {
	socket  string // Unix socket path; "" disables the service
	device  string // "cuda" or "sim"
	ordinal int    // CUDA device index
	simDir  string // shared-memory directory of the sim device
	blocks  int    // pinned blocks in the pool
}

func (g *gddFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.socket, "gdd-socket", "", "serve GPU direct placement on this Unix socket (mode 0600), e.g. /run/os2g/gdd.sock (the Python client's default; its directory is created); client: python/os2g (os2g.gdd)")
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
// relative to the mount's root (that is, a key under prefix). With pm
// non-nil the object is read through the mount's prefetch cache (block
// cache, budget, read-ahead, the version pinned by ETag), so a file read
// through the mount and then placed, or placed twice, is fetched once; with
// pm nil it is read by ranged GETs straight into the pinned blocks.
func gddResolver(store objclient.Store, pm *prefetch.Manager, mp, prefix string) func(ctx context.Context, path string) (gdd.Source, error) {
	return func(ctx context.Context, p string) (gdd.Source, error) {
		key, err := gddKey(p, mp, prefix)
		if err != nil {
			return nil, err
		}
		info, err := store.Stat(ctx, key)
		if err != nil {
			return nil, err
		}
		if pm != nil {
			return &cachedSource{r: pm.Open(prefetch.File{Key: info.Key, Size: info.Size, ETag: info.ETag})}, nil
		}
		return gdd.KeySource(store, info.Key, info.ETag, info.Size), nil
	}
}

// gddCreator starts the upload of a save request's path (mapped to a key
// as gddResolver maps it). After a commit, cached bytes of the key's older
// versions are dropped from pm. The mount's directory listing shows the
// new object once its metadata TTL has passed.
func gddCreator(store objclient.Store, pm *prefetch.Manager, mp, prefix string, readOnly bool) func(ctx context.Context, path string) (objclient.Writer, error) {
	return func(ctx context.Context, p string) (objclient.Writer, error) {
		if readOnly {
			return nil, fmt.Errorf("%w: cannot save %s: the mount %s is read-only", gdd.ErrInvalid, p, mp)
		}
		key, err := gddKey(p, mp, prefix)
		if err != nil {
			return nil, err
		}
		w, err := store.Put(ctx, key, objclient.PutOptions{})
		if err != nil {
			return nil, err
		}
		return &invalidatingWriter{Writer: w, pm: pm, key: key}, nil
	}
}

// invalidatingWriter drops pm's cached bytes of key once the upload commits.
type invalidatingWriter struct {
	objclient.Writer
	pm  *prefetch.Manager
	key string
}

func (w *invalidatingWriter) Commit(ctx context.Context) (objclient.ObjectInfo, error) {
	info, err := w.Writer.Commit(ctx)
	if err == nil && w.pm != nil {
		w.pm.Invalidate(w.key)
	}
	return info, err
}

// cachedSource is a gdd.Source reading through a prefetch.Reader; the
// server closes it after the request.
type cachedSource struct{ r *prefetch.Reader }

var (
	_ gdd.Source = (*cachedSource)(nil)
	_ io.Closer  = (*cachedSource)(nil)
)

func (c *cachedSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return c.r.ReadAt(ctx, p, off)
}

func (c *cachedSource) Size() int64 { return c.r.File().Size }

func (c *cachedSource) Close() error { return c.r.Close() }

// gddKey maps a request path (absolute under mp, or relative to the
// mount's root) to its object key. gdd.ErrNotFound for a path outside.
func gddKey(p, mp, prefix string) (string, error) {
	rel := p
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(mp, filepath.Clean(p))
		if err != nil || r == "." || r == ".." || strings.HasPrefix(r, "../") {
			return "", fmt.Errorf("%s is not a file under the mount %s: %w", p, mp, gdd.ErrNotFound)
		}
		rel = r
	}
	rel = filepath.ToSlash(filepath.Clean(rel))
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("%q does not name a file under the mount: %w", p, gdd.ErrNotFound)
	}
	return prefix + rel, nil
}

// startGDD opens the device and serves placements on g.socket until the
// returned stop is called. With no socket it does nothing. stop is never nil.
// Placements read through pm when it is not nil (see gddResolver); saves
// are refused when readOnly.
func startGDD(g *gddFlags, store objclient.Store, pm *prefetch.Manager, mp, prefix string, readOnly bool, log *slog.Logger) (stop func(), err error) {
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
		if err := gdd.Serve(ctx, ln, gdd.ServeOptions{Placer: placer, Resolve: gddResolver(store, pm, mp, prefix),
			Create: gddCreator(store, pm, mp, prefix, readOnly), Logger: log}); err != nil {
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
