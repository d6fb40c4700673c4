package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/os2g/os2g/objclient"
)

const uploadUsage = `Usage: os2g upload [flags] LOCALDIR s3://BUCKET[/PREFIX]

Uploads every regular file under LOCALDIR to s3://BUCKET/PREFIX/RELATIVE/PATH
with concurrent PUTs (multipart for files larger than one part), printing a
progress line on stderr. Symbolic links and special files are skipped with a
warning. The first failed upload stops the run with exit status 1.

Like "aws s3 sync", a file is skipped when the bucket already holds its key
with the same size and a modification time no older than the file's, so a
rerun uploads only what changed; --force uploads everything.

Example:
  os2g upload --endpoint-url http://127.0.0.1:7070 --create-bucket ./train s3://bucket/datasets/train
`

// uploadFile is one file to upload.
type uploadFile struct {
	path  string // local path
	key   string // destination key
	size  int64  // bytes, as seen by the walk
	mtime time.Time
}

// uploadProgress counts finished uploads; safe for concurrent use.
type uploadProgress struct {
	files, bytes atomic.Int64
}

// collectUploads walks dir and returns the files to upload under prefix
// ("" or ending in "/"), in walk (lexical) order. skipped receives each
// non-regular entry that is left out.
func collectUploads(dir, prefix string, skipped func(path string, mode fs.FileMode)) ([]uploadFile, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	var out []uploadFile
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			if skipped != nil {
				skipped(p, d.Type())
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, uploadFile{path: p, key: prefix + filepath.ToSlash(rel), size: info.Size(), mtime: info.ModTime()})
		return nil
	})
	return out, err
}

// unchangedUploads returns the files of files that need no upload, by
// aws s3 sync's rule: the store holds the key with the same size and a
// LastModified not older than the file's modification time. It lists the
// keys under prefix once (N/1000 LISTs).
func unchangedUploads(ctx context.Context, store objclient.Store, prefix string, files []uploadFile) (map[string]bool, error) {
	remote := map[string]objclient.ObjectInfo{}
	token := ""
	for {
		page, err := store.List(ctx, objclient.ListRequest{Prefix: prefix, ContinuationToken: token})
		if err != nil {
			return nil, err
		}
		for _, o := range page.Objects {
			remote[o.Key] = o
		}
		if !page.IsTruncated || page.NextContinuationToken == "" {
			break
		}
		token = page.NextContinuationToken
	}
	same := map[string]bool{}
	for _, f := range files {
		// LastModified has whole seconds; so does the comparison.
		if o, ok := remote[f.key]; ok && o.Size == f.size && !f.mtime.Truncate(time.Second).After(o.LastModified) {
			same[f.key] = true
		}
	}
	return same, nil
}

// uploadAll puts every file into store with concurrency workers. It stops
// at the first error, which it returns (wrapped with the file's name).
func uploadAll(ctx context.Context, store objclient.Store, files []uploadFile, concurrency int, partSize int64, prog *uploadProgress) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for _, f := range files {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if gctx.Err() != nil {
				return nil // an earlier upload failed
			}
			if err := uploadOne(gctx, store, f, partSize); err != nil {
				return fmt.Errorf("uploading %s to %s: %w", f.path, f.key, err)
			}
			prog.files.Add(1)
			prog.bytes.Add(f.size)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

func uploadOne(ctx context.Context, store objclient.Store, f uploadFile, partSize int64) error {
	src, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer src.Close()
	w, err := store.Put(ctx, f.key, objclient.PutOptions{
		ContentType: mime.TypeByExtension(filepath.Ext(f.path)),
		PartSize:    partSize,
	})
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, src); err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return err
	}
	_, err = w.Commit(ctx)
	return err
}

// uploadFlags holds the parsed flags of "os2g upload".
type uploadFlags struct {
	conn         connFlags
	concurrency  int
	createBucket bool
	quiet        bool
	force        bool
}

func newUploadCmd(e Env) *cobra.Command {
	var f uploadFlags
	c := &cobra.Command{
		Use:   "upload [flags] LOCALDIR s3://BUCKET[/PREFIX]",
		Short: "upload a directory tree with concurrent PUTs",
		Long:  uploadUsage,
		Args:  exactArgs(2, "LOCALDIR s3://BUCKET[/PREFIX]"),
		RunE: func(c *cobra.Command, args []string) error {
			return runUpload(c.Context(), e, &f, args)
		},
	}
	fs := c.Flags()
	fs.SortFlags = false
	flagGroup(fs, groupSource, func() {
		f.conn.register(fs)
		fs.BoolVar(&f.createBucket, "create-bucket", false, "create the bucket first if it does not exist")
	})
	flagGroup(fs, groupWrites, func() {
		fs.IntVar(&f.concurrency, "concurrency", 32, "number of concurrent uploads")
		f.conn.registerPartSize(fs)
		fs.BoolVar(&f.force, "force", false, "upload every file, also those the bucket holds unchanged (same size, not older)")
		fs.BoolVar(&f.quiet, "quiet", false, "no progress line, only errors")
	})
	return c
}

func runUpload(ctx context.Context, e Env, f *uploadFlags, pos []string) error {
	conn, concurrency, createBucket, quiet := &f.conn, &f.concurrency, &f.createBucket, &f.quiet
	if *concurrency < 1 {
		return usageErr("--concurrency must be at least 1")
	}
	if err := conn.validate(); err != nil {
		return err
	}
	u, err := ParseS3URL(pos[1])
	if err != nil {
		return usageErr("%v", err)
	}
	log := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts, err := conn.options(e, u.Bucket, log)
	if err != nil {
		return err
	}
	files, err := collectUploads(pos[0], u.Prefix, func(p string, mode fs.FileMode) {
		fmt.Fprintf(e.Stderr, "os2g: upload: skipping %s (not a regular file: %s)\n", p, mode.Type())
	})
	if err != nil {
		return fmt.Errorf("reading %s: %w", pos[0], err)
	}
	endpoint := conn.endpointInUse(e)
	store, err := objclient.New(ctx, opts)
	if err != nil {
		return err
	}
	if err := checkCredentials(ctx, conn.profile, e.getenv); err != nil {
		return err
	}
	if err := checkBucket(ctx, opts); err != nil {
		if !*createBucket || !errors.Is(err, objclient.ErrNoSuchBucket) {
			return errors.New(describeStoreErrIn(err, u.Bucket, endpoint, conn.regionInUse(e)))
		}
		if _, err := store.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(u.Bucket)}); err != nil {
			return fmt.Errorf("creating bucket %q: %s", u.Bucket, oneLine(err.Error()))
		}
	}

	skipped := 0
	if !f.force {
		same, err := unchangedUploads(ctx, store, u.Prefix, files)
		if err != nil {
			return errors.New(describeStoreErrIn(err, u.Bucket, endpoint, conn.regionInUse(e)))
		}
		kept := files[:0]
		for _, uf := range files {
			if !same[uf.key] {
				kept = append(kept, uf)
			}
		}
		skipped = len(files) - len(kept)
		files = kept
	}
	var total int64
	for _, uf := range files {
		total += uf.size
	}
	var prog uploadProgress
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if !*quiet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reportUpload(e.Stderr, &prog, len(files), total, start, stop)
		}()
	}
	err = uploadAll(ctx, store, files, *concurrency, conn.partSize.v, &prog)
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	if !*quiet {
		el := time.Since(start).Seconds()
		fmt.Fprintf(e.Stderr, "uploaded %d files, %s to %s in %.1fs (%.0f files/s, %s/s)",
			len(files), FormatSize(total), u, el, float64(len(files))/max(el, 1e-3), FormatSize(int64(float64(total)/max(el, 1e-3))))
		if skipped > 0 {
			fmt.Fprintf(e.Stderr, "; %d unchanged files skipped", skipped)
		}
		fmt.Fprintln(e.Stderr)
	}
	return nil
}

// reportUpload prints a progress line until stop is closed: rewritten in
// place every second on a terminal, one line every 10 s otherwise.
func reportUpload(w io.Writer, prog *uploadProgress, nfiles int, total int64, start time.Time, stop <-chan struct{}) {
	tty := isTerminal(w)
	period := 10 * time.Second
	if tty {
		period = time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			if tty {
				fmt.Fprint(w, "\r\033[K")
			}
			return
		case <-t.C:
			el := time.Since(start).Seconds()
			n, b := prog.files.Load(), prog.bytes.Load()
			line := fmt.Sprintf("uploading: %d/%d files, %s/%s, %.0f files/s", n, nfiles, FormatSize(b), FormatSize(total), float64(n)/el)
			if tty {
				fmt.Fprint(w, "\r\033[K"+line)
			} else {
				fmt.Fprintln(w, line)
			}
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && !strings.HasPrefix(os.Getenv("TERM"), "dumb")
}
