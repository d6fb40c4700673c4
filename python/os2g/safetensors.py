"""Load and save safetensors checkpoints through the os2g daemon.

The safetensors format (Hugging Face, https://github.com/huggingface/safetensors)
is an 8-byte little-endian header length, a JSON header mapping each tensor
name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (plus an
optional ``"__metadata__"`` of strings), then the raw little-endian data.

:func:`load_safetensors` asks the daemon for the file's header (parsed and
validated in Go: length cap, offsets inside the file, no overlaps, known
dtypes, shape matching the byte span), checks each dtype and shape again
here, allocates the tensors on the device and has the daemon place every
tensor's bytes straight into its storage, with one ``place_batch`` request
per batch of up to ``batch`` tensors. The bytes never pass through this
process. A malformed file raises :class:`os2g.gdd.GDDError` with code
``malformed`` and places nothing; a tensor whose bytes do not match the
CRC-32C recorded in the header (``__metadata__["crc32c:<name>"]``, written by
:func:`save_safetensors`) raises code ``checksum`` naming the tensor.

:func:`save_safetensors` sends the daemon the tensors' device memory
(CUDA IPC handles) with names, dtypes and shapes; the daemon copies device
memory into pinned host blocks (device-to-host DMA), records each tensor's
CRC-32C in ``__metadata__`` and streams header and data out as a multipart
upload, committed only when every byte is in; a failure raises and leaves no
object. The file is a standard safetensors file any reader can load.

With a daemon on the simulated device (``--gdd-device sim``, for tests
without a GPU), ``device="sim"`` loads into CPU tensors through a
shared-memory file, and saving takes CPU tensors, copied into a
shared-memory file that stands in for device memory.
"""

from __future__ import annotations

import mmap
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import gdd

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

#: Element size in bytes of each safetensors dtype.
DTYPE_SIZES: Dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}

# safetensors dtype -> torch attribute name (absent in older torch: an error).
_TORCH_NAMES: Dict[str, str] = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "I16": "int16", "U16": "uint16", "F16": "float16", "BF16": "bfloat16",
    "I32": "int32", "U32": "uint32", "F32": "float32",
    "I64": "int64", "U64": "uint64", "F64": "float64",
}

#: Tensors per place_batch request.
DEFAULT_BATCH = 1024


def torch_dtype(st_dtype: str) -> Any:
    """The torch dtype of safetensors dtype ``st_dtype`` ("F32", "BF16",
    ...). ValueError for an unknown dtype or one this torch lacks."""
    name = _TORCH_NAMES.get(st_dtype)
    if name is None:
        raise ValueError("os2g safetensors: unknown dtype %r" % st_dtype)
    dt = getattr(torch, name, None)
    if dt is None:
        raise ValueError("os2g safetensors: dtype %s needs torch.%s, which torch %s lacks"
                         % (st_dtype, name, torch.__version__))
    return dt


def st_dtype(dtype: Any) -> str:
    """The safetensors dtype of torch dtype ``dtype``. ValueError if the
    format has none (complex, quantised)."""
    for st, name in _TORCH_NAMES.items():
        if getattr(torch, name, None) == dtype:
            return st
    raise ValueError("os2g safetensors: torch dtype %s has no safetensors dtype" % dtype)


def _check_entry(name: str, e: Mapping[str, Any]) -> Tuple[Any, Tuple[int, ...], int, int]:
    """Validate one header entry (as the daemon returns it); return
    (torch dtype, shape, begin, end)."""
    st = e.get("dtype")
    if st not in DTYPE_SIZES:
        raise ValueError("os2g safetensors: tensor %r has unknown dtype %r" % (name, st))
    shape = e.get("shape") or []
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError("os2g safetensors: tensor %r has a bad shape %r" % (name, shape))
    begin, end = int(e["begin"]), int(e["end"])
    n = DTYPE_SIZES[st]
    for d in shape:
        n *= d
    if n != end - begin:
        raise ValueError("os2g safetensors: tensor %r: shape %s of %s is %d bytes, its data %d"
                         % (name, shape, st, n, end - begin))
    return torch_dtype(st), tuple(shape), begin, end


def read_header(path: str, socket: Optional[str] = None, client: Optional[gdd.Client] = None) -> Dict[str, Any]:
    """The validated header of safetensors file ``path`` (a path under the
    mount or a key), as the daemon parsed it: ``{"tensors": [{"name",
    "dtype", "shape", "begin", "end"}], "metadata", "data_start",
    "data_size"}``, tensors in data order, offsets relative to data_start."""
    with gdd.connect(socket, client) as c:
        return c.call({"op": "safetensors_header", "path": path})["header"]


def _chunks(xs: Sequence[Any], n: int) -> List[Sequence[Any]]:
    return [xs[i:i + n] for i in range(0, len(xs), n)]


def load_safetensors(path: str, device: Any = "cuda:0", socket: Optional[str] = None,
                     client: Optional[gdd.Client] = None, batch: int = DEFAULT_BATCH,
                     shm_dir: str = "/dev/shm") -> Dict[str, Any]:
    """Return ``{name: tensor}`` of safetensors file ``path`` (under the
    mount, or an object key), each tensor on CUDA ``device`` with its bytes
    placed by the daemon straight into its storage. ``device="sim"`` (a
    simulated daemon) returns CPU tensors. Errors: ValueError for a
    non-CUDA device or a dtype/shape this torch cannot hold;
    :class:`os2g.gdd.GDDError` with code ``malformed`` (nothing placed),
    ``checksum`` (a tensor's bytes differ from the CRC-32C recorded for
    them), ``not_found`` and the other wire codes."""
    if batch < 1:
        raise ValueError("os2g safetensors: batch must be at least 1")
    sim = device == "sim"
    if not sim:
        dev = torch.device(device)
        if dev.type != "cuda":
            raise ValueError("os2g safetensors: device %s is not a CUDA device; load_safetensors places into "
                             "GPU memory (device='cuda:N', or 'sim' with a simulated daemon)" % dev)
    with gdd.connect(socket, client) as c:
        h = c.call({"op": "safetensors_header", "path": path})["header"]
        entries = []
        for e in h.get("tensors") or []:
            entries.append((e["name"],) + _check_entry(e["name"], e))
        start = int(h["data_start"])
        if sim:
            return _load_sim(c, path, entries, start, int(h.get("data_size", 0)), batch, shm_dir)
        out: Dict[str, Any] = {}
        for name, dt, shape, _, _ in entries:
            out[name] = torch.empty(shape, dtype=dt, device=dev)
        torch.cuda.current_stream(dev).synchronize()
        todo = [(name, b, e) for name, _, _, b, e in entries if e > b]
        for chunk in _chunks(todo, batch):
            items, releases = [], []
            try:
                for name, b, e in chunk:
                    dst, release = gdd.cuda_dest(out[name])
                    releases.append(release)
                    items.append({"offset": start + b, "length": e - b, "dst": dst})
                c.call({"op": "place_batch", "path": path, "items": items, "safetensors": True})
            finally:
                for release in releases:
                    release()
        return out


def _load_sim(c: gdd.Client, path: str, entries: List[Tuple[Any, ...]], start: int, size: int,
              batch: int, shm_dir: str) -> Dict[str, Any]:
    """Place every tensor into one shared-memory file (the simulated
    device's memory) and return CPU tensors that are views of its mapping:
    no byte is copied by this process. The file is unlinked at once; the
    mapping lives as long as the tensors."""
    name = "os2g-st-%d-%d" % (os.getpid(), id(entries))
    shm_path = os.path.join(shm_dir, name)
    with open(shm_path, "w+b") as f:
        try:
            f.truncate(max(size, 1))
            todo = [(b, e) for _, _, _, b, e in entries if e > b]
            for chunk in _chunks(todo, batch):
                items = [{"offset": start + b, "length": e - b, "dst": gdd.shm_dest(name, e - b, b)} for b, e in chunk]
                c.call({"op": "place_batch", "path": path, "items": items, "safetensors": True})
            m = mmap.mmap(f.fileno(), max(size, 1))
        finally:
            os.unlink(shm_path)
    out: Dict[str, Any] = {}
    for tname, dt, shape, b, e in entries:
        if e == b:
            out[tname] = torch.empty(shape, dtype=dt)
        else:
            count = (e - b) // torch.empty((), dtype=dt).element_size()
            out[tname] = torch.frombuffer(m, dtype=dt, count=count, offset=b).reshape(shape)
    return out


def save_safetensors(tensors: Mapping[str, Any], path: str, metadata: Optional[Mapping[str, str]] = None,
                     socket: Optional[str] = None, client: Optional[gdd.Client] = None,
                     shm_dir: str = "/dev/shm") -> int:
    """Write ``{name: tensor}`` as a safetensors object at ``path`` (under
    the mount, or an object key); return the object's size in bytes. The
    daemon reads the tensors' device memory itself: this process only sends
    their IPC handles. ``metadata`` (str to str) goes into
    ``__metadata__``; keys starting ``crc32c:`` are reserved. With a CUDA
    daemon every tensor must be a CUDA tensor (non-contiguous ones are made
    contiguous on the GPU first); with a simulated daemon, CPU tensors.
    Empty tensors are written with no bytes.
    Errors: ValueError for a bad tensor, name or dtype;
    :class:`os2g.gdd.GDDError` when the daemon refuses or the upload fails
    (then no object is left)."""
    if not isinstance(tensors, Mapping):
        raise ValueError("os2g safetensors: tensors must be a mapping of name to tensor")
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError("os2g safetensors: metadata must map str to str (%r: %r)" % (k, v))
    with gdd.connect(socket, client) as c:
        kind = c.info()["kind"]
        specs = []
        for name, t in tensors.items():
            if not isinstance(name, str) or not name:
                raise ValueError("os2g safetensors: tensor name %r must be a non-empty str" % (name,))
            if torch is None or not isinstance(t, torch.Tensor):
                raise ValueError("os2g safetensors: %r is a %s, not a torch.Tensor" % (name, type(t).__name__))
            specs.append((name, t, st_dtype(t.dtype), [int(d) for d in t.shape]))
        req: Dict[str, Any] = {"op": "save_safetensors", "path": path, "metadata": dict(metadata or {})}
        if kind == "sim":
            return _save_sim(c, req, specs, shm_dir)
        keep, tlist, releases = [], [], []
        try:
            for name, t, st, shape in specs:
                if isinstance(t, torch.Tensor) and t.is_cuda:
                    t = t.contiguous()  # a GPU copy if needed, never through the host
                gdd.check_cuda_tensor(t, "tensor %r" % name)
                keep.append(t)  # alive until the daemon has read it
                torch.cuda.current_stream(t.device).synchronize()
                if t.numel() == 0:
                    src = {"kind": "cuda", "handle": "", "size": 0, "device": t.device.index}
                else:
                    src, release = gdd.cuda_dest(t)
                    releases.append(release)
                tlist.append({"name": name, "dtype": st, "shape": shape, "src": src})
            req["tensors"] = tlist
            return int(c.call(req).get("bytes", 0))
        finally:
            for release in releases:
                release()


def _save_sim(c: gdd.Client, req: Dict[str, Any], specs: List[Tuple[str, Any, str, List[int]]], shm_dir: str) -> int:
    sizes = []
    for name, t, _, _ in specs:
        if t.is_cuda:
            raise ValueError("os2g safetensors: the daemon's device is simulated; tensor %r must be on the CPU" % name)
        sizes.append(t.numel() * t.element_size())
    name = "os2g-st-save-%d-%d" % (os.getpid(), id(specs))
    shm_path = os.path.join(shm_dir, name)
    with open(shm_path, "w+b") as f:
        try:
            off, tlist = 0, []
            for (tname, t, st, shape), n in zip(specs, sizes):
                if n == 0:
                    tlist.append({"name": tname, "dtype": st, "shape": shape, "src": {"kind": "sim", "handle": "", "size": 0}})
                    continue
                # The shared-memory file stands in for device memory.
                f.write(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
                tlist.append({"name": tname, "dtype": st, "shape": shape, "src": gdd.shm_dest(name, n, off)})
                off += n
            f.flush()
            req["tensors"] = tlist
            return int(c.call(req).get("bytes", 0))
        finally:
            os.unlink(shm_path)
