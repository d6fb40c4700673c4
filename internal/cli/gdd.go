package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/internal/gddpath"
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

func (g *gddFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&g.socket, "gdd-socket", "", "serve GPU direct placement on this Unix socket (mode 0600), e.g. /run/os2g/gdd.sock; clients: os2g.gdd in the python/ package")
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

// startGDD opens the device and serves placements on g.socket until the
// returned stop is called. With no socket it does nothing. stop is never nil.
// Placements read through pm when it is not nil (see gddpath.Resolver); saves
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
		if err := gdd.Serve(ctx, ln, gdd.ServeOptions{Placer: placer, Resolve: gddpath.Resolver(store, pm, mp, prefix),
			Create: gddpath.Creator(store, pm, mp, prefix, readOnly), Logger: log}); err != nil {
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
