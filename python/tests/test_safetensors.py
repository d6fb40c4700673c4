"""Tests of os2g.safetensors (the installed package) against a running
simulated-device daemon that saves into an in-memory store.

Run by gdd's Go test TestPythonSafetensors, which sets OS2G_GDD_SOCKET,
OS2G_GDD_SHM_DIR, and stores OS2G_ST_FLIPPED (a checkpoint with one data
byte flipped after its CRC32C was recorded) and OS2G_ST_MALFORMED (a
header whose offsets run past the data); saves to keys under "fail/" fail
midway.
"""

import json
import os
import struct
import unittest

from os2g import gdd

try:
    import torch
    from os2g import safetensors as st
except ImportError:  # pragma: no cover
    torch = None

SOCK = os.environ.get("OS2G_GDD_SOCKET")
SHM = os.environ.get("OS2G_GDD_SHM_DIR")
FLIPPED = os.environ.get("OS2G_ST_FLIPPED")
MALFORMED = os.environ.get("OS2G_ST_MALFORMED")


def sample():
    g = torch.Generator()
    g.manual_seed(3)
    return {
        "layer.weight": torch.randn(64, 33, generator=g),
        "layer.bias": torch.randn(33, generator=g).to(torch.float16),
        "emb": torch.randn(17, 8, generator=g).to(torch.bfloat16),
        "ids": torch.arange(-50, 50, dtype=torch.int64),
        "mask": torch.rand(13, generator=g) > 0.5,
        "bytes": torch.randint(0, 256, (7, 3), dtype=torch.uint8, generator=g),
        "step": torch.tensor(1234, dtype=torch.int32),
        "empty": torch.empty(0, 4),
        "f64": torch.randn(5, dtype=torch.float64, generator=g),
    }


@unittest.skipUnless(SOCK and torch is not None, "needs a daemon (go test ./gdd) and torch")
class SafetensorsSimTest(unittest.TestCase):
    def test_round_trip(self):
        tensors = sample()
        n = st.save_safetensors(tensors, "ckpt/rt.safetensors", metadata={"step": "1234"},
                                socket=SOCK, shm_dir=SHM)
        self.assertGreater(n, sum(t.numel() * t.element_size() for t in tensors.values()))
        back = st.load_safetensors("ckpt/rt.safetensors", device="sim", socket=SOCK, shm_dir=SHM)
        self.assertEqual(sorted(back), sorted(tensors))
        for k, t in tensors.items():
            self.assertEqual(back[k].dtype, t.dtype, k)
            self.assertEqual(tuple(back[k].shape), tuple(t.shape), k)
            self.assertTrue(torch.equal(back[k], t), k)
        h = st.read_header("ckpt/rt.safetensors", socket=SOCK)
        self.assertEqual(h["metadata"]["step"], "1234")
        self.assertEqual(len(h["metadata"]["crc32c:layer.weight"]), 8)

    def test_saved_file_is_standard_safetensors(self):
        # Parse the saved object with nothing but struct and json, as any
        # safetensors reader would: place the whole object into shm first.
        tensors = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([7], dtype=torch.int16)}
        size = st.save_safetensors(tensors, "ckpt/std.safetensors", socket=SOCK, shm_dir=SHM)
        with open(os.path.join(SHM, "whole"), "wb") as f:
            f.truncate(size)
        gdd.load_into_shm("whole", "ckpt/std.safetensors", socket=SOCK, shm_dir=SHM)
        with open(os.path.join(SHM, "whole"), "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n].decode("utf-8"))
        self.assertEqual((8 + n) % 8, 0)
        a = header["a"]
        self.assertEqual((a["dtype"], a["shape"]), ("F32", [2, 3]))
        b0, b1 = a["data_offsets"]
        self.assertEqual(struct.unpack("<6f", raw[8 + n + b0:8 + n + b1]), (0.0, 1.0, 2.0, 3.0, 4.0, 5.0))
        self.assertEqual(int(header["__metadata__"]["crc32c:a"], 16), gdd.crc32c(raw[8 + n + b0:8 + n + b1]))

    def test_flipped_byte_is_caught(self):
        with self.assertRaises(gdd.GDDError) as cm:
            st.load_safetensors(FLIPPED, device="sim", socket=SOCK, shm_dir=SHM)
        self.assertEqual(cm.exception.code, "checksum")
        self.assertIn("CRC32C", str(cm.exception))

    def test_malformed_header(self):
        with self.assertRaises(gdd.GDDError) as cm:
            st.load_safetensors(MALFORMED, device="sim", socket=SOCK, shm_dir=SHM)
        self.assertEqual(cm.exception.code, "malformed")
        self.assertIn("data_offsets", str(cm.exception))

    def test_failed_save_leaves_no_object(self):
        with self.assertRaises(gdd.GDDError):
            st.save_safetensors(sample(), "fail/ckpt.safetensors", socket=SOCK, shm_dir=SHM)
        with gdd.Client(SOCK) as c:
            with self.assertRaises(gdd.GDDError) as cm:
                c.stat("fail/ckpt.safetensors")
        self.assertEqual(cm.exception.code, "not_found")

    def test_clear_errors(self):
        with self.assertRaises(ValueError) as cm:
            st.load_safetensors("ckpt/rt.safetensors", device="cpu", socket=SOCK)
        self.assertIn("not a CUDA device", str(cm.exception))
        with self.assertRaises(ValueError):
            st.save_safetensors({"x": [1, 2]}, "ckpt/bad", socket=SOCK, shm_dir=SHM)
        with self.assertRaises(ValueError):
            st.save_safetensors({"x": torch.zeros(2, dtype=torch.complex64)}, "ckpt/bad", socket=SOCK, shm_dir=SHM)
        with self.assertRaises(gdd.GDDError) as cm:
            st.save_safetensors({"x": torch.zeros(2)}, "ckpt/bad", metadata={"crc32c:x": "0"}, socket=SOCK, shm_dir=SHM)
        self.assertEqual(cm.exception.code, "bad_request")


@unittest.skipUnless(torch is not None, "needs torch")
class DtypeTest(unittest.TestCase):
    def test_dtype_maps(self):
        for s in ["BOOL", "U8", "I8", "I16", "F16", "BF16", "I32", "F32", "I64", "F64"]:
            self.assertEqual(st.st_dtype(st.torch_dtype(s)), s)
        with self.assertRaises(ValueError):
            st.torch_dtype("Q4")

    def test_entry_validation(self):
        with self.assertRaises(ValueError):
            st._check_entry("x", {"dtype": "F32", "shape": [3], "begin": 0, "end": 8})
        with self.assertRaises(ValueError):
            st._check_entry("x", {"dtype": "F32", "shape": [-1], "begin": 0, "end": 4})
        self.assertEqual(st._check_entry("x", {"dtype": "F16", "shape": [2, 2], "begin": 8, "end": 16})[1:],
                         ((2, 2), 8, 16))


if __name__ == "__main__":
    unittest.main()
