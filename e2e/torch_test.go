package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

// loaderScript reads the mount with an unmodified ImageFolder + shuffled
// DataLoader (2 workers), compares what it saw with the same dataset read
// from local disk, and round-trips a ResNet-18 state dict through the mount.
// It prints one JSON line.
const loaderScript = `
import hashlib, json, os, sys, torch, torchvision
from torchvision import transforms
mnt, local, ckdir = sys.argv[1], sys.argv[2], sys.argv[3]
torch.manual_seed(0)
tf = transforms.Compose([transforms.Grayscale(1), transforms.ToTensor()])

def epoch(root, workers):
    ds = torchvision.datasets.ImageFolder(os.path.join(root, "train"), transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=100, shuffle=True, num_workers=workers)
    n, total, hist = 0, torch.zeros((), dtype=torch.float64), [0] * len(ds.classes)
    for x, y in dl:
        n += x.shape[0]
        total += x.double().sum()
        for v in y.tolist():
            hist[v] += 1
    return {"n": n, "sum": total.item(), "hist": hist, "classes": ds.classes}

got, want = epoch(mnt, 2), epoch(local, 0)
m = torchvision.models.resnet18(num_classes=10)
sd = m.state_dict()
os.makedirs(os.path.join(mnt, "ckpt"), exist_ok=True)
path = os.path.join(mnt, "ckpt", "resnet18.pt")
torch.save(sd, path)
back = torch.load(path, map_location="cpu")
identical = set(back) == set(sd) and all(torch.equal(sd[k], back[k]) for k in sd)
ref = os.path.join(ckdir, "resnet18.pt")
torch.save(sd, ref)
with open(path, "rb") as f:
    mbytes = f.read()
with open(ref, "rb") as f:
    rbytes = f.read()
print(json.dumps({"mount": got, "local": want, "tensors_identical": identical,
                  "bytes_identical": mbytes == rbytes, "size": len(rbytes),
                  "sha256": hashlib.sha256(rbytes).hexdigest()}))
`

// TestDataLoaderAndCheckpoint: 2,000 PNGs uploaded with os2g upload, mounted
// with os2g mount (background, read-write, under a prefix); a shuffled
// 2-worker DataLoader epoch sees exactly the local dataset, and a ResNet-18
// state dict written with torch.save through the mount loads back identical
// and is byte-identical in the bucket (read with the SDK).
func TestDataLoaderAndCheckpoint(t *testing.T) {
	requireFUSE(t)
	requireTorch(t)
	if _, err := os.Stat(filepath.Join(datasetDir, "train-images-idx3-ubyte.gz")); err != nil {
		objtest.SkipOrFail(t, "e2e: Fashion-MNIST not installed (apt install dataset-fashion-mnist)")
	}
	e := newEnv(t)
	_, self, _, _ := runtime.Caller(0)
	scripts := filepath.Join(filepath.Dir(self), "..", "scripts")

	// 1,000 train + 1,000 test images.
	ds := filepath.Join(t.TempDir(), "fmnist")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if out, err := exec.CommandContext(ctx, python, filepath.Join(scripts, "mkdataset.py"), "--out", ds, "--limit", "1000").CombinedOutput(); err != nil {
		t.Fatalf("mkdataset.py: %v\n%s", err, out)
	}
	r := e.run(nil, "upload", "--concurrency", "16", ds, "s3://"+e.srv.Bucket+"/fmnist")
	if r.code != 0 || !strings.Contains(r.stderr, "uploaded 2000 files") {
		t.Fatalf("os2g upload: exit %d: %s", r.code, r.stderr)
	}

	mp := e.mountpoint()
	logFile := filepath.Join(t.TempDir(), "os2g.log")
	r = e.run(nil, "mount", "--log-file", logFile, "--max-memory", "256MiB", "s3://"+e.srv.Bucket+"/fmnist/", mp)
	if r.code != 0 {
		t.Fatalf("os2g mount: exit %d: %s", r.code, r.stderr)
	}
	if r.stderr != "" || r.stdout != "" {
		t.Errorf("a successful mount printed: stdout %q stderr %q", r.stdout, r.stderr)
	}
	pids := daemonPids(t, e.bin, mp)
	if !isMounted(t, mp) || len(pids) != 1 {
		t.Fatalf("after os2g mount: mounted %v, daemons %v", isMounted(t, mp), pids)
	}
	if ents, err := os.ReadDir(mp); err != nil || len(ents) != 2 {
		t.Fatalf("ls %s: %v, %v; want train and test", mp, ents, err)
	}

	ckdir := t.TempDir()
	pctx, pcancel := context.WithTimeout(context.Background(), hangGuard)
	defer pcancel()
	cmd := exec.CommandContext(pctx, python, "-c", loaderScript, mp, ds, ckdir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("DataLoader script: %v\nstderr: %s\ndaemon log: %s", err, stderr.String(), log)
	}
	var res struct {
		Mount, Local struct {
			N       int
			Sum     float64
			Hist    []int
			Classes []string
		}
		TensorsIdentical bool `json:"tensors_identical"`
		BytesIdentical   bool `json:"bytes_identical"`
		Size             int
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("script output %q: %v", out, err)
	}
	if res.Mount.N != 1000 || res.Local.N != 1000 {
		t.Errorf("images read: mount %d, local %d; want 1000 each", res.Mount.N, res.Local.N)
	}
	if res.Mount.Sum != res.Local.Sum {
		t.Errorf("pixel sum through the mount %v != local %v", res.Mount.Sum, res.Local.Sum)
	}
	if len(res.Mount.Classes) != 10 || strings.Join(res.Mount.Classes, ",") != strings.Join(res.Local.Classes, ",") {
		t.Errorf("classes: mount %q, local %q", res.Mount.Classes, res.Local.Classes)
	}
	for i := range res.Local.Hist {
		if i >= len(res.Mount.Hist) || res.Mount.Hist[i] != res.Local.Hist[i] {
			t.Errorf("label histogram: mount %v, local %v", res.Mount.Hist, res.Local.Hist)
			break
		}
	}
	if !res.TensorsIdentical || !res.BytesIdentical {
		t.Errorf("checkpoint through the mount: tensors identical %v, bytes identical %v", res.TensorsIdentical, res.BytesIdentical)
	}

	// The bucket holds exactly the bytes torch.save wrote.
	want, err := os.ReadFile(filepath.Join(ckdir, "resnet18.pt"))
	if err != nil {
		t.Fatal(err)
	}
	store := objtest.NewS3(t, e.srv.Options())
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	info, err := store.Stat(sctx, "fmnist/ckpt/resnet18.pt")
	if err != nil {
		t.Fatalf("SDK stat of the checkpoint: %v", err)
	}
	if info.Size != int64(len(want)) || res.Size != len(want) {
		t.Fatalf("checkpoint object is %d bytes, want %d", info.Size, len(want))
	}
	got := make([]byte, info.Size)
	n, err := store.GetRange(sctx, info.Key, 0, got, "")
	if err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Errorf("checkpoint read with the SDK: %d bytes, err %v, identical %v", n, err, bytes.Equal(got[:n], want))
	}

	if r := e.run(nil, "umount", mp); r.code != 0 {
		t.Fatalf("os2g umount: exit %d: %s", r.code, r.stderr)
	}
	waitGone(t, pids[0])
	if isMounted(t, mp) {
		t.Error("still mounted after os2g umount")
	}
}
