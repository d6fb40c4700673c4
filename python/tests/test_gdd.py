"""Tests of os2g.gdd (the installed package) against a running
simulated-device daemon.

Run by gdd's Go test TestPythonClient, which installs the package into a
fresh venv, starts the daemon and sets:
OS2G_GDD_SOCKET (socket), OS2G_GDD_SHM_DIR (the daemon's shared-memory
directory), OS2G_GDD_KEY (an object key), OS2G_GDD_EXPECT (a local file
holding that object's bytes), OS2G_GDD_RECORD (record size in bytes of the
object, for RecordDataset).
"""

import os
import tempfile
import threading
import unittest

from os2g import gdd as os2g_gdd

SOCK = os.environ.get("OS2G_GDD_SOCKET")
SHM = os.environ.get("OS2G_GDD_SHM_DIR")
KEY = os.environ.get("OS2G_GDD_KEY")
EXPECT = os.environ.get("OS2G_GDD_EXPECT")
RECORD = int(os.environ.get("OS2G_GDD_RECORD", "0"))


def make_shm(name, n):
    with open(os.path.join(SHM, name), "wb") as f:
        f.write(b"\0" * n)


def read_shm(name):
    with open(os.path.join(SHM, name), "rb") as f:
        return f.read()


@unittest.skipUnless(SOCK, "needs a daemon (run through go test ./gdd)")
class SimDaemonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(EXPECT, "rb") as f:
            cls.data = f.read()

    def test_crc32c_reference(self):
        # RFC 3720 B.4 test vector: 32 bytes of zeros.
        self.assertEqual(os2g_gdd.crc32c(b"\0" * 32), 0x8A9136AA)
        self.assertEqual(os2g_gdd.crc32c(b"123456789"), 0xE3069283)

    def test_info_and_stat(self):
        with os2g_gdd.Client(SOCK) as c:
            info = c.info()
            self.assertEqual(info["kind"], "sim")
            self.assertEqual(c.stat(KEY), len(self.data))

    def test_load_whole_file(self):
        make_shm("py-whole", len(self.data))
        n, crc = os2g_gdd.load_into_shm("py-whole", KEY, socket=SOCK, shm_dir=SHM)
        self.assertEqual(n, len(self.data))
        self.assertEqual(read_shm("py-whole"), self.data)
        self.assertEqual(crc, os2g_gdd.crc32c(self.data))

    def test_offsets(self):
        make_shm("py-off", 1000)
        n, crc = os2g_gdd.load_into_shm("py-off", KEY, offset=12345, length=500, shm_offset=300,
                                        socket=SOCK, shm_dir=SHM)
        want = self.data[12345:12845]
        self.assertEqual(n, 500)
        self.assertEqual(crc, os2g_gdd.crc32c(want))
        got = read_shm("py-off")
        self.assertEqual(got[300:800], want)
        self.assertEqual(got[:300], b"\0" * 300)
        self.assertEqual(got[800:], b"\0" * 200)

    def test_errors(self):
        make_shm("py-err", 100)
        with os2g_gdd.Client(SOCK) as c:
            for kwargs, code in [
                (dict(path="no/such/key", length=10), "not_found"),
                (dict(path=KEY, offset=len(self.data) - 5, length=10), "past_eof"),
                (dict(path=KEY, length=101), "dst_too_small"),
            ]:
                with self.assertRaises(os2g_gdd.GDDError) as cm:
                    os2g_gdd.load_into_shm("py-err", kwargs["path"], offset=kwargs.get("offset", 0),
                                           length=kwargs["length"], client=c, shm_dir=SHM)
                self.assertEqual(cm.exception.code, code)
            with self.assertRaises(os2g_gdd.GDDError) as cm:
                c.place(KEY, os2g_gdd.shm_dest("absent-shm", 10), 0, 10)
            self.assertEqual(cm.exception.code, "bad_handle")
            # The connection is still usable.
            self.assertEqual(c.place(KEY, os2g_gdd.shm_dest("py-err", 100), 0, 100)[0], 100)

    def test_pipelined_and_threads(self):
        chunk = 4096
        count = min(16, len(self.data) // chunk)
        make_shm("py-pipe", count * chunk)
        with os2g_gdd.Client(SOCK) as c:
            ids = [c.submit_place(KEY, os2g_gdd.shm_dest("py-pipe", chunk, i * chunk), i * chunk, chunk)
                   for i in range(count)]
            for i in reversed(range(count)):  # wait out of order
                n, crc = c.wait(ids[i])
                self.assertEqual((n, crc), (chunk, os2g_gdd.crc32c(self.data[i * chunk:(i + 1) * chunk])))
            self.assertEqual(read_shm("py-pipe"), self.data[:count * chunk])

            errors = []

            def worker(k):
                try:
                    name = "py-thr-%d" % k
                    make_shm(name, chunk)
                    n, _ = c.place(KEY, os2g_gdd.shm_dest(name, chunk), k * chunk, chunk)
                    if n != chunk or read_shm(name) != self.data[k * chunk:(k + 1) * chunk]:
                        errors.append("thread %d: wrong bytes" % k)
                except Exception as e:  # noqa: BLE001
                    errors.append("thread %d: %r" % (k, e))

            threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])

    @unittest.skipUnless(os2g_gdd.torch is not None, "needs torch")
    def test_record_dataset_map_style_shuffled(self):
        torch = os2g_gdd.torch
        n_rec = len(self.data) // RECORD
        ds = os2g_gdd.RecordDataset(KEY, RECORD, torch.uint8, (RECORD,), device="sim",
                                    socket=SOCK, shm_dir=SHM)
        self.assertEqual(len(ds), n_rec)
        self.assertEqual(bytes(ds[3].numpy()), self.data[3 * RECORD:4 * RECORD])
        self.assertEqual(bytes(ds[-1].numpy()), self.data[(n_rec - 1) * RECORD:n_rec * RECORD])
        with self.assertRaises(IndexError):
            ds[n_rec]
        want = [self.data[i * RECORD:(i + 1) * RECORD] for i in range(n_rec)]
        # Shuffled by the DataLoader's sampler, with two workers: every
        # record exactly once, not in file order (40 records: the chance of
        # the identity permutation is 1/40!).
        g = torch.Generator()
        g.manual_seed(7)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=True, num_workers=2, generator=g)
        got = [bytes(r.numpy()) for r in dl]
        self.assertEqual(sorted(got), sorted(want))
        self.assertNotEqual(got, want)
        ds.close()

    @unittest.skipUnless(os2g_gdd.torch is not None, "needs torch")
    def test_record_stream(self):
        torch = os2g_gdd.torch
        n_rec = len(self.data) // RECORD
        ds = os2g_gdd.RecordStream(KEY, RECORD, torch.uint8, (RECORD,), device="sim",
                                   socket=SOCK, in_flight=3, shm_dir=SHM)
        recs = list(ds)
        self.assertEqual(len(recs), n_rec)
        for i, r in enumerate(recs):
            self.assertEqual(bytes(r.numpy()), self.data[i * RECORD:(i + 1) * RECORD], "record %d" % i)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        got = sorted(bytes(r.numpy()) for r in dl)
        want = sorted(self.data[i * RECORD:(i + 1) * RECORD] for i in range(n_rec))
        self.assertEqual(got, want)

    @unittest.skipUnless(os2g_gdd.torch is not None, "needs torch")
    def test_cpu_tensor_is_a_clear_error(self):
        t = os2g_gdd.torch.empty(16, dtype=os2g_gdd.torch.uint8)
        with self.assertRaises(ValueError) as cm:
            os2g_gdd.load_into(t, KEY, socket=SOCK)
        self.assertIn("CUDA tensor", str(cm.exception))
        self.assertIn("cpu", str(cm.exception))

    def test_daemon_errors_name_the_socket(self):
        with os2g_gdd.Client(SOCK) as c:
            with self.assertRaises(os2g_gdd.GDDError) as cm:
                c.stat("no/such/key")
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual(cm.exception.socket, SOCK)
        self.assertIn(SOCK, str(cm.exception))

    @unittest.skipUnless(os2g_gdd.torch is not None, "needs torch")
    def test_handle_normalisation(self):
        raw = bytes(range(64))
        self.assertEqual(os2g_gdd._normalize_handle(raw), raw)
        self.assertEqual(os2g_gdd._normalize_handle(b"\x02c" + raw), raw)
        with self.assertRaises(os2g_gdd.GDDError):
            os2g_gdd._normalize_handle(b"\x02e" + b"\0" * 80)


class NoDaemonTest(unittest.TestCase):
    def test_missing_socket_names_the_path(self):
        path = os.path.join(tempfile.mkdtemp(), "absent.sock")
        with self.assertRaises(os2g_gdd.GDDConnectionError) as cm:
            os2g_gdd.Client(path)
        self.assertIn(path, str(cm.exception))
        self.assertIn("--gdd-socket", str(cm.exception))

    def test_default_socket(self):
        old = os.environ.pop("OS2G_GDD_SOCKET", None)
        try:
            self.assertEqual(os2g_gdd.default_socket(), "/run/os2g/gdd.sock")
            os.environ["OS2G_GDD_SOCKET"] = "/tmp/x.sock"
            self.assertEqual(os2g_gdd.default_socket(), "/tmp/x.sock")
        finally:
            os.environ.pop("OS2G_GDD_SOCKET", None)
            if old is not None:
                os.environ["OS2G_GDD_SOCKET"] = old


FAKE_CUDA_DIR = os.environ.get("OS2G_GDD_FAKE_CUDA_DIR")


@unittest.skipUnless(FAKE_CUDA_DIR, "needs gdd/testdata/fakecuda.c built as libcuda.so.1")
class DriverBindingTest(unittest.TestCase):
    """The ctypes declarations of os2g_gdd._Driver against the fake driver."""

    def test_allocation_of_interior_pointer(self):
        import ctypes
        lib = ctypes.CDLL(os.path.join(FAKE_CUDA_DIR, "libcuda.so.1"))
        self.assertEqual(lib.cuInit(0), 0)
        ctx = ctypes.c_void_p()
        self.assertEqual(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), 0)
        self.assertEqual(lib.cuCtxSetCurrent(ctx), 0)
        ptr = ctypes.c_uint64()
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.assertEqual(lib.cuMemAlloc_v2(ctypes.byref(ptr), 5000), 0)
        drv = os2g_gdd._Driver()  # dlopens "libcuda.so.1": the same fake
        base, size, handle = drv.allocation(ptr.value + 1234)
        self.assertEqual((base, size), (ptr.value, 5000))
        self.assertEqual(len(handle), 64)
        self.assertEqual(int.from_bytes(handle[:8], "little"), ptr.value)
        with self.assertRaises(os2g_gdd.GDDError) as cm:
            drv.allocation(8)  # not device memory
        self.assertEqual(cm.exception.code, "device")
        self.assertIn("CUDA_ERROR_INVALID_VALUE", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
