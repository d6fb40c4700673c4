package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/os2g/os2g/internal/pyenv"
)

// ddpScript is one rank of a DistributedSampler job over an unmodified
// ImageFolder on the mount at argv[1]: rank argv[2] of argv[3], argv[4]
// epochs, with os2g.epoch.hint next to set_epoch when argv[5] is "1". Its
// loader reads each file whole and then drops it from the page cache
// (POSIX_FADV_DONTNEED), as a dataset larger than RAM would be, so every
// epoch's reads reach the daemon. It prints one JSON line per epoch.
const ddpScript = `
import json, os, sys, torch, torchvision
import os2g.epoch as oe
mnt, rank, world, epochs, use_hint = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"

def load(p):
    with open(p, "rb") as f:
        n = len(f.read())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return n

ds = torchvision.datasets.ImageFolder(os.path.join(mnt, "train"), loader=load)
sampler = torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2, persistent_workers=True)
for e in range(epochs):
    sampler.set_epoch(e)
    reply = oe.hint(ds, sampler, e) if use_hint else None
    n, nbytes = 0, 0
    for sizes, _ in loader:
        n += len(sizes)
        nbytes += int(sizes.sum())
    print(json.dumps({"epoch": e, "images": n, "bytes": nbytes, "hint": reply}), flush=True)
`

// promValue returns the value of the sample name (no labels) in
// Prometheus text.
func promValue(t *testing.T, text, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no %s in the metrics:\n%s", name, text)
	return 0
}

// TestShardedRanks: two mounts of one bucket (two nodes), each read by one
// real DistributedSampler rank for three reshuffled epochs. With the
// exact-order hint (os2g.epoch.hint) each mount fetches at most 1.02 times
// what it reads and pre-reads for its opens; with --sharded and no hint,
// at most 1.10 times. A hint naming a file outside the mount is refused
// with a clear error.
func TestShardedRanks(t *testing.T) {
	requireTorch(t)
	e := newEnv(t)
	py := pyenv.Install(t)

	// 10 classes x 40 files of 24..72 KiB (about 19 MiB), mounted with a
	// 6 MiB budget, so that an epoch's share (about 9.6 MiB) does not stay
	// cached for the next one and every epoch's bytes come from the store.
	src := t.TempDir()
	rng := rand.New(rand.NewPCG(15, 15))
	for c := 0; c < 10; c++ {
		dir := filepath.Join(src, "train", fmt.Sprintf("class%d", c))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 40; i++ {
			b := make([]byte, 24<<10+rng.IntN(48<<10))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d.png", i)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r := e.run(nil, "upload", "--concurrency", "8", src, "s3://"+e.srv.Bucket); r.code != 0 {
		t.Fatalf("os2g upload: exit %d: %s", r.code, r.stderr)
	}

	const ranks, epochs = 2, 3
	for _, tc := range []struct {
		name     string
		hint     bool
		flags    []string
		maxRatio float64
		minRatio float64 // the run fetches at least this (0: not checked)
	}{
		{"hint", true, nil, 1.02, 0},
		{"sharded", false, []string{"--sharded"}, 1.10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mps []string
			for r := 0; r < ranks; r++ {
				mp := e.mountpoint()
				e.mount(mp, append([]string{"--read-only", "--immutable", "--max-memory", "6MiB", "--part-size", "5MiB"}, tc.flags...)...)
				mps = append(mps, mp)
			}
			outs := make([][]byte, ranks)
			errs := make([]error, ranks)
			var wg sync.WaitGroup
			for r := range mps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
					defer cancel()
					cmd := exec.CommandContext(ctx, py, "-c", ddpScript, mps[r], strconv.Itoa(r), strconv.Itoa(ranks), strconv.Itoa(epochs), map[bool]string{true: "1", false: "0"}[tc.hint])
					cmd.Dir = t.TempDir()
					var stderr bytes.Buffer
					cmd.Stderr = &stderr
					outs[r], errs[r] = cmd.Output()
					if errs[r] != nil {
						errs[r] = fmt.Errorf("%v\n%s", errs[r], stderr.String())
					}
				}()
			}
			wg.Wait()
			for r, mp := range mps {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				lines := strings.Split(strings.TrimSpace(string(outs[r])), "\n")
				if len(lines) != epochs {
					t.Fatalf("rank %d printed %q, want %d epoch lines", r, outs[r], epochs)
				}
				var readBytes int64
				for _, l := range lines {
					var ep struct {
						Images int
						Bytes  int64
						Hint   *struct{ Files, Unknown int }
					}
					if err := json.Unmarshal([]byte(l), &ep); err != nil {
						t.Fatalf("rank %d line %q: %v", r, l, err)
					}
					if ep.Images != 200 {
						t.Errorf("rank %d: %d images in an epoch, want 200", r, ep.Images)
					}
					if tc.hint && (ep.Hint == nil || ep.Hint.Files != 200 || ep.Hint.Unknown != 0) {
						t.Errorf("rank %d: hint reply %+v, want 200 files, 0 unknown", r, ep.Hint)
					}
					readBytes += ep.Bytes
				}
				res := e.run(nil, "stats", "--raw", mp)
				if res.code != 0 {
					t.Fatalf("os2g stats --raw: exit %d: %s", res.code, res.stderr)
				}
				fetched := promValue(t, res.stdout, "os2g_prefetch_fetched_bytes_total")
				read := promValue(t, res.stdout, "os2g_prefetch_read_bytes_total")
				epochGETs := promValue(t, res.stdout, `os2g_prefetch_requests_total{origin="epoch"}`)
				hints := promValue(t, res.stdout, "os2g_prefetch_hints_total")
				ratio := fetched / read
				t.Logf("mount %d: fetched %.0f, read %.0f (script read %d): fetched/read %.3f; %v pre-read GETs, %v hints", r, fetched, read, readBytes, ratio, epochGETs, hints)
				if read < float64(readBytes)/2 {
					t.Errorf("mount %d: the daemon returned %.0f bytes for %d read: the reads did not reach it", r, read, readBytes)
				}
				if ratio > tc.maxRatio || ratio < tc.minRatio {
					t.Errorf("mount %d: fetched/read = %.3f, want in [%.2f, %.2f]", r, ratio, tc.minRatio, tc.maxRatio)
				}
				if tc.hint && (hints != epochs || epochGETs == 0) {
					t.Errorf("mount %d: %v hints, %v pre-read GETs; want %d and > 0", r, hints, epochGETs, epochs)
				}
				stats := e.run(nil, "stats", mp)
				if !strings.Contains(stats.stdout, "pre-read use") || !strings.Contains(stats.stdout, "order hints") {
					t.Errorf("os2g stats lacks the pre-read use and order hint lines:\n%s", stats.stdout)
				}
			}
			if tc.hint {
				// A hint for a file outside the mount: refused, clearly.
				cmd := exec.Command(py, "-c", `import sys, os2g.epoch as oe
try:
    oe.send(["/etc/passwd"], sys.argv[1])
except oe.HintError as e:
    print(e.status, e)
`, mps[0])
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.HasPrefix(string(out), "400 ") || !strings.Contains(string(out), "outside the mount") {
					t.Errorf("hint outside the mount: %v, %q; want a 400 naming the path outside", err, out)
				}
			}
			for _, mp := range mps {
				if r := e.run(nil, "umount", mp); r.code != 0 {
					t.Errorf("os2g umount: exit %d: %s", r.code, r.stderr)
				}
			}
		})
	}
}
