#!/usr/bin/env python3
"""One rank of a DistributedSampler epoch loop over an ImageFolder, for
os2g's bench (workload loader-ddp).

Usage: ddp.py ROOT --rank R --world N [--epochs 2] [--workers 8] [--batch 64] [--hint]

Like loader.py, but the DataLoader draws this rank's share through
DistributedSampler(num_replicas=N, rank=R, shuffle=True, seed=0), reshuffled
each epoch by set_epoch; with --hint, os2g.epoch.hint(dataset, sampler,
epoch) tells the mount the coming order next to set_epoch. No process group
is needed: ranks do not communicate. Prints {"ready": true} once torch is
imported and the tree scanned, then reads one line from stdin before each
epoch (so that the caller starts every rank's epoch together and samples
the daemons at epoch boundaries) and prints one JSON line per epoch:
images, seconds, pixel_sum (order-independent check of the bytes), and the
hint's reply.
"""
import argparse
import json
import sys
import time
import warnings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hint", action="store_true")
    a = ap.parse_args()

    warnings.filterwarnings("ignore", message="This DataLoader will create")
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import datasets, transforms

    oe = None
    if a.hint:
        import os2g.epoch as oe

    ds = datasets.ImageFolder(a.root, transform=transforms.ToTensor())
    sampler = DistributedSampler(ds, num_replicas=a.world, rank=a.rank, shuffle=True, seed=0)
    dl = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers, persistent_workers=a.workers > 0)
    print(json.dumps({"ready": True, "classes": len(ds.classes)}), flush=True)
    for epoch in range(a.epochs):
        sys.stdin.readline()
        t = time.perf_counter()
        sampler.set_epoch(epoch)
        reply = oe.hint(ds, sampler, epoch) if oe else None
        n = 0
        s = 0
        for x, _ in dl:
            n += x.shape[0]
            s += int((x * 255).round().to(torch.int64).sum())
        print(json.dumps({"epoch": epoch, "images": n, "seconds": time.perf_counter() - t,
                          "pixel_sum": s, "hint": reply}), flush=True)


if __name__ == "__main__":
    main()
