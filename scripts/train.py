#!/usr/bin/python3
"""Train a ResNet-18 on an ImageFolder tree (the os2g demo's workload).

    train.py --data DIR [--steps N] [--batch-size B] [--workers W]
             [--checkpoint PATH] [--eval-images N] [--json PATH]

DIR holds train/CLASS/*.png (and optionally test/CLASS/*.png). This is plain,
unmodified PyTorch: torchvision.datasets.ImageFolder and a shuffled
DataLoader with worker processes read the files through ordinary open()
calls, so pointing DIR at an os2g mount is the whole integration.

The model is torchvision.models.resnet18(num_classes=10) with its first
convolution taking 1 channel (Fashion-MNIST is grayscale), trained on CPU with
SGD for --steps batches of 28x28 images (or until --max-seconds). Every --log-every steps it prints the
running loss and the images/s delivered to the model. Then it evaluates on
--eval-images test images (if a test/ tree exists), saves a checkpoint with
torch.save to --checkpoint (e.g. inside the mount), loads it back with
torch.load and checks that every tensor is identical and that the file's bytes
equal those of the same torch.save to local disk. It exits 1 if the loss did not go
down or a check failed, and writes its figures to --json if given.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings

import torch
import torch.nn as nn
import torchvision
from torchvision import transforms


def build_model():
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return m


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--max-seconds", type=float, default=0,
                   help="also stop training after this many seconds (0: no limit)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--checkpoint", default="")
    p.add_argument("--eval-images", type=int, default=1000)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="")
    a = p.parse_args()

    # DataLoader warns when workers outnumber cores; the demo means it.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    tf = transforms.Compose([
        transforms.Grayscale(num_output_channels=1),
        transforms.ToTensor(),
        transforms.Normalize((0.2860,), (0.3530,)),
    ])
    t0 = time.time()
    train = torchvision.datasets.ImageFolder(os.path.join(a.data, "train"), transform=tf)
    print(f"train.py: ImageFolder {os.path.join(a.data, 'train')}: {len(train)} images, "
          f"{len(train.classes)} classes, indexed in {time.time() - t0:.1f}s", flush=True)
    loader = torch.utils.data.DataLoader(
        train, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
        persistent_workers=False, drop_last=True)

    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    lossf = nn.CrossEntropyLoss()
    model.train()

    step, seen, window_loss, window_n = 0, 0, 0.0, 0
    losses = []
    t_start = time.time()
    t_win = t_start
    seen_win = 0
    done = False
    while not done:
        for x, y in loader:
            out = model(x)
            loss = lossf(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            seen += x.shape[0]
            seen_win += x.shape[0]
            window_loss += loss.item()
            window_n += 1
            if step % a.log_every == 0 or step == a.steps:
                now = time.time()
                avg = window_loss / window_n
                losses.append(avg)
                print(f"train.py: step {step:4d}/{a.steps}  loss {avg:.4f}  "
                      f"{seen_win / (now - t_win):6.1f} images/s", flush=True)
                window_loss, window_n, t_win, seen_win = 0.0, 0, now, 0
            if step >= a.steps or (a.max_seconds and time.time() - t_start >= a.max_seconds):
                if step < a.steps:
                    print(f"train.py: stopping at step {step}: --max-seconds {a.max_seconds:g} reached", flush=True)
                done = True
                break
    if window_n:  # the partial window before an early stop
        now = time.time()
        losses.append(window_loss / window_n)
        print(f"train.py: step {step:4d}/{a.steps}  loss {losses[-1]:.4f}  "
              f"{seen_win / (now - t_win):6.1f} images/s", flush=True)
    train_s = time.time() - t_start
    ips = seen / train_s
    print(f"train.py: trained {step} steps, {seen} images in {train_s:.1f}s ({ips:.1f} images/s)", flush=True)

    result = {"steps": step, "images": seen, "train_seconds": round(train_s, 1),
              "images_per_second": round(ips, 1), "first_loss": losses[0], "last_loss": losses[-1]}
    ok = True
    if len(losses) >= 2 and not losses[-1] < losses[0]:
        print(f"train.py: FAIL: loss did not go down ({losses[0]:.4f} -> {losses[-1]:.4f})")
        ok = False

    test_dir = os.path.join(a.data, "test")
    if a.eval_images and os.path.isdir(test_dir):
        test = torchvision.datasets.ImageFolder(test_dir, transform=tf)
        g = torch.Generator().manual_seed(1)
        idx = torch.randperm(len(test), generator=g)[:a.eval_images].tolist()
        tl = torch.utils.data.DataLoader(torch.utils.data.Subset(test, idx), batch_size=250,
                                         num_workers=a.workers)
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in tl:
                correct += (model(x).argmax(1) == y).sum().item()
                total += y.numel()
        acc = correct / max(total, 1)
        print(f"train.py: test accuracy {acc * 100:.1f}% on {total} held-out images (chance: 10%)", flush=True)
        result["test_accuracy"] = round(acc, 4)

    if a.checkpoint:
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
        os.makedirs(os.path.dirname(os.path.abspath(a.checkpoint)), exist_ok=True)
        t0 = time.time()
        torch.save(state, a.checkpoint)
        save_s = time.time() - t0
        # The reference bytes: the same torch.save to local disk under the
        # same file name (the name is recorded inside the zip archive).
        with tempfile.TemporaryDirectory() as td:
            ref = os.path.join(td, os.path.basename(a.checkpoint))
            torch.save(state, ref)
            with open(ref, "rb") as f:
                want = f.read()
        t0 = time.time()
        with open(a.checkpoint, "rb") as f:
            got = f.read()
        back = torch.load(a.checkpoint, map_location="cpu")
        load_s = time.time() - t0
        same_tensors = back["step"] == step and all(
            torch.equal(v, back["model"][k]) for k, v in state["model"].items()) and \
            set(back["model"]) == set(state["model"])
        same_bytes = got == want
        size = os.path.getsize(a.checkpoint)
        print(f"train.py: checkpoint {a.checkpoint}: {size / 2**20:.1f} MiB, saved in {save_s:.2f}s, "
              f"read back in {load_s:.2f}s, sha256 {hashlib.sha256(got).hexdigest()[:16]}..., "
              f"tensors identical: {same_tensors}, bytes identical: {same_bytes}", flush=True)
        result.update(checkpoint_bytes=size, checkpoint_tensors_identical=same_tensors,
                      checkpoint_bytes_identical=same_bytes)
        if not (same_tensors and same_bytes and size == len(want)):
            print("train.py: FAIL: checkpoint round trip through the file system changed it")
            ok = False

    result["ok"] = ok
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
