package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/os2g/os2g/objclient"
)

// Key layout of the data set, the same in the bucket and in the local
// source tree (which the "local" client reads).
const (
	seqKey        = "seq/big.bin"
	smallPrefix   = "small/"
	listPrefix    = "list/"
	loaderPrefix  = "loader/"
	writePrefix   = "write/"
	manifestKey   = "_bench/manifest.json"
	listObjSize   = 64
	seqChunk      = 8 << 20 // bytes per CRC of the large object
	datasetFormat = 3       // bump when the generator changes
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// dataParams identifies a generated data set; a kept one is reused only if
// its parameters are equal.
type dataParams struct {
	Format      int
	SeqSize     int64
	SmallCount  int
	SmallSize   int64
	ListCount   int
	LoaderCount int
	LoaderSrc   string
}

// fileSum is one object's size and CRC32C.
type fileSum struct {
	Key  string
	Size int64
	CRC  uint32
}

// manifest describes the generated data set: what every client must read.
type manifest struct {
	Params  dataParams
	SeqCRCs []uint32 // CRC32C of each seqChunk-byte chunk of seqKey
	Small   []fileSum
	// LoaderImages, LoaderBytes: number and total size of the image files.
	LoaderImages int
	LoaderBytes  int64
	// LoaderPixelSum is the sum over all images of every RGB channel value
	// (0..255) as torchvision's default loader decodes it; -1 if unknown.
	LoaderPixelSum int64
	LoaderClasses  int
}

func (c *config) dataParams() dataParams {
	return dataParams{Format: datasetFormat, SeqSize: c.SeqSize, SmallCount: c.SmallCount, SmallSize: c.SmallSize,
		ListCount: c.ListCount, LoaderCount: c.LoaderCount, LoaderSrc: c.LoaderSrc}
}

// prepareData makes sure src holds the data set and the bucket holds the
// same keys. A previous set is reused when its manifest (local and in the
// bucket) has the same parameters, unless fresh.
func prepareData(ctx context.Context, c *config, st objclient.Store, src string, fresh bool, log *slog.Logger) (*manifest, error) {
	want := c.dataParams()
	mpath := filepath.Join(src, "..", "manifest.json")
	if !fresh {
		if m, ok := reusable(ctx, st, mpath, want); ok {
			log.Info("data set: reusing kept data set", "dir", src)
			return m, nil
		}
	}
	if err := os.RemoveAll(src); err != nil {
		return nil, err
	}
	m := &manifest{Params: want}
	progress("generate: %s object, %d × %s small objects, %d list keys, %d images", formatSize(c.SeqSize), c.SmallCount, formatSize(c.SmallSize), c.ListCount, c.LoaderCount)
	if err := genSeq(filepath.Join(src, filepath.FromSlash(seqKey)), c.SeqSize, m); err != nil {
		return nil, err
	}
	if err := genSmall(src, c.SmallCount, c.SmallSize, m); err != nil {
		return nil, err
	}
	if err := genList(src, c.ListCount); err != nil {
		return nil, err
	}
	// The write workload writes into write/, which must exist as a directory.
	if err := os.MkdirAll(filepath.Join(src, filepath.FromSlash(writePrefix)), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(src, filepath.FromSlash(writePrefix), "README"), []byte("os2g bench write target\n"), 0o644); err != nil {
		return nil, err
	}
	if c.LoaderSrc != "" {
		if err := linkTree(c.LoaderSrc, filepath.Join(src, filepath.FromSlash(loaderPrefix))); err != nil {
			return nil, err
		}
		m.LoaderPixelSum = -1
	} else if err := genLoader(filepath.Join(src, filepath.FromSlash(loaderPrefix)), c.LoaderCount, m, log); err != nil {
		return nil, err
	}
	if err := countLoader(filepath.Join(src, filepath.FromSlash(loaderPrefix)), m); err != nil {
		return nil, err
	}
	if err := uploadTree(ctx, st, src); err != nil {
		return nil, err
	}
	mj, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return nil, err
	}
	if err := putBytes(ctx, st, manifestKey, mj); err != nil {
		return nil, err
	}
	if err := os.WriteFile(mpath, mj, 0o644); err != nil {
		return nil, err
	}
	return m, nil
}

// reusable loads the kept manifest and checks that the bucket's copy is
// byte-identical and the parameters match.
func reusable(ctx context.Context, st objclient.Store, mpath string, want dataParams) (*manifest, bool) {
	local, err := os.ReadFile(mpath)
	if err != nil {
		return nil, false
	}
	var m manifest
	if json.Unmarshal(local, &m) != nil || m.Params != want {
		return nil, false
	}
	remote := make([]byte, len(local)+1)
	n, err := st.GetRange(ctx, manifestKey, 0, remote, "")
	if err != nil || !bytes.Equal(remote[:n], local) {
		return nil, false
	}
	return &m, true
}

// fillRandom writes deterministic pseudo-random bytes (ChaCha8, seed) to w.
func fillRandom(w io.Writer, n int64, seed uint64) error {
	var key [32]byte
	key[0], key[1], key[2], key[3] = byte(seed), byte(seed>>8), byte(seed>>16), byte(seed>>24)
	key[4], key[5], key[6], key[7] = byte(seed>>32), byte(seed>>40), byte(seed>>48), byte(seed>>56)
	r := rand.NewChaCha8(key)
	buf := make([]byte, 1<<20)
	for n > 0 {
		k := min(int64(len(buf)), n)
		_, _ = r.Read(buf[:k])
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// chunkCRCWriter computes the CRC32C of each chunk-byte piece of a stream.
type chunkCRCWriter struct {
	chunk int64
	off   int64
	cur   uint32
	sums  []uint32
}

func (w *chunkCRCWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(int64(len(p)), w.chunk-w.off%w.chunk)
		w.cur = crc32.Update(w.cur, castagnoli, p[:k])
		w.off += k
		p = p[k:]
		if w.off%w.chunk == 0 {
			w.sums = append(w.sums, w.cur)
			w.cur = 0
		}
	}
	return n, nil
}

// Sums returns the chunk CRCs, including a final partial chunk.
func (w *chunkCRCWriter) Sums() []uint32 {
	if w.off%w.chunk != 0 {
		return append(w.sums, w.cur)
	}
	return w.sums
}

func genSeq(path string, size int64, m *manifest) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := &chunkCRCWriter{chunk: seqChunk}
	bw := bufio.NewWriterSize(io.MultiWriter(f, cw), 1<<20)
	if err := fillRandom(bw, size, 1); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	m.SeqCRCs = cw.Sums()
	return f.Close()
}

func genSmall(src string, count int, size int64, m *manifest) error {
	dir := filepath.Join(src, filepath.FromSlash(smallPrefix))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	for i := range count {
		buf.Reset()
		_ = fillRandom(&buf, size, uint64(1000+i))
		key := fmt.Sprintf("%sf%05d.bin", smallPrefix, i)
		if err := os.WriteFile(filepath.Join(src, filepath.FromSlash(key)), buf.Bytes(), 0o644); err != nil {
			return err
		}
		m.Small = append(m.Small, fileSum{Key: key, Size: size, CRC: crc32.Checksum(buf.Bytes(), castagnoli)})
	}
	return nil
}

func genList(src string, count int) error {
	dir := filepath.Join(src, filepath.FromSlash(listPrefix))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range count {
		b := fmt.Appendf(nil, "%-*d", listObjSize-1, i)
		b = append(b, '\n')
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("k%06d", i)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// linkTree mirrors the regular files of tree from into to as hard links
// (copies when linking fails, e.g. across file systems).
func linkTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if os.Link(p, dst) == nil {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// countLoader fills the image count, bytes and class count of an
// ImageFolder tree.
func countLoader(root string, m *manifest) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	m.LoaderImages, m.LoaderBytes, m.LoaderClasses = 0, 0, 0
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		m.LoaderClasses++
		files, err := os.ReadDir(filepath.Join(root, e.Name()))
		if err != nil {
			return err
		}
		for _, f := range files {
			info, err := f.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			m.LoaderImages++
			m.LoaderBytes += info.Size()
		}
	}
	if m.LoaderImages == 0 {
		return fmt.Errorf("no images under %s", root)
	}
	return nil
}

// uploadTree puts every regular file under src into the bucket under its
// relative slash path, 16 at a time.
func uploadTree(ctx context.Context, st objclient.Store, src string) error {
	var keys []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		keys = append(keys, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(keys)
	progress("upload: %d objects to the bucket", len(keys))
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	var mu sync.Mutex // guards lastPct
	lastPct := 0
	for _, k := range keys {
		g.Go(func() error {
			if err := uploadFile(gctx, st, k, filepath.Join(src, filepath.FromSlash(k))); err != nil {
				return fmt.Errorf("upload %s: %w", k, err)
			}
			pct := int(done.Add(1) * 100 / int64(len(keys)))
			mu.Lock()
			if pct >= lastPct+25 {
				lastPct = pct
				progress("upload: %d%%", pct)
			}
			mu.Unlock()
			return nil
		})
	}
	return g.Wait()
}

func uploadFile(ctx context.Context, st objclient.Store, key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := st.Put(ctx, key, objclient.PutOptions{ContentType: contentType(key)})
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, f); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return err
	}
	_, err = w.Commit(ctx)
	return err
}

func contentType(key string) string {
	if strings.HasSuffix(key, ".png") {
		return "image/png"
	}
	return "application/octet-stream"
}

func putBytes(ctx context.Context, st objclient.Store, key string, b []byte) error {
	w, err := st.Put(ctx, key, objclient.PutOptions{ContentType: "application/json"})
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return err
	}
	_, err = w.Commit(ctx)
	return err
}

var errWrongBytes = errors.New("wrong bytes")
