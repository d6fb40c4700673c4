#!/usr/bin/env python3
"""One ImageFolder through an unmodified PyTorch DataLoader, for os2g's bench.

Usage: loader.py ROOT [--workers 8] [--batch 64] [--epochs 2] [--handshake]

Prints one JSON object per line on stdout: {"ready": true} once torch is
imported, then one {"epoch": N, ...} line per epoch with the images seen, the
epoch's wall seconds (the first epoch also reports the ImageFolder scan of the
directory tree separately in scan_seconds) and pixel_sum, the sum of every
channel value (0..255) of every image, which does not depend on the shuffled
order and so checks that the bytes read were right. With --handshake it
reads one line from stdin before the scan and between epochs, so that the
caller can sample the file system daemon's CPU at exact epoch boundaries.
No model runs: this measures the input pipeline only.
"""
import argparse
import json
import sys
import time
import warnings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--handshake", action="store_true")
    a = ap.parse_args()

    # 8 workers on a small machine is the point of the exercise.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.manual_seed(a.seed)
    print(json.dumps({"ready": True}), flush=True)
    if a.handshake:
        sys.stdin.readline()

    t0 = time.perf_counter()
    ds = datasets.ImageFolder(a.root, transform=transforms.ToTensor())
    scan = time.perf_counter() - t0
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers)
    for epoch in range(1, a.epochs + 1):
        t = time.perf_counter()
        n = 0
        s = 0
        for x, _ in dl:
            n += x.shape[0]
            s += int((x * 255).round().to(torch.int64).sum())
        secs = time.perf_counter() - t
        print(json.dumps({"epoch": epoch, "images": n, "seconds": secs,
                          "scan_seconds": scan if epoch == 1 else 0.0,
                          "pixel_sum": s, "classes": len(ds.classes)}), flush=True)
        if a.handshake and epoch < a.epochs:
            sys.stdin.readline()


if __name__ == "__main__":
    main()
