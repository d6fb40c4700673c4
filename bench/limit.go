package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/os2g/os2g/objclient"
)

// The "limit" client fetches the same bytes as the file system clients
// with aws-sdk-go-v2 (objclient) in this process, with no file system in
// between: what the server and the network path give at best.

// readChunkCRCs reads key [0, size) in seqChunk ranges, conc at a time,
// and returns the CRC32C of every chunk.
func readChunkCRCs(ctx context.Context, st objclient.Store, key string, size int64, conc int) ([]uint32, error) {
	n := int((size + seqChunk - 1) / seqChunk)
	sums := make([]uint32, n)
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range min(conc, n) {
		g.Go(func() error {
			buf := make([]byte, seqChunk)
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				off := int64(i) * seqChunk
				want := min(int64(seqChunk), size-off)
				got, err := st.GetRange(gctx, key, off, buf[:want], "")
				if err != nil {
					return err
				}
				if int64(got) != want {
					return fmt.Errorf("%w: %s range at %d returned %d bytes, want %d", errWrongBytes, key, off, got, want)
				}
				sums[i] = crc32.Checksum(buf[:got], castagnoli)
			}
		})
	}
	return sums, g.Wait()
}

// compareCRCs reports the first differing chunk.
func compareCRCs(key string, got, want []uint32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%w: %s has %d chunks, want %d", errWrongBytes, key, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%w: %s chunk %d (bytes from %d) CRC32C %08x, want %08x", errWrongBytes, key, i, int64(i)*seqChunk, got[i], want[i])
		}
	}
	return nil
}

func (h *harness) limitSeq(ctx context.Context) (sample, error) {
	mt := startMeter(0, true)
	start := time.Now()
	sums, err := readChunkCRCs(ctx, h.store, seqKey, h.man.Params.SeqSize, h.cfg.LimitConcurrency)
	secs := time.Since(start).Seconds()
	if err != nil {
		return sample{}, err
	}
	n := h.man.Params.SeqSize
	s := sample{Value: mibps(n, secs), MiBps: mibps(n, secs), Bytes: n, Seconds: secs, CPU: mt.cpu(), P50: math.NaN(), P99: math.NaN()}
	return s, compareCRCs(seqKey, sums, h.man.SeqCRCs)
}

func (h *harness) limitSmall(ctx context.Context) (sample, error) {
	files := h.man.Small
	mt := startMeter(0, true)
	var next atomic.Int64
	var total atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range h.cfg.LimitConcurrency {
		g.Go(func() error {
			buf := make([]byte, h.man.Params.SmallSize+1)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return nil
				}
				f := files[i]
				n, err := h.store.GetRange(gctx, f.Key, 0, buf, "")
				if err != nil {
					return err
				}
				total.Add(int64(n))
				if int64(n) != f.Size || crc32.Checksum(buf[:n], castagnoli) != f.CRC {
					return fmt.Errorf("%w: %s: %d bytes or CRC differ (want %d)", errWrongBytes, f.Key, n, f.Size)
				}
			}
		})
	}
	err := g.Wait()
	secs := time.Since(start).Seconds()
	if err != nil {
		return sample{}, err
	}
	return sample{Value: float64(len(files)) / secs, MiBps: mibps(total.Load(), secs), Bytes: total.Load(), Files: int64(len(files)), Seconds: secs,
		CPU: mt.cpu(), P50: math.NaN(), P99: math.NaN()}, nil
}

// limitRand issues random aligned bs-byte GETs of the large object like
// fsRand's fio jobs: RandJobs goroutines, each on its own 1/RandJobs of the
// object, every block at most once, for at most RandRuntime seconds.
func (h *harness) limitRand(ctx context.Context, bs int64) (sample, error) {
	per := h.man.Params.SeqSize / int64(h.cfg.RandJobs)
	blocks := per / bs
	mt := startMeter(0, true)
	rctx, cancel := context.WithTimeout(ctx, time.Duration(h.cfg.RandRuntime)*time.Second)
	defer cancel()
	var mu sync.Mutex // guards lats
	var lats []float64
	var total atomic.Int64
	g, gctx := errgroup.WithContext(rctx)
	start := time.Now()
	for w := range h.cfg.RandJobs {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			order := rng.Perm(int(blocks))
			buf := make([]byte, bs)
			var mine []float64
			defer func() { mu.Lock(); lats = append(lats, mine...); mu.Unlock() }()
			for _, b := range order {
				if gctx.Err() != nil {
					return nil
				}
				off := int64(w)*per + int64(b)*bs
				t := time.Now()
				n, err := h.store.GetRange(gctx, seqKey, off, buf, "")
				if err != nil {
					if gctx.Err() != nil {
						return nil
					}
					return err
				}
				mine = append(mine, float64(time.Since(t).Nanoseconds())/1e6)
				total.Add(int64(n))
				if int64(n) != bs {
					return fmt.Errorf("%w: %s range at %d returned %d bytes, want %d", errWrongBytes, seqKey, off, n, bs)
				}
			}
			return nil
		})
	}
	err := g.Wait()
	secs := time.Since(start).Seconds()
	if err != nil {
		return sample{}, err
	}
	slices.Sort(lats)
	return sample{Value: float64(len(lats)) / secs, MiBps: mibps(total.Load(), secs), Bytes: total.Load(), Seconds: secs,
		CPU: mt.cpu(), P50: percentile(lats, 50), P99: percentile(lats, 99)}, nil
}

// percentile returns the q-th percentile (nearest rank) of sorted xs.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// limitList lists the list directory one delimiter page at a time.
func (h *harness) limitList(ctx context.Context) (sample, error) {
	mt := startMeter(0, true)
	start := time.Now()
	n, wrong := 0, 0
	req := objclient.ListRequest{Prefix: listPrefix, Delimiter: "/", MaxKeys: 1000}
	for {
		p, err := h.store.List(ctx, req)
		if err != nil {
			return sample{}, err
		}
		for _, o := range p.Objects {
			n++
			if o.Size != listObjSize {
				wrong++
			}
		}
		if !p.IsTruncated {
			break
		}
		req.ContinuationToken = p.NextContinuationToken
	}
	secs := time.Since(start).Seconds()
	s := sample{Value: float64(n) / secs, Seconds: secs, CPU: mt.cpu(), P50: math.NaN(), P99: math.NaN(), MiBps: math.NaN()}
	if n != h.man.Params.ListCount || wrong > 0 {
		return s, fmt.Errorf("%w: listing %s gave %d keys (want %d), %d with a wrong size", errWrongBytes, listPrefix, n, h.man.Params.ListCount, wrong)
	}
	return s, nil
}

// limitWrite uploads WriteSize bytes with the SDK's multipart writer.
func (h *harness) limitWrite(ctx context.Context, key string) (sample, error) {
	mt := startMeter(0, true)
	start := time.Now()
	w, err := h.store.Put(ctx, key, objclient.PutOptions{})
	if err != nil {
		return sample{}, err
	}
	if err := h.writeStream(ctx, w); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return sample{}, err
	}
	if _, err := w.Commit(ctx); err != nil {
		return sample{}, err
	}
	secs := time.Since(start).Seconds()
	n := h.cfg.WriteSize
	return sample{Value: mibps(n, secs), MiBps: mibps(n, secs), Bytes: n, Seconds: secs, CPU: mt.cpu(), P50: math.NaN(), P99: math.NaN()}, nil
}

// verifyWritten checks that key holds exactly the write workload's bytes,
// then deletes it.
func (h *harness) verifyWritten(ctx context.Context, key string) error {
	defer func() { _ = h.store.Delete(context.WithoutCancel(ctx), key) }()
	info, err := h.store.Stat(ctx, key)
	if err != nil {
		return fmt.Errorf("written object %s: %w", key, err)
	}
	if info.Size != h.cfg.WriteSize {
		return fmt.Errorf("%w: written object %s has %d bytes, want %d", errWrongBytes, key, info.Size, h.cfg.WriteSize)
	}
	sums, err := readChunkCRCs(ctx, h.store, key, info.Size, h.cfg.LimitConcurrency)
	if err != nil {
		return err
	}
	return compareCRCs(key, sums, h.writeCRCs)
}
