#!/usr/bin/python3
"""Convert Fashion-MNIST (idx .gz files) to a torchvision ImageFolder tree of PNGs.

    mkdataset.py [--src DIR] [--out DIR] [--limit N] [--workers N]

writes OUT/train/CLASS/NNNNN.png (60,000 files) and OUT/test/CLASS/NNNNN.png
(10,000 files), NNNNN being the image's index in its idx file. --limit N keeps
only the first N images of each split (for quick tests). The tree is built in
OUT.tmp and renamed into place, and a marker OUT.complete records what it
holds, so a rerun with the same arguments returns at once.

    mkdataset.py verify --local DIR --mount DIR [--sample N] [--seed S] [--exclude TOPDIR]...

compares the two trees: the same set of relative file paths, and identical
sha256 for all files (or a seeded random sample of N of them). Exits 1 on any
difference. Prints one summary line.

Needs only the standard library plus PIL (python3-pil) for PNG encoding;
without PIL, PNGs are encoded with zlib directly.
"""

import argparse
import concurrent.futures as cf
import gzip
import hashlib
import json
import os
import random
import shutil
import struct
import sys
import time
import zlib

CLASSES = [
    "T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot",
]
SPLITS = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
FORMAT_VERSION = 1


def read_idx_images(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n, rows, cols = struct.unpack(">IIII", data[:16])
    if magic != 2051:
        raise ValueError(f"{path}: not an idx3 image file (magic {magic})")
    if len(data) != 16 + n * rows * cols:
        raise ValueError(f"{path}: truncated ({len(data)} bytes for {n} images)")
    return n, rows, cols, data[16:]


def read_idx_labels(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic != 2049:
        raise ValueError(f"{path}: not an idx1 label file (magic {magic})")
    return data[8:8 + n]


def png_bytes(pixels, rows, cols):
    """Encode 8-bit grayscale pixels as a PNG (PIL if present, else zlib)."""
    try:
        from PIL import Image
        import io
        buf = io.BytesIO()
        Image.frombytes("L", (cols, rows), pixels).save(buf, format="PNG")
        return buf.getvalue()
    except ImportError:
        pass

    def chunk(kind, body):
        c = struct.pack(">I", len(body)) + kind + body
        return c + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + pixels[r * cols:(r + 1) * cols] for r in range(rows))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", cols, rows, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_range(args):
    """Worker: write images [lo, hi) of one split. Returns the count."""
    src, split, out, lo, hi = args
    imgs_file, labels_file = SPLITS[split]
    n, rows, cols, pixels = read_idx_images(os.path.join(src, imgs_file))
    labels = read_idx_labels(os.path.join(src, labels_file))
    size = rows * cols
    for i in range(lo, hi):
        cls = CLASSES[labels[i]]
        with open(os.path.join(out, split, cls, f"{i:05d}.png"), "wb") as f:
            f.write(png_bytes(pixels[i * size:(i + 1) * size], rows, cols))
    return hi - lo


def make(args):
    src, out = args.src, os.path.abspath(args.out)
    want = {"format": FORMAT_VERSION, "src": os.path.abspath(src), "limit": args.limit}
    marker = out + ".complete"
    if os.path.exists(marker):
        with open(marker) as f:
            have = json.load(f)
        if {k: have.get(k) for k in want} == want:
            print(f"mkdataset: {out} already holds {have['files']} images (cached)")
            return 0
    t0 = time.time()
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    jobs, total = [], 0
    for split, (imgs_file, _) in SPLITS.items():
        n, _, _, _ = read_idx_images(os.path.join(src, imgs_file))
        if args.limit:
            n = min(n, args.limit)
        for cls in CLASSES:
            os.makedirs(os.path.join(tmp, split, cls))
        step = max(1, n // (args.workers * 4))
        jobs += [(src, split, tmp, lo, min(n, lo + step)) for lo in range(0, n, step)]
        total += n
    with cf.ProcessPoolExecutor(max_workers=args.workers) as ex:
        done = sum(ex.map(write_range, jobs))
    if done != total:
        print(f"mkdataset: wrote {done} of {total} images", file=sys.stderr)
        return 1
    if os.path.exists(marker):
        os.remove(marker)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    with open(marker, "w") as f:
        json.dump(dict(want, files=total), f)
    print(f"mkdataset: wrote {total} PNGs to {out} in {time.time() - t0:.1f}s")
    return 0


def list_files(root, exclude=()):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d not in exclude]
        dirnames.sort()
        for name in filenames:
            out.append(os.path.normpath(os.path.join(rel, name)))
    return sorted(out)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def verify(args):
    t0 = time.time()
    exclude = set(args.exclude)
    local, mounted = list_files(args.local, exclude), list_files(args.mount, exclude)
    if local != mounted:
        ls, ms = set(local), set(mounted)
        print(f"verify: FAIL: file lists differ: {len(ls - ms)} missing from the mount "
              f"(e.g. {sorted(ls - ms)[:3]}), {len(ms - ls)} extra (e.g. {sorted(ms - ls)[:3]})")
        return 1
    sample = local
    if args.sample and args.sample < len(local):
        sample = random.Random(args.seed).sample(local, args.sample)

    def check(rel):
        return rel, sha256_file(os.path.join(args.local, rel)) == sha256_file(os.path.join(args.mount, rel))
    with cf.ThreadPoolExecutor(max_workers=8) as ex:
        bad = [rel for rel, ok in ex.map(check, sample) if not ok]
    el = time.time() - t0
    if bad:
        print(f"verify: FAIL: {len(bad)} of {len(sample)} files differ by sha256 (e.g. {bad[:3]})")
        return 1
    print(f"verify: OK: {len(local)} paths match; sha256 identical for {len(sample)} files ({el:.1f}s)")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "verify":
        p = argparse.ArgumentParser(prog="mkdataset.py verify")
        p.add_argument("--local", required=True)
        p.add_argument("--mount", required=True)
        p.add_argument("--sample", type=int, default=0, help="hash only N random files (0: all)")
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--exclude", action="append", default=[],
                       help="top-level directory to leave out of both trees (repeatable)")
        return verify(p.parse_args(sys.argv[2:]))
    p = argparse.ArgumentParser(prog="mkdataset.py")
    p.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", required=True)
    p.add_argument("--limit", type=int, default=0, help="first N images of each split (0: all)")
    p.add_argument("--workers", type=int, default=max(1, os.cpu_count() or 1))
    return make(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
