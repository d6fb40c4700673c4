"""Tests of os2g.epoch (run by python/python_test.go in a fresh venv)."""

import http.server
import json
import os
import socketserver
import tempfile
import threading
import unittest

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, Subset

import os2g.epoch as epoch


class Indices(Dataset):
    """A dataset whose items are their own indices, with file paths."""

    def __init__(self, n, root="/data"):
        self.n = n
        self.samples = [(f"{root}/c{i % 3}/{i:04d}.png", i % 3) for i in range(n)]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def loader_order(loader):
    out = []
    for batch in loader:
        out.extend(int(i) for i in batch)
    return out


class OrderTest(unittest.TestCase):
    def test_distributed_sampler_matches_dataloader(self):
        ds = Indices(103)
        seen = set()
        for rank in range(2):
            s = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=7)
            loader = DataLoader(ds, sampler=s, batch_size=5, num_workers=2, persistent_workers=True)
            for e in range(3):
                want = epoch.order(s, e)
                self.assertEqual(len(want), 52)  # padded to a multiple of 2
                self.assertEqual(loader_order(loader), want, f"rank {rank} epoch {e}")
                if e == 0:
                    seen.update(want)
            self.assertEqual(s.epoch, 2)
        self.assertEqual(seen, set(range(103)))  # the two ranks cover the dataset

    def test_random_sampler_with_generator(self):
        ds = Indices(50)
        s = RandomSampler(ds, generator=torch.Generator().manual_seed(3))
        loader = DataLoader(ds, sampler=s, batch_size=4, num_workers=2)
        for _ in range(3):
            want = epoch.order(s)
            self.assertEqual(epoch.order(s), want, "order() changed the generator's state")
            self.assertEqual(loader_order(loader), want)
        self.assertEqual(sorted(want), list(range(50)))

    def test_random_sampler_without_generator_refused(self):
        with self.assertRaisesRegex(ValueError, "generator"):
            epoch.order(RandomSampler(Indices(10)))

    def test_batch_sampler_flattened(self):
        from torch.utils.data import BatchSampler, SequentialSampler

        bs = BatchSampler(SequentialSampler(range(7)), batch_size=3, drop_last=False)
        self.assertEqual(epoch.order(bs), list(range(7)))


class PathsTest(unittest.TestCase):
    def test_samples_and_subset(self):
        ds = Indices(10)
        self.assertEqual(epoch.paths_of(ds, [3, 0]), ["/data/c0/0003.png", "/data/c0/0000.png"])
        sub = Subset(ds, [9, 8, 7])
        self.assertEqual(epoch.paths_of(sub, [0, 2]), ["/data/c0/0009.png", "/data/c1/0007.png"])
        with self.assertRaises(TypeError):
            epoch.paths_of(object(), [0])

    def test_imagefolder(self):
        from torchvision.datasets import ImageFolder

        with tempfile.TemporaryDirectory() as root:
            for c in ("a", "b"):
                os.mkdir(os.path.join(root, c))
                for i in range(2):
                    open(os.path.join(root, c, f"{i}.png"), "wb").close()
            ds = ImageFolder(root)
            self.assertEqual(epoch.paths_of(ds, [3, 0]), [os.path.join(root, "b", "1.png"), os.path.join(root, "a", "0.png")])


class FakeDaemon:
    """A control socket at the place the daemon of mountpoint would use,
    answering POST /hint with status and reply, recording requests."""

    def __init__(self, mountpoint, status=200, reply=None):
        self.requests = []
        self.path = epoch.socket_paths(mountpoint)[1]
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers["Content-Length"])
                outer.requests.append((self.path, json.loads(self.rfile.read(n))))
                body = json.dumps(reply if reply is not None else {"files": 1, "unknown": 0, "duplicates": 0}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def get_request(self):
                conn, _ = super().get_request()
                return conn, ("local", 0)

        self.server = Server(self.path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        os.unlink(self.path)


class SendTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.old_tmpdir = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = self.tmp.name
        self.mp = os.path.realpath(os.path.join(self.tmp.name, "mnt"))
        for c in range(3):
            os.makedirs(os.path.join(self.mp, f"c{c}"))

    def tearDown(self):
        if self.old_tmpdir is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = self.old_tmpdir
        self.tmp.cleanup()

    def test_hint_sends_rank_order_relative_to_mount(self):
        d = FakeDaemon(self.mp)
        try:
            ds = Indices(20, root=self.mp)
            s = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=0)
            reply = epoch.hint(ds, s, 4, mountpoint=self.mp)
            self.assertEqual(reply["files"], 1)
            self.assertEqual(len(d.requests), 1)
            path, body = d.requests[0]
            self.assertEqual(path, "/hint")
            self.assertEqual(body["epoch"], 4)
            self.assertEqual(body["stream"], "rank1")
            s.set_epoch(4)
            want = [f"c{i % 3}/{i:04d}.png" for i in s]
            self.assertEqual(body["files"], want)
        finally:
            d.close()

    def test_refusal_raises_with_the_daemons_message(self):
        d = FakeDaemon(self.mp, status=400, reply={"error": 'files[0] "/etc/passwd": hint: path outside the mount'})
        try:
            with self.assertRaises(epoch.HintError) as cm:
                epoch.send(["/etc/passwd"], self.mp)
            self.assertEqual(cm.exception.status, 400)
            self.assertIn("outside the mount", str(cm.exception))
        finally:
            d.close()

    def test_no_daemon(self):
        with self.assertRaisesRegex(epoch.HintError, "no os2g daemon"):
            epoch.send(["a"], self.mp)

    def test_socket_name_matches_the_daemons(self):
        # internal/cli TestControlSocketPath: printf /mnt/data | sha256sum.
        self.assertEqual(os.path.basename(epoch.socket_paths("/mnt/data")[0]), "6faba07f33e642da.sock")


if __name__ == "__main__":
    unittest.main()
