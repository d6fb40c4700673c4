"""The trainer side of the bench's ``tensors`` workload (bench/tensors.go).

One measured operation per invocation; prints one JSON line
``{"bytes", "seconds", "cpu"}`` where ``cpu`` is this process's user+system
CPU seconds over the measured part (the trainer's cost).

Modes (the daemon runs the simulated device; its "device memory" is a
shared-memory file, and the sim tensors are views of its mapping):

- ``load-gdd``: the daemon parses the header and places every tensor into
  device memory with place_batch; this process sends requests only.
- ``load-plain``: ``open``/``read`` the file, ``torch.frombuffer`` each
  tensor and copy it into device memory (``.to(device)``; on the sim, a copy
  into the shared-memory mapping, as the driver's pageable copy would be).
- ``save-gdd``: (after an unmeasured load-gdd) the daemon reads the tensors'
  device memory and writes the checkpoint; this process sends one request.
- ``save-plain``: (after an unmeasured load-gdd) copy each tensor to host
  memory (``.cpu()``; on the sim a copy out of the mapping) and write the
  file with ``write``.
"""

import argparse
import json
import mmap
import os
import resource
import struct
import sys
import time

import torch

from os2g import gdd
from os2g import safetensors as st


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def load_gdd(c: gdd.Client, name: str, shm_dir: str):
    """Place the checkpoint into a fresh shared-memory file; return the
    header and the mapping-backed tensors (and the shm name)."""
    h = c.call({"op": "safetensors_header", "path": name})["header"]
    start, size = int(h["data_start"]), int(h["data_size"])
    shm = "os2g-bench-%d" % os.getpid()
    path = os.path.join(shm_dir, shm)
    with open(path, "w+b") as f:
        f.truncate(size)
        items = [{"offset": start + e["begin"], "length": e["end"] - e["begin"],
                  "dst": gdd.shm_dest(shm, e["end"] - e["begin"], e["begin"])} for e in h["tensors"]]
        for i in range(0, len(items), st.DEFAULT_BATCH):
            c.call({"op": "place_batch", "path": name, "items": items[i:i + st.DEFAULT_BATCH], "safetensors": True})
        m = mmap.mmap(f.fileno(), size)
    tensors = {}
    for e in h["tensors"]:
        dt = st.torch_dtype(e["dtype"])
        n = (e["end"] - e["begin"]) // torch.empty((), dtype=dt).element_size()
        tensors[e["name"]] = torch.frombuffer(m, dtype=dt, count=n, offset=e["begin"]).reshape(e["shape"])
    return h, tensors, shm, path, m


def load_plain(path: str, dev_map: mmap.mmap):
    """open/read the file, then copy each tensor into device memory."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    start = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt = st.torch_dtype(e["dtype"])
        b, end = e["data_offsets"]
        es = torch.empty((), dtype=dt).element_size()
        host = torch.frombuffer(buf, dtype=dt, count=(end - b) // es, offset=start + b)
        dev = torch.frombuffer(dev_map, dtype=dt, count=(end - b) // es, offset=b)
        dev.copy_(host)  # .to(device): the pageable host-to-device copy
        out[name] = dev.reshape(e["shape"])
    return out, len(buf)


def save_plain(tensors, path: str) -> int:
    """.cpu() each tensor, then write a safetensors file."""
    layout, off = {}, 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        layout[name] = {"dtype": st.st_dtype(t.dtype), "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    js = json.dumps(layout, separators=(",", ":")).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js)
        for t in tensors.values():
            host = t.clone()  # .cpu(): the device-to-host copy
            f.write(memoryview(host.reshape(-1).view(torch.uint8).numpy()))
    return 8 + len(js) + off


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=["load-gdd", "load-plain", "save-gdd", "save-plain"])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True, help="the daemon's file directory")
    ap.add_argument("--file", required=True, help="checkpoint name in --dir")
    ap.add_argument("--shm-dir", default="/dev/shm")
    a = ap.parse_args()
    with gdd.Client(a.socket) as c:
        if a.mode == "load-plain":
            size = int(c.call({"op": "safetensors_header", "path": a.file})["header"]["data_size"])
            shm = os.path.join(a.shm_dir, "os2g-bench-plain-%d" % os.getpid())
            with open(shm, "w+b") as f:
                f.truncate(size)
                dev_map = mmap.mmap(f.fileno(), size)
            os.unlink(shm)
            t0, c0 = time.perf_counter(), cpu_seconds()
            _, n = load_plain(os.path.join(a.dir, a.file), dev_map)
        elif a.mode == "load-gdd":
            t0, c0 = time.perf_counter(), cpu_seconds()
            h, _, _, path, _ = load_gdd(c, a.file, a.shm_dir)
            n = int(h["data_start"]) + int(h["data_size"])
            os.unlink(path)
        else:
            h, tensors, shm, path, _ = load_gdd(c, a.file, a.shm_dir)
            out = "out-%s-%d.safetensors" % (a.mode, os.getpid())
            try:
                t0, c0 = time.perf_counter(), cpu_seconds()
                if a.mode == "save-gdd":
                    req = {"op": "save_safetensors", "path": out, "tensors": [
                        {"name": e["name"], "dtype": e["dtype"], "shape": e["shape"],
                         "src": gdd.shm_dest(shm, e["end"] - e["begin"], e["begin"])} for e in h["tensors"]]}
                    n = int(c.call(req)["bytes"])
                else:
                    n = save_plain(tensors, os.path.join(a.dir, out))
            finally:
                os.unlink(path)
            secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
            os.unlink(os.path.join(a.dir, out))
            print(json.dumps({"bytes": n, "seconds": secs, "cpu": cpu}))
            return 0
        secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    print(json.dumps({"bytes": n, "seconds": secs, "cpu": cpu}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
