package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/os2g/os2g/internal/mountinfo"
)

const warmUsage = `Usage: os2g warm [--concurrency N] PATH...

Reads every regular file under each PATH (a directory tree or a file on an
os2g mount) whole, with N concurrent readers, so that a training job finds its
data cached. What stays cached depends on the mount:
  - with --cache-dir, the disk cache keeps every file read whole (up to
    --cache-size, least recently used out first): warm fills it for every
    later epoch and later mounts of the same bucket;
  - os2g's memory cache keeps what fits in --max-memory, the most recently
    read files first, and the kernel page cache what the kernel's free
    memory allows; a dataset larger than these is not held whole by them
    (use --cache-dir).
Shows a progress bar on a terminal (a line every 10 s otherwise) with files
done and files/s, and prints one summary line: files, bytes, seconds, files/s
and MiB/s. A file that cannot be read is reported and counted, the others are
still read, and the exit status is 1. A PATH outside an os2g mount is read
too, with a warning.
`

// warmFile is one file to read.
type warmFile struct {
	path string
	size int64 // bytes, as listed
}

// warmProgress counts the work done; safe for concurrent use.
type warmProgress struct {
	files, bytes, failed atomic.Int64
}

// collectWarm walks paths (absolute, resolved) and returns their regular
// files, each once, in walk order. report receives each entry that cannot
// be listed; the returned count is how many there were.
func collectWarm(paths []string, report func(path string, err error)) ([]warmFile, int) {
	var out []warmFile
	seen := map[string]struct{}{}
	nerr := 0
	for _, root := range paths {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				nerr++
				report(p, err)
				return nil // WalkDir skips the directory it could not read
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if _, dup := seen[p]; dup {
				return nil
			}
			seen[p] = struct{}{}
			info, err := d.Info()
			if err != nil {
				nerr++
				report(p, err)
				return nil
			}
			out = append(out, warmFile{path: p, size: info.Size()})
			return nil
		})
	}
	return out, nerr
}

// warmBufSize is the read size of each reader, bytes.
const warmBufSize = 1 << 20

// warmAll reads every file whole with concurrency readers, counting into
// prog and calling onBytes with each read's byte count. A failed file goes
// to report and into prog.failed; the others are still read. It returns
// ctx's error if ctx ends first.
func warmAll(ctx context.Context, files []warmFile, concurrency int, prog *warmProgress, onBytes func(int64), report func(path string, err error)) error {
	var g errgroup.Group
	g.SetLimit(concurrency)
	bufs := sync.Pool{New: func() any { b := make([]byte, warmBufSize); return &b }}
	for _, f := range files {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			bp := bufs.Get().(*[]byte)
			defer bufs.Put(bp)
			n, err := readWhole(ctx, f.path, *bp, onBytes)
			prog.bytes.Add(n)
			if err != nil {
				if ctx.Err() == nil {
					prog.failed.Add(1)
					report(f.path, err)
				}
				return nil
			}
			prog.files.Add(1)
			return nil
		})
	}
	g.Wait()
	return ctx.Err()
}

// readWhole reads the file at path to its end with buf (not io.Copy to
// io.Discard, whose ReadFrom would read in 8 KiB pieces) and returns the
// bytes read.
func readWhole(ctx context.Context, path string, buf []byte, onBytes func(int64)) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := f.Read(buf)
		if n > 0 {
			total += int64(n)
			onBytes(int64(n))
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func newWarmCmd(e Env) *cobra.Command {
	var concurrency int
	c := &cobra.Command{
		Use:   "warm [--concurrency N] PATH...",
		Short: "read files under a mount into the caches",
		Long:  warmUsage,
		Args:  minArgs(1, "PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			return runWarm(c.Context(), e, concurrency, args)
		},
	}
	c.Flags().IntVar(&concurrency, "concurrency", 16, "files read at the same time")
	return c
}

func runWarm(ctx context.Context, e Env, concurrency int, pos []string) error {
	if concurrency < 1 {
		return usageErr("--concurrency must be at least 1, not %d", concurrency)
	}
	// Every PATH is checked before anything is read.
	paths := make([]string, 0, len(pos))
	for _, p := range pos {
		r, err := resolvePath(p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(r); err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}
		if m, ok := mountinfo.Enclosing(mountinfo.Self(), r); !ok || m.FSType != osFSType {
			fmt.Fprintf(e.Stderr, "os2g: warm: warning: %s is not on an os2g mount (it is on %s, %s); reading it anyway\n", r, m.Target, m.FSType)
		}
		paths = append(paths, r)
	}

	var outMu sync.Mutex // guards writes to e.Stderr and bar's rendering
	var bar *progressbar.ProgressBar
	report := func(p string, err error) {
		outMu.Lock()
		defer outMu.Unlock()
		if bar != nil {
			bar.Clear()
		}
		fmt.Fprintf(e.Stderr, "os2g: warm: %s: %s\n", p, oneLine(causeOf(err).Error()))
	}
	start := time.Now()
	files, listErrs := collectWarm(paths, report)
	var total int64
	for _, f := range files {
		total += f.size
	}
	var prog warmProgress
	onBytes := func(int64) {}
	stopProgress := func() {}
	if isTerminal(e.Stderr) {
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(e.Stderr),
			progressbar.OptionSetDescription(fmt.Sprintf("warming 0/%d files", len(files))),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetWidth(30),
		)
		shown := int64(0) // files shown in the description; guarded by outMu
		onBytes = func(n int64) {
			outMu.Lock()
			if done := prog.files.Load(); done != shown {
				shown = done
				bar.Describe(warmProgressLine(done, int64(len(files)), time.Since(start)))
			}
			bar.Add64(n)
			outMu.Unlock()
		}
	} else {
		// Not a terminal: a progress line every 10 s.
		stop := make(chan struct{})
		finished := make(chan struct{})
		stopProgress = func() { close(stop); <-finished }
		go func() {
			defer close(finished)
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					outMu.Lock()
					fmt.Fprintf(e.Stderr, "%s, %s\n", warmProgressLine(prog.files.Load(), int64(len(files)), time.Since(start)), FormatSize(prog.bytes.Load()))
					outMu.Unlock()
				}
			}
		}()
	}
	werr := warmAll(ctx, files, concurrency, &prog, onBytes, report)
	stopProgress()
	if bar != nil {
		bar.Finish()
		bar.Clear()
	}
	el := time.Since(start).Seconds()
	n, b := prog.files.Load(), prog.bytes.Load()
	fmt.Fprintf(e.Stderr, "warmed %d files, %s in %.1fs (%.1f files/s, %.1f MiB/s)\n",
		n, FormatSize(b), el, float64(n)/max(el, 1e-3), float64(b)/(1<<20)/max(el, 1e-3))
	if werr != nil {
		return werr
	}
	if failed := prog.failed.Load() + int64(listErrs); failed > 0 {
		return fmt.Errorf("%d of %d files or directories could not be read (see above)", failed, int64(len(files))+int64(listErrs))
	}
	return nil
}

// causeOf returns a *fs.PathError's cause (reports name the path once),
// other errors as they are.
func causeOf(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// warmProgressLine is the progress text: files done of total and the rate
// so far ("warming 120/7000 files, 35.2 files/s").
func warmProgressLine(done, total int64, elapsed time.Duration) string {
	return fmt.Sprintf("warming %d/%d files, %.1f files/s", done, total, float64(done)/max(elapsed.Seconds(), 1e-3))
}
