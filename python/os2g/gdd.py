"""os2g GPU direct placement (GDD) client.

Asks a running os2g daemon to place a file's bytes straight into GPU memory
that this process owns, instead of ``read()`` + ``.cuda()``: the daemon reads
the object into pinned host memory and DMAs it into the tensor, so this
process never touches the bytes.

Pure Python (standard library; PyTorch for tensors). Wire format: version 1,
specified in docs/gdd.md -- each message is a 4-byte big-endian length and a
JSON object.

Typical use::

    from os2g import gdd
    t = gdd.load("/mnt/data/weights.bin", torch.float16, (4096, 4096))
    gdd.load_into(existing_cuda_tensor, "/mnt/data/shard-0001.bin", offset=1 << 20)
    ds = gdd.RecordDataset("/mnt/data/train.bin", record_bytes=3 * 224 * 224,
                           dtype=torch.uint8, shape=(3, 224, 224))
    loader = torch.utils.data.DataLoader(ds, shuffle=True, num_workers=4)

Every function that talks to the daemon takes the socket as ``socket=``
(default :func:`default_socket`: ``$OS2G_GDD_SOCKET``, else
``/run/os2g/gdd.sock``, the path README's ``os2g mount --gdd-socket`` uses),
or an open :class:`Client` as ``client=``.

How a tensor becomes a destination: by default the CUDA driver is asked
directly, through ctypes (libcuda.so.1, already loaded by PyTorch), for the
allocation containing ``tensor.data_ptr()`` (cuMemGetAddressRange) and its IPC
handle (cuIpcGetMemHandle); the destination offset is ``data_ptr - base`` and
its size the tensor's byte count, so the daemon never writes outside the
tensor. This works the same on every torch version.

``handle_source="torch"`` uses ``storage._share_cuda_()`` instead. In torch
1.13 and 2.x it returns ``(device, handle, storage_size_bytes,
storage_offset_bytes, ref_counter_handle, ref_counter_offset, event_handle,
event_sync_required)``; ``handle`` is the raw 64-byte ``cudaIpcMemHandle_t``
in torch 1.x, while newer torch prefixes a version byte and a type byte
(``b'c'`` for a cudaMalloc block, followed by the 64 bytes; ``b'e'`` for an
expandable segment, which cuIpcOpenMemHandle cannot open and is refused
here). The destination offset is then ``storage_offset_bytes`` plus
``storage_offset() * element_size()``. Each ``_share_cuda_`` call also wraps
the storage in a reference-counted "sent data" record with its counter at 1;
this client releases the counter (``UntypedStorage._release_ipc_counter_cuda``)
once the placement is done, as a torch consumer process would.

The daemon keeps a handle open for as long as the connection that used it;
closing a :class:`Client` (or process exit) releases the mappings.
"""

from __future__ import annotations

import base64
import json
import os
import socket as _socket
import struct
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

WIRE_VERSION = 1
MAX_FRAME = 16 << 20  # bytes; as gdd.MaxFrame
IPC_HANDLE_SIZE = 64
#: The socket used when none is given and $OS2G_GDD_SOCKET is unset.
FALLBACK_SOCKET = "/run/os2g/gdd.sock"

try:  # torch is optional for the shared-memory (simulated device) path
    import torch
    from torch.utils.data import Dataset as _MapBase
    from torch.utils.data import IterableDataset as _IterBase
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]
    _MapBase = object  # type: ignore[assignment,misc]
    _IterBase = object  # type: ignore[assignment,misc]

Dest = Dict[str, Any]
Result = Tuple[int, int]  # (bytes placed, CRC32C of them)


def default_socket() -> str:
    """The daemon socket used when none is given: ``$OS2G_GDD_SOCKET`` if
    set, else ``/run/os2g/gdd.sock``."""
    return os.environ.get("OS2G_GDD_SOCKET") or FALLBACK_SOCKET


class GDDError(Exception):
    """An error the daemon reported, with its wire ``code`` and the
    ``socket`` of the daemon that reported it.

    Codes: bad_request, bad_version, not_found, past_eof, dst_too_small,
    bad_handle, device, changed, canceled, checksum, io.
    """

    def __init__(self, code: str, message: str, socket: Optional[str] = None) -> None:
        where = " (daemon %s)" % socket if socket else ""
        super().__init__("%s: %s%s" % (code, message, where))
        self.code = code
        self.message = message
        self.socket = socket


class GDDConnectionError(ConnectionError):
    """The daemon's socket could not be reached, or the connection broke;
    the message names the socket path."""


class Client:
    """A connection to the daemon at ``socket`` (default
    :func:`default_socket`). Thread-safe; several requests may be in flight
    (:meth:`submit` then :meth:`wait`). ``timeout`` (seconds) bounds each
    socket operation; None waits forever."""

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None) -> None:
        self.socket = socket or default_socket()
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        if timeout is not None:
            self._sock.settimeout(timeout)
        try:
            self._sock.connect(self.socket)
        except OSError as e:
            self._sock.close()
            hint = ""
            if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
                hint = " (is the daemon running with --gdd-socket %s? set socket= or $OS2G_GDD_SOCKET)" % self.socket
            raise GDDConnectionError("os2g gdd: cannot connect to the daemon socket %s: %s%s"
                                     % (self.socket, e.strerror or e, hint)) from e
        self._wlock = threading.Lock()
        self._cond = threading.Condition()
        self._reading = False  # a thread is reading frames (guarded by _cond)
        self._replies: Dict[int, Dict[str, Any]] = {}  # id -> reply (guarded by _cond)
        self._next_id = 0
        self._error: Optional[BaseException] = None

    def close(self) -> None:
        """Close the connection (the daemon then drops its IPC mappings)."""
        self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- framing ---------------------------------------------------------

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise GDDConnectionError("os2g gdd: the daemon at %s closed the connection" % self.socket)
            buf += chunk
        return bytes(buf)

    def _read_frame(self) -> Dict[str, Any]:
        (n,) = struct.unpack(">I", self._recv_exact(4))
        if n == 0 or n > MAX_FRAME:
            raise GDDConnectionError("os2g gdd: bad frame length %d from %s" % (n, self.socket))
        return json.loads(self._recv_exact(n).decode("utf-8"))

    def submit(self, req: Dict[str, Any]) -> int:
        """Send a request dict (``v`` and ``id`` are filled in); return its id."""
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        msg = dict(req, v=WIRE_VERSION, id=rid)
        body = json.dumps(msg, separators=(",", ":")).encode("utf-8")
        if len(body) > MAX_FRAME:
            raise ValueError("os2g gdd: request of %d bytes exceeds the %d-byte frame limit" % (len(body), MAX_FRAME))
        try:
            with self._wlock:
                self._sock.sendall(struct.pack(">I", len(body)) + body)
        except OSError as e:
            raise GDDConnectionError("os2g gdd: send to %s: %s" % (self.socket, e)) from e
        return rid

    def wait_reply(self, rid: int) -> Dict[str, Any]:
        """Wait for the reply to request ``rid``; return it as a dict."""
        with self._cond:
            while True:
                if rid in self._replies:
                    return self._replies.pop(rid)
                if self._error is not None:
                    raise self._error
                if not self._reading:
                    break
                self._cond.wait()
            self._reading = True
        try:
            while True:
                try:
                    r = self._read_frame()
                except Exception as e:  # the connection is gone for everyone
                    if isinstance(e, OSError) and not isinstance(e, GDDConnectionError):
                        e = GDDConnectionError("os2g gdd: receive from %s: %s" % (self.socket, e))
                    with self._cond:
                        self._error = e
                        self._cond.notify_all()
                    raise e
                with self._cond:
                    if r.get("id") == rid:
                        return r
                    self._replies[r.get("id")] = r
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()

    def check(self, r: Dict[str, Any]) -> Dict[str, Any]:
        """Raise :class:`GDDError` if reply ``r`` carries an error; return r."""
        err = r.get("error")
        if err:
            raise GDDError(err.get("code", "io"), err.get("message", ""), self.socket)
        return r

    def call(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """Send ``req``, wait for its reply and return it (errors raised)."""
        return self.check(self.wait_reply(self.submit(req)))

    def wait(self, rid: int) -> Result:
        """Wait for placement ``rid``; return ``(bytes_placed, crc32c)``."""
        r = self.check(self.wait_reply(rid))
        return r.get("bytes", 0), r.get("crc32c", 0)

    def submit_place(self, path: str, dst: Dest, offset: int = 0, length: Optional[int] = None) -> int:
        """Start placing ``length`` bytes (None: to the end) of ``path`` from
        ``offset`` into ``dst`` (from :func:`cuda_dest` or :func:`shm_dest`)."""
        req: Dict[str, Any] = {"op": "place", "path": path, "offset": int(offset), "dst": dst}
        if length is not None:
            req["length"] = int(length)
        return self.submit(req)

    def place(self, path: str, dst: Dest, offset: int = 0, length: Optional[int] = None) -> Result:
        """Place bytes and wait; return ``(bytes_placed, crc32c)``."""
        return self.wait(self.submit_place(path, dst, offset, length))

    def place_batch(self, path: str, items: Sequence[Dict[str, Any]]) -> List[Result]:
        """Place several ranges of one file in one request. Each item is
        ``{"offset", "length", "dst"}`` and optionally ``"crc32c"`` (the
        expected checksum: a mismatch fails the whole batch with code
        ``checksum``). Returns one ``(bytes, crc32c)`` per item."""
        r = self.call({"op": "place_batch", "path": path, "items": list(items)})
        return [(it.get("bytes", 0), it.get("crc32c", 0)) for it in r.get("items", [])]

    def stat(self, path: str) -> int:
        """Return the size of ``path`` in bytes."""
        return self.call({"op": "stat", "path": path}).get("size", 0)

    def info(self) -> Dict[str, Any]:
        """Return the daemon's device: ``{"kind", "device", "block_size"}``."""
        return self.call({"op": "info"})["info"]


# -- destinations -----------------------------------------------------------


def _normalize_handle(handle: bytes) -> bytes:
    handle = bytes(handle)
    if len(handle) == IPC_HANDLE_SIZE:  # torch 1.x: raw cudaIpcMemHandle_t
        return handle
    if len(handle) >= 2 + IPC_HANDLE_SIZE and handle[1] == ord("c"):  # [version]['c'][64 bytes]
        return handle[2:2 + IPC_HANDLE_SIZE]
    if len(handle) >= 2 and handle[1] == ord("e"):
        raise GDDError("bad_handle", "tensor lives in a CUDA expandable segment; "
                       "unset PYTORCH_CUDA_ALLOC_CONF=expandable_segments")
    raise GDDError("bad_handle", "unrecognised CUDA IPC handle of %d bytes" % len(handle))


class _Driver:
    """The few CUDA driver calls the client needs, through ctypes."""

    def __init__(self) -> None:
        import ctypes
        self.ct = ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        self.range = lib.cuMemGetAddressRange_v2
        self.range.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
        self.range.restype = ctypes.c_int
        self.handle = lib.cuIpcGetMemHandle
        self.handle.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        self.handle.restype = ctypes.c_int
        self.errname = lib.cuGetErrorName
        self.errname.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.errname.restype = ctypes.c_int

    def _check(self, call: str, r: int) -> None:
        if r != 0:
            name = self.ct.c_char_p()
            self.errname(r, self.ct.byref(name))
            raise GDDError("device", "%s: CUDA error %d %s" % (call, r, (name.value or b"?").decode()))

    def allocation(self, ptr: int) -> Tuple[int, int, bytes]:
        """Return ``(base, size, handle_bytes)`` of the allocation holding ptr."""
        base, size = self.ct.c_uint64(), self.ct.c_size_t()
        self._check("cuMemGetAddressRange", self.range(self.ct.byref(base), self.ct.byref(size), ptr))
        buf = self.ct.create_string_buffer(IPC_HANDLE_SIZE)
        self._check("cuIpcGetMemHandle", self.handle(buf, base.value))
        return base.value, size.value, buf.raw


_DRIVER: List[_Driver] = []


def _driver() -> _Driver:
    if not _DRIVER:
        _DRIVER.append(_Driver())
    return _DRIVER[0]


def check_cuda_tensor(tensor: Any, what: str = "tensor") -> None:
    """Raise ValueError (never an assertion) unless ``tensor`` is a
    contiguous torch tensor in CUDA memory."""
    if torch is None or not isinstance(tensor, torch.Tensor):
        raise ValueError("os2g gdd: %s must be a torch.Tensor, not %s" % (what, type(tensor).__name__))
    if not tensor.is_cuda:
        raise ValueError("os2g gdd: %s is on device %s; GPU direct placement needs a CUDA tensor "
                         "(create it with device='cuda', or read the file with open()/read() for a CPU tensor)"
                         % (what, tensor.device))
    if not tensor.is_contiguous():
        raise ValueError("os2g gdd: %s must be contiguous (call .contiguous() first)" % what)


def cuda_dest(tensor: Any, device: Optional[int] = None,
              handle_source: str = "driver") -> Tuple[Dest, Callable[[], None]]:
    """Describe a contiguous CUDA tensor as a placement destination.

    Returns ``(dst, release)``: ``dst`` goes into a place request, and
    ``release()`` must be called once the placement has finished (it
    releases torch's IPC reference counter with ``handle_source="torch"``;
    otherwise it does nothing). ``device`` overrides the ordinal sent (the
    daemon's numbering, if its CUDA_VISIBLE_DEVICES differs from ours).
    ValueError for a CPU or non-contiguous tensor."""
    check_cuda_tensor(tensor)
    nbytes = tensor.numel() * tensor.element_size()
    ordinal = tensor.device.index if device is None else int(device)
    release: Callable[[], None] = _noop
    if handle_source == "driver":
        with torch.cuda.device(tensor.device):
            base, _, handle = _driver().allocation(tensor.data_ptr())
        offset = tensor.data_ptr() - base
    elif handle_source == "torch":
        storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
        shared = storage._share_cuda_()
        handle = _normalize_handle(shared[1])
        offset = int(shared[3]) + tensor.storage_offset() * tensor.element_size()
        ref_handle, ref_offset = shared[4], shared[5]

        def release() -> None:
            torch.UntypedStorage._release_ipc_counter_cuda(ref_handle, ref_offset)
    else:
        raise ValueError("os2g gdd: handle_source must be 'driver' or 'torch'")
    dst = {"kind": "cuda", "handle": base64.b64encode(handle).decode("ascii"),
           "offset": offset, "size": nbytes, "device": ordinal}
    return dst, release


def _noop() -> None:
    pass


def shm_dest(name: str, size: int, offset: int = 0) -> Dest:
    """A simulated-device destination: ``size`` bytes at ``offset`` of the
    file ``name`` in the daemon's shared-memory directory (/dev/shm)."""
    return {"kind": "sim", "handle": base64.b64encode(name.encode("utf-8")).decode("ascii"),
            "offset": int(offset), "size": int(size)}


class _Conn:
    """``client`` if given, else a new Client on ``socket`` closed on exit."""

    def __init__(self, socket: Optional[str], client: Optional[Client]) -> None:
        self.own = client is None
        self.client = client if client is not None else Client(socket)

    def __enter__(self) -> Client:
        return self.client

    def __exit__(self, *exc: Any) -> None:
        if self.own:
            self.client.close()


def connect(socket: Optional[str] = None, client: Optional[Client] = None) -> _Conn:
    """A context manager yielding ``client``, or a new :class:`Client` on
    ``socket`` that is closed on exit."""
    return _Conn(socket, client)


def load_into(tensor: Any, path: str, offset: int = 0, length: Optional[int] = None,
              socket: Optional[str] = None, client: Optional[Client] = None,
              device: Optional[int] = None, handle_source: str = "driver") -> Result:
    """Fill CUDA ``tensor`` with ``length`` bytes (default: the tensor's
    size) of ``path`` starting at ``offset``. Returns ``(bytes, crc32c)``.

    Pending work on the tensor's current stream is waited for first, so the
    daemon never races a kernel that still uses the memory; when this
    returns, the bytes are in device memory. ValueError for a CPU tensor;
    GDDError for what the daemon refuses."""
    check_cuda_tensor(tensor)
    torch.cuda.current_stream(tensor.device).synchronize()
    dst, release = cuda_dest(tensor, device, handle_source)
    if length is None:
        length = dst["size"]
    try:
        with connect(socket, client) as c:
            return c.place(path, dst, offset, length)
    finally:
        release()


def load(path: str, dtype: Any, shape: Sequence[int], offset: int = 0, device: Any = "cuda",
         socket: Optional[str] = None, client: Optional[Client] = None) -> Any:
    """Return a new tensor of ``dtype`` and ``shape`` on CUDA ``device``
    filled from ``path`` at ``offset``."""
    t = torch.empty(tuple(shape), dtype=dtype, device=device)
    n = t.numel() * t.element_size()
    if n:
        load_into(t, path, offset, n, socket=socket, client=client)
    return t


def load_into_shm(shm_name: str, path: str, offset: int = 0, length: Optional[int] = None,
                  shm_offset: int = 0, size: Optional[int] = None, socket: Optional[str] = None,
                  client: Optional[Client] = None, shm_dir: str = "/dev/shm") -> Result:
    """Place bytes of ``path`` into the shared-memory file ``shm_name``
    (simulated device; tests). ``size`` defaults to the file's length past
    ``shm_offset``; ``length`` to ``size``. Returns ``(bytes, crc32c)``."""
    if size is None:
        size = os.path.getsize(os.path.join(shm_dir, shm_name)) - shm_offset
    if length is None:
        length = size
    with connect(socket, client) as c:
        return c.place(path, shm_dest(shm_name, size, shm_offset), offset, length)


class _ShmSlots:
    """A shared-memory file of ``slots`` records, for the simulated device:
    the daemon places into it, the caller copies records out."""

    def __init__(self, shm_dir: str, record_bytes: int, slots: int) -> None:
        import mmap
        self.name = "os2g-gdd-%d-%d" % (os.getpid(), id(self))
        self.path = os.path.join(shm_dir, self.name)
        self.record_bytes = record_bytes
        with open(self.path, "w+b") as f:
            f.truncate(slots * record_bytes)
            self.map = mmap.mmap(f.fileno(), slots * record_bytes)

    def dest(self, slot: int) -> Dest:
        return shm_dest(self.name, self.record_bytes, slot * self.record_bytes)

    def read(self, slot: int) -> bytes:
        return bytes(self.map[slot * self.record_bytes:(slot + 1) * self.record_bytes])

    def close(self) -> None:
        self.map.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _record_bytes(dtype: Any, shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n * torch.empty((), dtype=dtype).element_size()


class RecordDataset(_MapBase):
    """Map-style dataset of fixed-size records of one file: item ``i`` is
    bytes ``[i*record_bytes, (i+1)*record_bytes)`` placed by the daemon into
    a new tensor of ``dtype``/``shape`` on ``device``.

    Being map-style (``len`` and ``ds[i]``), it shuffles like any dataset:
    ``DataLoader(ds, shuffle=True)`` or any Sampler. Each process (the main
    one and every DataLoader worker) opens its own connection on first use.
    ``device="sim"`` uses a simulated daemon (shared-memory files in
    ``shm_dir``) and yields CPU tensors; it exists for tests without a GPU.
    ``start``/``stop`` select a record range (``stop`` None: to the end).
    ValueError if ``shape`` of ``dtype`` is not ``record_bytes`` bytes.
    """

    def __init__(self, path: str, record_bytes: int, dtype: Any, shape: Sequence[int],
                 device: Any = "cuda", socket: Optional[str] = None, start: int = 0,
                 stop: Optional[int] = None, shm_dir: str = "/dev/shm") -> None:
        super().__init__()
        self.path, self.record_bytes = path, int(record_bytes)
        self.dtype, self.shape, self.device = dtype, tuple(shape), device
        self.socket, self.shm_dir = socket, shm_dir
        self.start = int(start)
        if self.record_bytes <= 0:
            raise ValueError("os2g gdd: record_bytes must be positive, not %d" % self.record_bytes)
        if _record_bytes(dtype, self.shape) != self.record_bytes:
            raise ValueError("os2g gdd: shape %s of %s is not %d bytes" % (self.shape, dtype, self.record_bytes))
        if stop is None:
            with Client(socket) as c:
                stop = c.stat(path) // self.record_bytes
        self.stop = int(stop)
        self._pid = -1
        self._client: Optional[Client] = None
        self._slots: Optional[_ShmSlots] = None

    def __len__(self) -> int:
        return max(0, self.stop - self.start)

    def __getstate__(self) -> Dict[str, Any]:
        st = dict(self.__dict__)
        st["_pid"], st["_client"], st["_slots"] = -1, None, None
        return st

    def _conn(self) -> Client:
        if self._pid != os.getpid() or self._client is None:
            self._pid = os.getpid()  # a forked worker opens its own connection
            self._client = Client(self.socket)
            self._slots = _ShmSlots(self.shm_dir, self.record_bytes, 1) if self.device == "sim" else None
        return self._client

    def __getitem__(self, i: int) -> Any:
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("os2g gdd: record %d of %d" % (i, len(self)))
        c = self._conn()
        off = (self.start + i) * self.record_bytes
        if self._slots is not None:
            c.place(self.path, self._slots.dest(0), off, self.record_bytes)
            return torch.frombuffer(bytearray(self._slots.read(0)), dtype=self.dtype).reshape(self.shape)
        t = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        load_into(t, self.path, off, self.record_bytes, client=c)
        return t

    def close(self) -> None:
        """Close this process's connection and shared-memory slot."""
        if self._client is not None and self._pid == os.getpid():
            self._client.close()
            if self._slots is not None:
                self._slots.close()
        self._client, self._slots = None, None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class RecordStream(_IterBase):
    """Iterable dataset of the same records in file order, keeping
    ``in_flight`` placements outstanding so the daemon's fetches overlap
    the consumer (the fastest sequential pass; use :class:`RecordDataset`
    to shuffle). With DataLoader workers, records are split among them."""

    def __init__(self, path: str, record_bytes: int, dtype: Any, shape: Sequence[int],
                 device: Any = "cuda", socket: Optional[str] = None, in_flight: int = 4,
                 start: int = 0, stop: Optional[int] = None, shm_dir: str = "/dev/shm") -> None:
        super().__init__()
        self.path, self.record_bytes = path, int(record_bytes)
        self.dtype, self.shape, self.device = dtype, tuple(shape), device
        self.socket, self.in_flight = socket, max(1, int(in_flight))
        self.start, self.stop, self.shm_dir = int(start), stop, shm_dir
        if _record_bytes(dtype, self.shape) != self.record_bytes:
            raise ValueError("os2g gdd: shape %s of %s is not %d bytes" % (self.shape, dtype, self.record_bytes))

    def _range(self, client: Client) -> Tuple[int, int]:
        stop = self.stop
        if stop is None:
            stop = client.stat(self.path) // self.record_bytes
        lo, hi = self.start, int(stop)
        info = torch.utils.data.get_worker_info()
        if info is not None:
            per = (hi - lo + info.num_workers - 1) // info.num_workers
            lo = min(hi, lo + info.id * per)
            hi = min(hi, lo + per)
        return lo, hi

    def __iter__(self) -> Any:
        with Client(self.socket) as c:
            lo, hi = self._range(c)
            if self.device == "sim":
                yield from self._iter_sim(c, lo, hi)
                return
            pending: List[Tuple[Any, int, Callable[[], None]]] = []  # in record order
            i = lo
            while i < hi or pending:
                while i < hi and len(pending) < self.in_flight:
                    t = torch.empty(self.shape, dtype=self.dtype, device=self.device)
                    torch.cuda.current_stream(t.device).synchronize()
                    dst, release = cuda_dest(t)
                    try:
                        rid = c.submit_place(self.path, dst, i * self.record_bytes, self.record_bytes)
                    except BaseException:
                        release()
                        raise
                    pending.append((t, rid, release))
                    i += 1
                t, rid, release = pending.pop(0)
                try:
                    c.wait(rid)
                finally:
                    release()
                yield t

    def _iter_sim(self, c: Client, lo: int, hi: int) -> Any:
        slots = _ShmSlots(self.shm_dir, self.record_bytes, self.in_flight)
        try:
            pending: List[Tuple[int, int]] = []  # (slot, request id)
            i = lo
            while i < hi or pending:
                while i < hi and len(pending) < self.in_flight:
                    slot = i % self.in_flight
                    pending.append((slot, c.submit_place(self.path, slots.dest(slot), i * self.record_bytes,
                                                         self.record_bytes)))
                    i += 1
                slot, rid = pending.pop(0)
                c.wait(rid)
                yield torch.frombuffer(bytearray(slots.read(slot)), dtype=self.dtype).reshape(self.shape)
        finally:
            slots.close()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, as the daemon reports it. Pure
    Python and slow (about 10 MB/s): for tests and spot checks."""
    table = _crc_table()
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_TABLE: List[int] = []


def _crc_table() -> List[int]:
    if not _TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _TABLE.append(c)
    return _TABLE
