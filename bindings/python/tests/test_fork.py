"""A handle opened before os.fork() works in every child as the child's own: multiprocessing
with the fork start method, a gunicorn --preload-like master that opens the cache at import
and forks workers, a child killed while it holds the write lock, and a claim held across
the fork."""

import multiprocessing
import os
import signal
import time
import unittest

import mappedcache
from support import CacheTest

_shared = None  # the handle the forked pool workers inherit


def _pool_increment(n):
    for _ in range(n):
        _shared.incr("counter")
    _shared.set(f"pid-{os.getpid()}", os.getpid())
    return _shared.get("before-fork")


class ForkTests(CacheTest):
    def test_multiprocessing_fork_workers_use_the_inherited_handle(self):
        global _shared
        _shared = mappedcache.Cache(self.path, capacity=8 << 20)
        _shared.set("before-fork", "parent")
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(4) as pool:
            seen = pool.map(_pool_increment, [500] * 8)
        for _ in range(500):
            _shared.incr("counter")
        self.assertEqual(seen, ["parent"] * 8)
        self.assertEqual(_shared["counter"], 4500)
        self.assertGreaterEqual(len([k for k in _shared.keys() if k.startswith("pid-")]), 1)
        self.assertEqual(_shared.verify(), 0)
        _shared.close()

    def test_a_preload_master_forks_workers_that_serve_requests(self):
        # gunicorn --preload: the master imports the app (which opens the cache) and forks
        # its workers; each worker serves requests with the inherited handle.
        master_cache = mappedcache.Cache(self.path, capacity=8 << 20, pickle=True)
        master_cache.set("config", {"feature": True})
        calls_path = self.path + ".calls"
        self.addCleanup(lambda: os.path.exists(calls_path) and os.unlink(calls_path))
        workers = []
        for w in range(4):
            pid = os.fork()
            if pid == 0:  # a worker
                code = 0
                try:
                    for request in range(300):
                        if master_cache.get("config") != {"feature": True}:
                            code = 1
                        master_cache.incr("requests")

                        def expensive():
                            with open(calls_path, "a") as f:
                                f.write("x\n")
                            time.sleep(0.05)
                            return {"report": 42}

                        if master_cache.get_or_compute("report", expensive, ttl=60) != {"report": 42}:
                            code = 2
                except BaseException:
                    code = 9
                finally:
                    os._exit(code)
            workers.append(pid)
        statuses = [os.waitpid(pid, 0)[1] for pid in workers]
        self.assertEqual(statuses, [0] * 4)
        self.assertEqual(master_cache["requests"], 1200)
        with open(calls_path) as f:
            self.assertEqual(len(f.read().splitlines()), 1)  # computed once among the workers
        self.assertEqual(master_cache.verify(), 0)

    def test_a_child_killed_holding_the_write_lock_never_blocks_the_parent(self):
        # Were the child writing with the parent's lock token, its death inside a write would
        # leave the parent's token in the lock word, and the parent would wait for itself.
        c = mappedcache.Cache(self.path, capacity=8 << 20, create_value_type="bytes")
        big = b"v" * c.max_value_size
        for round in range(6):
            pid = os.fork()
            if pid == 0:
                try:
                    while True:
                        c.set("big", big)
                finally:
                    os._exit(0)
            time.sleep(0.02 + round * 0.004)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            signal.alarm(20)  # a hang ends the test run with SIGALRM: a failure, never a pass
            try:
                c.set("after", b"ok")
            finally:
                signal.alarm(0)
        self.assertEqual(c["after"], b"ok")
        self.assertEqual(c.verify(), 0)

    def test_a_claim_taken_before_the_fork_stays_the_parents(self):
        c = mappedcache.Cache(self.path)
        status, _, claim = c._claim("k")
        self.assertEqual(status, mappedcache._mappedcache.CLAIMED)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(read_fd)
                try:
                    claim.publish("from child")
                    code = 1
                except mappedcache.ForkedClaimError:
                    pass
                if not c.is_computing("k"):
                    code = 2
                os.write(write_fd, b"go")
                # Waits for the parent's value, rather than computing.
                if c.get_or_compute("k", lambda: "child computed", wait=10) != "from parent":
                    code = 3
            except BaseException:
                code = 9
            finally:
                os._exit(code)
        os.close(write_fd)
        self.assertEqual(os.read(read_fd, 2), b"go")
        os.close(read_fd)
        time.sleep(0.2)
        claim.publish("from parent")
        self.assertEqual(os.waitpid(pid, 0)[1], 0)
        self.assertEqual(c["k"], "from parent")


if __name__ == "__main__":
    unittest.main()
