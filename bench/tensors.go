package main

// The tensors workload (issue 17): load and save a generated safetensors
// checkpoint through gdd and through the plain path (open/read +
// torch.frombuffer(...).to(device) to load; .cpu() + write to save), with
// the host idle and with a CPU burner on every host core, reporting GiB/s
// and the trainer process's CPU seconds per GiB. It runs only when asked
// for (--workloads tensors), apart from the mount workloads: the daemon is
// an in-process placement service on the simulated device (its device
// memory is a shared-memory file) serving a local directory, so the
// figures compare the two paths through host memory, not storage, and say
// nothing about a real GPU.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/os2g/os2g/gdd"
	"github.com/os2g/os2g/gdd/safetensors"
)

// burnEnv, when set, turns this program into one CPU burner (a busy loop
// until killed): the busy host's load.
const burnEnv = "OS2G_BENCH_BURN"

// maybeRunTensors runs the tensors workload when args ask for it
// (--workloads tensors); ok is false otherwise.
func maybeRunTensors(args []string) (code int, ok bool) {
	if os.Getenv(burnEnv) != "" {
		for x := uint64(1); ; x = x*6364136223846793005 + 1 {
			_ = x
		}
	}
	for i, a := range args {
		if a == "--workloads=tensors" || a == "-workloads=tensors" ||
			((a == "--workloads" || a == "-workloads") && i+1 < len(args) && args[i+1] == "tensors") {
			return runTensors(args), true
		}
	}
	return 0, false
}

type tensorsConfig struct {
	size       int64 // checkpoint bytes
	runs       int
	workDir    string
	resultsDir string
	python     string
	shmDir     string
	burners    int
}

func parseTensorsConfig(args []string) (*tensorsConfig, error) {
	fs := flag.NewFlagSet("bench --workloads tensors", flag.ContinueOnError)
	c := &tensorsConfig{}
	fs.String("workloads", "tensors", "tensors (this workload runs alone)")
	sizeMiB := fs.Int64("size-mib", 2048, "checkpoint size in MiB (multi-GiB by default; --quick: 256)")
	quick := fs.Bool("quick", false, "a 256 MiB checkpoint, one run")
	fs.IntVar(&c.runs, "runs", 3, "runs of each case; the median is reported")
	fs.StringVar(&c.workDir, "work-dir", "", "scratch directory (default: a temporary one, removed)")
	fs.StringVar(&c.resultsDir, "results-dir", "bench/results", "where tensors-latest.md goes")
	fs.StringVar(&c.python, "python", "/usr/bin/python3", "python with torch")
	fs.StringVar(&c.shmDir, "shm-dir", "/dev/shm", "the simulated device's shared-memory directory")
	fs.IntVar(&c.burners, "burners", runtime.NumCPU(), "CPU burners for the busy host (default: one per core)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.size = *sizeMiB << 20
	if *quick {
		c.size, c.runs = 256<<20, 1
	}
	if c.size < 1<<20 || c.runs < 1 || c.burners < 1 {
		return nil, errors.New("--size-mib, --runs and --burners must be at least 1")
	}
	return c, nil
}

// tensorsResult is one measured operation, as tensors.py prints it.
type tensorsResult struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	CPU     float64 `json:"cpu"`
}

func runTensors(args []string) int {
	cfg, err := parseTensorsConfig(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if err := tensorsBench(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench: tensors:", err)
		return 1
	}
	return 0
}

func tensorsBench(cfg *tensorsConfig) error {
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	script := filepath.Join(repo, "bench", "tensors.py")
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("run from the repository root: %w", err)
	}
	work := cfg.workDir
	if work == "" {
		if work, err = os.MkdirTemp("", "os2g-tensors"); err != nil {
			return err
		}
		defer os.RemoveAll(work)
	}
	dataDir := filepath.Join(work, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	const ckpt = "ckpt.safetensors"
	progress("tensors: generating a %d MiB checkpoint", cfg.size>>20)
	if err := writeCheckpoint(filepath.Join(dataDir, ckpt), cfg.size); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock := filepath.Join(work, "gdd.sock")
	stop, err := startBenchDaemon(ctx, sock, dataDir, cfg.shmDir)
	if err != nil {
		return err
	}
	defer stop()

	modes := []string{"load-gdd", "load-plain", "save-gdd", "save-plain"}
	type key struct{ mode, host string }
	got := map[key][]tensorsResult{}
	for _, host := range []string{"idle", "busy"} {
		var burners []*exec.Cmd
		if host == "busy" {
			if burners, err = startBurners(cfg.burners); err != nil {
				return err
			}
		}
		for run := 1; run <= cfg.runs; run++ {
			for _, mode := range rotate(modes, run-1) {
				r, err := runTensorsPy(ctx, cfg, script, repo, mode, sock, dataDir, ckpt)
				if err != nil {
					stopBurners(burners)
					return fmt.Errorf("%s (%s host): %w", mode, host, err)
				}
				got[key{mode, host}] = append(got[key{mode, host}], r)
				progress("tensors: %s host %-10s run %d: %.2f GiB/s, trainer CPU %.3f s/GiB", host, mode, run,
					gibps(r), r.CPU/gib(r.Bytes))
			}
		}
		stopBurners(burners)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# tensors: safetensors load and save, gdd vs plain (simulated device)\n\n")
	fmt.Fprintf(&b, "Checkpoint %d MiB, median of %d run(s); busy host: %d CPU burners on %d cores. %s, %s.\n\n",
		cfg.size>>20, cfg.runs, cfg.burners, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339), loadAvg())
	fmt.Fprintf(&b, "The daemon places into simulated device memory (a shared-memory file) from a local file in the page\n")
	fmt.Fprintf(&b, "cache: the figures compare the two paths' host work, not storage or a GPU.\n\n")
	fmt.Fprintf(&b, "| operation | path | GiB/s idle | GiB/s busy | change | trainer CPU s/GiB idle | trainer CPU s/GiB busy |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|\n")
	for _, mode := range modes {
		op, path, _ := strings.Cut(mode, "-")
		idle, busy := medianOf(got[key{mode, "idle"}]), medianOf(got[key{mode, "busy"}])
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %+.0f%% | %.3f | %.3f |\n", op, path,
			idle.rate, busy.rate, 100*(busy.rate/idle.rate-1), idle.cpu, busy.cpu)
	}
	fmt.Print("\n" + b.String())
	if err := os.MkdirAll(cfg.resultsDir, 0o755); err != nil {
		return err
	}
	out := filepath.Join(cfg.resultsDir, "tensors-latest.md")
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	progress("report: %s", out)
	return nil
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

func gibps(r tensorsResult) float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return gib(r.Bytes) / r.Seconds
}

// medianOf returns the median rate (GiB/s) and CPU (s/GiB) of rs.
func medianOf(rs []tensorsResult) (m struct{ rate, cpu float64 }) {
	var rates, cpus []float64
	for _, r := range rs {
		rates = append(rates, gibps(r))
		cpus = append(cpus, r.CPU/gib(r.Bytes))
	}
	med := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	m.rate, m.cpu = med(rates), med(cpus)
	return m
}

// writeCheckpoint writes a safetensors file of about size bytes: 64 MiB F32
// tensors and a few small ones, random data, with os2g's CRC metadata so
// the gdd load checks every tensor.
func writeCheckpoint(path string, size int64) error {
	var specs []safetensors.Spec
	const big = 64 << 20
	for i := 0; int64(i+1)*big <= size; i++ {
		specs = append(specs, safetensors.Spec{Name: fmt.Sprintf("layers.%d.weight", i), DType: "F32", Shape: []int64{big / 4 / 1024, 1024}})
	}
	if rest := size % big; rest >= 4 || len(specs) == 0 {
		specs = append(specs, safetensors.Spec{Name: "head.weight", DType: "F32", Shape: []int64{max(rest, 4) / 4}})
	}
	specs = append(specs, safetensors.Spec{Name: "norm.bias", DType: "BF16", Shape: []int64{4096}}, safetensors.Spec{Name: "step", DType: "I64"})
	layout, _, err := safetensors.Layout(specs)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{17})
	meta := map[string]string{"format": "pt"}
	table := crc32.MakeTable(crc32.Castagnoli)
	// Pass 1: checksums (the data is regenerated from the same seed in pass 2).
	buf := make([]byte, 4<<20)
	for _, t := range layout {
		var c uint32
		for left := t.Size(); left > 0; {
			n := min(left, int64(len(buf)))
			_, _ = rng.Read(buf[:n])
			c = crc32.Update(c, table, buf[:n])
			left -= n
		}
		meta[safetensors.CRCKey(t.Name)] = fmt.Sprintf("%08x", c)
	}
	prefix, err := safetensors.Encode(layout, meta)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 4<<20)
	_, _ = w.Write(prefix)
	rng = rand.NewChaCha8([32]byte{17})
	for _, t := range layout {
		for left := t.Size(); left > 0; {
			n := min(left, int64(len(buf)))
			_, _ = rng.Read(buf[:n])
			_, _ = w.Write(buf[:n])
			left -= n
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startBenchDaemon serves placements of files in dir, and saves into dir,
// on a sim device whose destinations are files of shmDir.
func startBenchDaemon(ctx context.Context, sock, dir, shmDir string) (stop func(), err error) {
	sim, err := gdd.NewSim(gdd.SimOptions{ShmDir: shmDir})
	if err != nil {
		return nil, err
	}
	placer, err := gdd.NewPlacer(gdd.PlacerOptions{Device: sim, Blocks: 8})
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		placer.Close()
		return nil, err
	}
	ln, err := gdd.Listen(sock, 0)
	if err != nil {
		placer.Close()
		root.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- gdd.Serve(ctx, ln, gdd.ServeOptions{
			Placer: placer,
			Resolve: func(ctx context.Context, path string) (gdd.Source, error) {
				f, err := root.Open(path)
				if err != nil {
					return nil, err
				}
				st, err := f.Stat()
				if err != nil {
					f.Close()
					return nil, err
				}
				return &fileSource{Source: gdd.ReaderAtSource(f, st.Size()), f: f}, nil
			},
			Create: gdd.DirCreator(root),
		})
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			progress("tensors: daemon: %v", err)
		}
		placer.Close()
		root.Close()
		sim.Close()
	}, nil
}

// fileSource closes its file after the request.
type fileSource struct {
	gdd.Source
	f *os.File
}

func (s *fileSource) Close() error { return s.f.Close() }

// startBurners starts n copies of this program as CPU burners.
func startBurners(n int) ([]*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	for range n {
		c := exec.Command(self)
		c.Env = append(os.Environ(), burnEnv+"=1")
		if err := c.Start(); err != nil {
			stopBurners(cmds)
			return nil, err
		}
		cmds = append(cmds, c)
	}
	time.Sleep(500 * time.Millisecond) // let them reach the loop
	return cmds, nil
}

func stopBurners(cmds []*exec.Cmd) {
	for _, c := range cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
}

// runTensorsPy runs one measured operation of tensors.py.
func runTensorsPy(ctx context.Context, cfg *tensorsConfig, script, repo, mode, sock, dir, file string) (tensorsResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.python, script, "--mode", mode, "--socket", sock, "--dir", dir, "--file", file, "--shm-dir", cfg.shmDir)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(repo, "python"), "PYTHONDONTWRITEBYTECODE=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return tensorsResult{}, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	var r tensorsResult
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || r.Bytes <= 0 {
		return tensorsResult{}, fmt.Errorf("tensors.py printed %q: %v", out, err)
	}
	return r, nil
}
