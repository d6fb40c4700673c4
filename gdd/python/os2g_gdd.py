"""os2g GPU direct placement (GDD) client.

Asks a running os2g daemon to place a file's bytes straight into GPU memory
that this process owns, instead of ``read()`` + ``.cuda()``: the daemon reads
the object into pinned host memory and DMAs it into the tensor, so this
process never touches the bytes.

Pure Python (standard library; PyTorch for tensors). Wire format: version 1,
specified in docs/gdd.md -- each message is a 4-byte big-endian length and a
JSON object.

Typical use::

    import os2g_gdd
    t = os2g_gdd.load("/mnt/data/weights.bin", torch.float16, (4096, 4096))
    os2g_gdd.load_into(existing_cuda_tensor, "/mnt/data/shard-0001.bin", offset=1 << 20)
    ds = os2g_gdd.RecordDataset("/mnt/data/train.bin", record_bytes=3 * 224 * 224,
                                dtype=torch.uint8, shape=(3, 224, 224))

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
the storage in a reference-counted "sent data" record with its counter at 1
and an interprocess event; a storage freed while its counter is above 0 is
parked in torch's limbo list forever. This client therefore releases the
counter (``UntypedStorage._release_ipc_counter_cuda``) once the placement is
done, as a torch consumer process would; the wrappers still nest once per
call, which is why the driver path is the default.

The daemon keeps a handle open for as long as the connection that used it;
closing a :class:`Client` (or process exit) releases the mappings.
"""

import base64
import json
import os
import socket as _socket
import struct
import threading

WIRE_VERSION = 1
MAX_FRAME = 1 << 20
DEFAULT_SOCKET = os.environ.get("OS2G_GDD_SOCKET", "/run/os2g/gdd.sock")
IPC_HANDLE_SIZE = 64

try:  # torch is optional for the shared-memory (simulated device) path
    import torch
    from torch.utils.data import IterableDataset as _DatasetBase
except ImportError:  # pragma: no cover
    torch = None
    _DatasetBase = object


class GDDError(Exception):
    """An error the daemon reported, with its wire ``code``.

    Codes: bad_request, bad_version, not_found, past_eof, dst_too_small,
    bad_handle, device, changed, canceled, io.
    """

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


class Client:
    """A connection to the daemon. Thread-safe; several requests may be in
    flight (:meth:`submit` then :meth:`wait`)."""

    def __init__(self, socket_path=None, timeout=None):
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        if timeout is not None:
            self._sock.settimeout(timeout)
        self._sock.connect(socket_path or DEFAULT_SOCKET)
        self._wlock = threading.Lock()
        self._cond = threading.Condition()
        self._reading = False  # a thread is reading frames (guarded by _cond)
        self._replies = {}  # id -> reply dict (guarded by _cond)
        self._next_id = 0
        self._error = None

    def close(self):
        """Close the connection (the daemon then drops its IPC mappings)."""
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- framing ---------------------------------------------------------

    def _recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("os2g gdd: daemon closed the connection")
            buf += chunk
        return bytes(buf)

    def _read_frame(self):
        (n,) = struct.unpack(">I", self._recv_exact(4))
        if n == 0 or n > MAX_FRAME:
            raise ConnectionError("os2g gdd: bad frame length %d" % n)
        return json.loads(self._recv_exact(n).decode("utf-8"))

    def submit(self, req):
        """Send a request dict (``v`` and ``id`` are filled in); return its id."""
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        msg = dict(req, v=WIRE_VERSION, id=rid)
        body = json.dumps(msg, separators=(",", ":")).encode("utf-8")
        with self._wlock:
            self._sock.sendall(struct.pack(">I", len(body)) + body)
        return rid

    def wait_reply(self, rid):
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
                    with self._cond:
                        self._error = e
                        self._cond.notify_all()
                    raise
                with self._cond:
                    if r.get("id") == rid:
                        return r
                    self._replies[r.get("id")] = r
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()

    @staticmethod
    def _check(r):
        err = r.get("error")
        if err:
            raise GDDError(err.get("code", "io"), err.get("message", ""))
        return r

    def wait(self, rid):
        """Wait for placement ``rid``; return ``(bytes_placed, crc32c)``."""
        r = self._check(self.wait_reply(rid))
        return r.get("bytes", 0), r.get("crc32c", 0)

    def submit_place(self, path, dst, offset=0, length=None):
        """Start placing ``length`` bytes (None: to the end) of ``path`` from
        ``offset`` into ``dst`` (from :func:`cuda_dest` or :func:`shm_dest`)."""
        req = {"op": "place", "path": path, "offset": int(offset), "dst": dst}
        if length is not None:
            req["length"] = int(length)
        return self.submit(req)

    def place(self, path, dst, offset=0, length=None):
        """Place bytes and wait; return ``(bytes_placed, crc32c)``."""
        return self.wait(self.submit_place(path, dst, offset, length))

    def stat(self, path):
        """Return the size of ``path`` in bytes."""
        return self._check(self.wait_reply(self.submit({"op": "stat", "path": path}))).get("size", 0)

    def info(self):
        """Return the daemon's device: ``{"kind", "device", "block_size"}``."""
        return self._check(self.wait_reply(self.submit({"op": "info"})))["info"]


# -- destinations -----------------------------------------------------------


def _normalize_handle(handle):
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

    def __init__(self):
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

    def _check(self, call, r):
        if r != 0:
            name = self.ct.c_char_p()
            self.errname(r, self.ct.byref(name))
            raise GDDError("device", "%s: CUDA error %d %s" % (call, r, (name.value or b"?").decode()))

    def allocation(self, ptr):
        """Return ``(base, size, handle_bytes)`` of the allocation holding ptr."""
        base, size = self.ct.c_uint64(), self.ct.c_size_t()
        self._check("cuMemGetAddressRange", self.range(self.ct.byref(base), self.ct.byref(size), ptr))
        buf = self.ct.create_string_buffer(IPC_HANDLE_SIZE)
        self._check("cuIpcGetMemHandle", self.handle(buf, base.value))
        return base.value, size.value, buf.raw


_DRIVER = []


def _driver():
    if not _DRIVER:
        _DRIVER.append(_Driver())
    return _DRIVER[0]


def cuda_dest(tensor, device=None, handle_source="driver"):
    """Describe a contiguous CUDA tensor as a placement destination.

    Returns ``(dst, release)``: ``dst`` goes into a place request, and
    ``release()`` must be called once the placement has finished (it
    releases torch's IPC reference counter with ``handle_source="torch"``;
    otherwise it does nothing). ``device`` overrides the ordinal sent (the
    daemon's numbering, if its CUDA_VISIBLE_DEVICES differs from ours)."""
    if not tensor.is_cuda:
        raise ValueError("os2g gdd: tensor is not on a CUDA device")
    if not tensor.is_contiguous():
        raise ValueError("os2g gdd: tensor must be contiguous")
    nbytes = tensor.numel() * tensor.element_size()
    ordinal = tensor.device.index if device is None else int(device)
    release = _noop
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

        def release():
            torch.UntypedStorage._release_ipc_counter_cuda(ref_handle, ref_offset)
    else:
        raise ValueError("os2g gdd: handle_source must be 'driver' or 'torch'")
    dst = {"kind": "cuda", "handle": base64.b64encode(handle).decode("ascii"),
           "offset": offset, "size": nbytes, "device": ordinal}
    return dst, release


def _noop():
    pass


def shm_dest(name, size, offset=0):
    """A simulated-device destination: ``size`` bytes at ``offset`` of the
    file ``name`` in the daemon's shared-memory directory (/dev/shm)."""
    return {"kind": "sim", "handle": base64.b64encode(name.encode("utf-8")).decode("ascii"),
            "offset": int(offset), "size": int(size)}


def _client(socket, client):
    if client is not None:
        return client, False
    return Client(socket), True


def load_into(tensor, path, offset=0, length=None, socket=None, client=None, device=None,
              handle_source="driver"):
    """Fill CUDA ``tensor`` with ``length`` bytes (default: the tensor's
    size) of ``path`` starting at ``offset``. Returns ``(bytes, crc32c)``.

    Pending work on the tensor's current stream is waited for first, so the
    daemon never races a kernel that still uses the memory; when this
    returns, the bytes are in device memory."""
    torch.cuda.current_stream(tensor.device).synchronize()
    dst, release = cuda_dest(tensor, device, handle_source)
    if length is None:
        length = dst["size"]
    c, own = _client(socket, client)
    try:
        return c.place(path, dst, offset, length)
    finally:
        release()
        if own:
            c.close()


def load(path, dtype, shape, offset=0, device="cuda", socket=None, client=None):
    """Return a new tensor of ``dtype`` and ``shape`` on ``device`` filled
    from ``path`` at ``offset``."""
    t = torch.empty(shape, dtype=dtype, device=device)
    n = t.numel() * t.element_size()
    if n:
        load_into(t, path, offset, n, socket=socket, client=client)
    return t


def load_into_shm(shm_name, path, offset=0, length=None, shm_offset=0, size=None,
                  socket=None, client=None, shm_dir="/dev/shm"):
    """Place bytes of ``path`` into the shared-memory file ``shm_name``
    (simulated device; tests). ``size`` defaults to the file's length past
    ``shm_offset``; ``length`` to ``size``. Returns ``(bytes, crc32c)``."""
    if size is None:
        size = os.path.getsize(os.path.join(shm_dir, shm_name)) - shm_offset
    if length is None:
        length = size
    c, own = _client(socket, client)
    try:
        return c.place(path, shm_dest(shm_name, size, shm_offset), offset, length)
    finally:
        if own:
            c.close()


class RecordDataset(_DatasetBase):
    """Iterable dataset of fixed-size records of a shard file, each placed by
    the daemon into a new tensor of ``dtype``/``shape`` on ``device``.

    ``in_flight`` placements are kept outstanding so the daemon's fetches
    overlap the consumer. With DataLoader workers, records are split among
    them (each worker opens its own connection). ``device="sim"`` uses a
    simulated daemon (shared-memory slots in ``shm_dir``) and yields CPU
    tensors; it exists for tests without a GPU.
    """

    def __init__(self, path, record_bytes, dtype, shape, device="cuda", socket=None,
                 in_flight=4, start=0, stop=None, shm_dir="/dev/shm"):
        super().__init__()
        self.path, self.record_bytes = path, int(record_bytes)
        self.dtype, self.shape, self.device = dtype, tuple(shape), device
        self.socket, self.in_flight = socket, max(1, int(in_flight))
        self.start, self.stop, self.shm_dir = int(start), stop, shm_dir
        n = 1
        for d in self.shape:
            n *= d
        if n * torch.empty((), dtype=dtype).element_size() != self.record_bytes:
            raise ValueError("os2g gdd: shape %s of %s is not %d bytes" % (shape, dtype, record_bytes))

    def _range(self, client):
        stop = self.stop
        if stop is None:
            stop = client.stat(self.path) // self.record_bytes
        lo, hi = self.start, stop
        info = torch.utils.data.get_worker_info()
        if info is not None:
            per = (hi - lo + info.num_workers - 1) // info.num_workers
            lo = min(hi, lo + info.id * per)
            hi = min(hi, lo + per)
        return lo, hi

    def __iter__(self):
        with Client(self.socket) as c:
            lo, hi = self._range(c)
            if self.device == "sim":
                yield from self._iter_sim(c, lo, hi)
                return
            pending = []  # (tensor, request id), in record order
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

    def _iter_sim(self, c, lo, hi):
        import mmap
        name = "os2g-gdd-%d-%d" % (os.getpid(), id(self))
        path = os.path.join(self.shm_dir, name)
        slots = self.in_flight
        with open(path, "w+b") as f:
            try:
                f.truncate(slots * self.record_bytes)
                m = mmap.mmap(f.fileno(), slots * self.record_bytes)
                try:
                    pending = []  # (slot, request id)
                    i = lo
                    while i < hi or pending:
                        while i < hi and len(pending) < slots:
                            slot = i % slots
                            dst = shm_dest(name, self.record_bytes, slot * self.record_bytes)
                            pending.append((slot, c.submit_place(self.path, dst, i * self.record_bytes, self.record_bytes)))
                            i += 1
                        slot, rid = pending.pop(0)
                        c.wait(rid)
                        rec = bytes(m[slot * self.record_bytes:(slot + 1) * self.record_bytes])
                        yield torch.frombuffer(bytearray(rec), dtype=self.dtype).reshape(self.shape)
                finally:
                    m.close()
            finally:
                os.unlink(path)


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli) of ``data``, as the daemon reports it. Pure
    Python and slow (about 10 MB/s): for tests and spot checks."""
    table = _crc_table()
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_TABLE = []


def _crc_table():
    if not _TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _TABLE.append(c)
    return _TABLE
