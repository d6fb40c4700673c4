"""Exact-order hints: tell an os2g mount which files this rank reads next.

One added line in a training script, next to ``sampler.set_epoch(e)``::

    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        os2g.epoch.hint(dataset, sampler, epoch)
        for images, labels in loader:
            ...

:func:`hint` computes the order in which ``sampler`` will hand out indices
in the coming epoch (without consuming its randomness: the ``DataLoader``
then draws exactly that order), resolves the indices to file paths of
``dataset`` (``torchvision.datasets.ImageFolder`` / ``DatasetFolder``,
``Subset`` of them, or any dataset with ``samples`` or ``imgs``), and POSTs
the paths to the daemon serving the mount, over its control socket
(``/run/os2g/HASH.sock``; package ``hint`` of the Go daemon documents the
request). The daemon then pre-reads exactly those files, in that order, a
bounded window ahead of the reader, and nothing else; the ``DataLoader``
and the ``Dataset`` stay unmodified. Workers (``num_workers > 0``,
``persistent_workers``) do not matter: the sampler runs in the main
process and the workers open files in its order, give or take a few
batches.

Samplers whose order is known in advance: ``DistributedSampler`` (seeded by
``seed + epoch``), ``SequentialSampler``, and ``RandomSampler`` /
``SubsetRandomSampler`` built with ``generator=`` (its state is saved and
restored around the look-ahead). A ``RandomSampler`` without a generator
draws its seed from the global RNG when the ``DataLoader`` starts: its order
cannot be known, and :func:`hint` raises ``ValueError`` rather than send a
wrong order. A ``BatchSampler`` is flattened.

Pure Python; imports torch only to save and restore a generator's state.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
from typing import Any, Callable, Iterable, List, Optional, Sequence

__all__ = ["hint", "order", "paths_of", "find_mount", "socket_paths", "HintError"]


class HintError(RuntimeError):
    """The daemon refused the hint (a path outside the mount, no listed
    file) or could not be reached. ``status`` is the HTTP status (0 when
    no daemon answered)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def order(sampler: Any, epoch: Optional[int] = None) -> List[int]:
    """Return the indices ``sampler`` will yield in its next iteration,
    flattened (a list of ints), without changing what it will yield.

    ``epoch`` is passed to ``sampler.set_epoch`` first when given and the
    sampler has one. Raises ``ValueError`` for a sampler whose order is
    drawn from the global RNG at iteration time.
    """
    if epoch is not None and hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    inner = getattr(sampler, "sampler", None)
    if inner is not None and hasattr(sampler, "batch_size"):  # BatchSampler
        return order(inner)
    name = type(sampler).__name__
    gen = getattr(sampler, "generator", "absent")
    if gen is None and name in ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler"):
        raise ValueError(
            f"{name} without a generator draws its order from the global RNG when the DataLoader "
            "starts, so it cannot be known in advance; build it with "
            "generator=torch.Generator().manual_seed(seed)"
        )
    state = None
    if gen not in (None, "absent"):
        state = gen.get_state()
    try:
        out: List[int] = []
        for item in iter(sampler):
            if isinstance(item, (list, tuple)):
                out.extend(int(i) for i in item)
            else:
                out.append(int(item))
        return out
    finally:
        if state is not None:
            gen.set_state(state)


def paths_of(dataset: Any, indices: Iterable[int]) -> List[str]:
    """Return the file path of each index of ``dataset``: ``samples[i][0]``
    (ImageFolder, DatasetFolder), ``imgs[i][0]``, or ``paths[i]``; a
    ``Subset`` maps its indices first. Raises ``TypeError`` for a dataset
    that names no files."""
    while hasattr(dataset, "dataset") and hasattr(dataset, "indices"):  # Subset
        sub = dataset.indices
        indices = [sub[i] for i in indices]
        dataset = dataset.dataset
    for attr in ("samples", "imgs"):
        items = getattr(dataset, attr, None)
        if items is not None:
            return [str(items[i][0]) for i in indices]
    items = getattr(dataset, "paths", None)
    if items is not None:
        return [str(items[i]) for i in indices]
    raise TypeError(
        f"{type(dataset).__name__} names no files (no samples, imgs or paths attribute); "
        "pass paths=... to os2g.epoch.hint"
    )


def find_mount(path: str) -> str:
    """Return the mount point that holds ``path`` (absolute, symbolic
    links resolved), the way the daemon names it."""
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def socket_paths(mountpoint: str) -> List[str]:
    """Return the places of the control socket of the mount at
    ``mountpoint``, in the daemon's order: /run/os2g, then os2g-UID under
    $TMPDIR (or /tmp). The name is the first 16 hex digits of the SHA-256
    of the mount point, plus ".sock"."""
    name = hashlib.sha256(mountpoint.encode()).hexdigest()[:16] + ".sock"
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return [os.path.join("/run/os2g", name), os.path.join(tmp, f"os2g-{os.geteuid()}", name)]


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("os2g", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def _relative(paths: Sequence[str], mountpoint: str) -> List[str]:
    """Paths relative to mountpoint; directories' symbolic links are
    resolved once per directory. A path outside the mount is sent as it
    is, for the daemon to refuse with a clear error."""
    real = {}
    out = []
    prefix = mountpoint.rstrip("/") + "/"
    for p in paths:
        d, base = os.path.split(os.path.abspath(p))
        rd = real.get(d)
        if rd is None:
            rd = real[d] = os.path.realpath(d)
        full = os.path.join(rd, base)
        out.append(full[len(prefix):] if full.startswith(prefix) else full)
    return out


def send(
    files: Sequence[str], mountpoint: str, epoch: Optional[int] = None, stream: str = "", timeout: float = 30.0
) -> dict:
    """POST ``files`` (paths relative to the mount point, or absolute
    under it) to the daemon of ``mountpoint`` and return its reply
    (``{"files": N, "unknown": U, "duplicates": D}``). ``stream`` names
    the reader: each stream's hint replaces only that stream's previous
    one (ranks of one node sharing a mount). Raises :class:`HintError`."""
    body = json.dumps({"files": list(files), "epoch": epoch, "stream": stream}).encode()
    errors = []
    for sock in socket_paths(mountpoint):
        if not os.path.exists(sock):
            continue
        conn = _UnixHTTPConnection(sock, timeout)
        try:
            conn.request("POST", "/hint", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            errors.append(f"{sock}: {e}")
            continue
        finally:
            conn.close()
        try:
            reply = json.loads(data or b"{}")
        except ValueError:
            reply = {"error": data.decode(errors="replace")}
        if resp.status != 200:
            raise HintError(f"os2g refused the hint for {mountpoint}: {reply.get('error', resp.reason)}", resp.status)
        return reply
    raise HintError(
        f"no os2g daemon serves {mountpoint} (no control socket at {', '.join(socket_paths(mountpoint))})"
        + (f": {'; '.join(errors)}" if errors else "")
    )


def hint(
    dataset: Any,
    sampler: Any,
    epoch: Optional[int] = None,
    *,
    paths: Optional[Callable[[Any, Iterable[int]], List[str]]] = None,
    mountpoint: Optional[str] = None,
    stream: Optional[str] = None,
    timeout: float = 30.0,
) -> dict:
    """Tell the os2g mount holding ``dataset`` the files this rank reads
    in the coming epoch, in order. Call it after ``sampler.set_epoch(epoch)``
    (or pass ``epoch``, which calls it) and before iterating the
    ``DataLoader``.

    ``paths(dataset, indices)`` maps indices to file paths (default
    :func:`paths_of`); ``mountpoint`` overrides the mount found from the
    first path; ``stream`` names this reader for the daemon (default
    ``"rank<R>"`` for a sampler with a ``rank``, so that the ranks of one
    node sharing a mount each keep their own hint; else ``"pid<PID>"``).
    Returns the daemon's reply (``files``: files it will
    pre-read; ``unknown``: paths in directories it has not listed yet;
    ``duplicates``). Raises ``ValueError`` for a sampler whose order cannot
    be known, ``TypeError`` for a dataset without file paths, and
    :class:`HintError` when the daemon refuses the hint or is not found.
    """
    idx = order(sampler, epoch)
    files = (paths or paths_of)(dataset, idx)
    if not files:
        raise ValueError("the sampler yields no index: nothing to hint")
    mp = mountpoint or find_mount(os.path.dirname(os.path.abspath(files[0])))
    if stream is None:
        rank = getattr(sampler, "rank", None)
        stream = f"rank{rank}" if rank is not None else f"pid{os.getpid()}"
    return send(_relative(files, mp), mp, epoch=epoch, stream=stream, timeout=timeout)
