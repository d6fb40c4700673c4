"""GPU tests of os2g.gdd: PyTorch CUDA tensors filled by a CUDA daemon.

Needs a GPU, torch with CUDA, and a daemon started as
``gddserve -backend cuda -dir $OS2G_GDD_DIR -socket $OS2G_GDD_SOCKET``
(scripts/gpu-check.sh does this, with PYTHONPATH=python). Skips otherwise.
"""

import os
import time
import unittest

from os2g import gdd as os2g_gdd

torch = os2g_gdd.torch
SOCK = os.environ.get("OS2G_GDD_SOCKET")
DIR = os.environ.get("OS2G_GDD_DIR")
HAVE_CUDA = torch is not None and torch.cuda.is_available()


@unittest.skipUnless(SOCK and DIR and HAVE_CUDA, "needs a CUDA daemon and torch with CUDA")
class CudaTorchTest(unittest.TestCase):
    N = (5 << 20) + 4097

    @classmethod
    def setUpClass(cls):
        cls.data = os.urandom(cls.N)
        with open(os.path.join(DIR, "blob.bin"), "wb") as f:
            f.write(cls.data)
        cls.ref = torch.frombuffer(bytearray(cls.data), dtype=torch.uint8).cuda()

    def test_load_new_tensor(self):
        t = os2g_gdd.load("blob.bin", torch.uint8, (self.N,), socket=SOCK)
        self.assertTrue(t.is_cuda)
        self.assertTrue(torch.equal(t, self.ref))

    def test_load_into_view_with_offsets(self):
        big = torch.zeros(self.N + 300, dtype=torch.uint8, device="cuda")
        view = big[100:100 + self.N - 7]
        n, crc = os2g_gdd.load_into(view, "blob.bin", offset=7, socket=SOCK)
        self.assertEqual(n, self.N - 7)
        self.assertTrue(torch.equal(view, self.ref[7:]))
        self.assertEqual(int(big[:100].sum()), 0)
        self.assertEqual(int(big[100 + self.N - 7:].sum()), 0)

    def test_float_tensor(self):
        count = (self.N // 4) - 10
        t = os2g_gdd.load("blob.bin", torch.float32, (count,), offset=8, socket=SOCK)
        want = torch.frombuffer(bytearray(self.data[8:8 + 4 * count]), dtype=torch.float32).cuda()
        self.assertTrue(torch.equal(t.view(torch.int32), want.view(torch.int32)))

    def test_crc(self):
        t = torch.empty(4096, dtype=torch.uint8, device="cuda")
        n, crc = os2g_gdd.load_into(t, "blob.bin", socket=SOCK)
        self.assertEqual(crc, os2g_gdd.crc32c(self.data[:4096]))

    def test_dst_too_small(self):
        t = torch.empty(10, dtype=torch.uint8, device="cuda")
        with self.assertRaises(os2g_gdd.GDDError) as cm:
            os2g_gdd.load_into(t, "blob.bin", length=11, socket=SOCK)
        self.assertEqual(cm.exception.code, "dst_too_small")

    def test_record_dataset(self):
        rec = 4096
        ds = os2g_gdd.RecordStream("blob.bin", rec, torch.uint8, (rec,), socket=SOCK, in_flight=4)
        count = 0
        for i, t in enumerate(ds):
            self.assertTrue(torch.equal(t, self.ref[i * rec:(i + 1) * rec]), "record %d" % i)
            count += 1
        self.assertEqual(count, self.N // rec)

    def test_safetensors_round_trip(self):
        from os2g import safetensors as st
        g = torch.Generator(device="cuda")
        g.manual_seed(1)
        tensors = {
            "w": torch.randn(1024, 1031, device="cuda", generator=g),
            "b": torch.randn(1031, device="cuda", generator=g).half(),
            "e": torch.randn(77, 64, device="cuda", generator=g).bfloat16(),
            "step": torch.tensor(5, device="cuda"),
            "t": torch.randn(64, 32, device="cuda", generator=g).t(),  # not contiguous
        }
        st.save_safetensors(tensors, "ckpt.safetensors", metadata={"epoch": "3"}, socket=SOCK)
        back = st.load_safetensors("ckpt.safetensors", device="cuda:0", socket=SOCK)
        self.assertEqual(sorted(back), sorted(tensors))
        for k, t in tensors.items():
            self.assertTrue(back[k].is_cuda, k)
            self.assertTrue(torch.equal(back[k], t), k)
        # A flipped byte in the stored file is caught.
        path = os.path.join(DIR, "ckpt.safetensors")
        with open(path, "r+b") as f:
            f.seek(-100, os.SEEK_END)
            b = f.read(1)
            f.seek(-100, os.SEEK_END)
            f.write(bytes([b[0] ^ 1]))
        with self.assertRaises(os2g_gdd.GDDError) as cm:
            st.load_safetensors("ckpt.safetensors", device="cuda:0", socket=SOCK)
        self.assertEqual(cm.exception.code, "checksum")

    def test_throughput(self):
        size = 1 << 30
        path = os.path.join(DIR, "big.bin")
        with open(path, "wb") as f:
            for _ in range(size >> 24):
                f.write(os.urandom(1 << 24))
        t = torch.empty(size, dtype=torch.uint8, device="cuda")
        with os2g_gdd.Client(SOCK) as c:
            os2g_gdd.load_into(t, "big.bin", client=c)  # warm the page cache and the mapping
            t0 = time.perf_counter()
            os2g_gdd.load_into(t, "big.bin", client=c)
            torch.cuda.synchronize()
            gdd_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            u = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).cuda()
        torch.cuda.synchronize()
        base_s = time.perf_counter() - t0
        self.assertTrue(torch.equal(t, u))
        print("\nthroughput 1 GiB: gdd %.0f MB/s, read()+.cuda() %.0f MB/s" % (
            size / gdd_s / 1e6, size / base_s / 1e6), flush=True)
        os.unlink(path)


if __name__ == "__main__":
    unittest.main()
