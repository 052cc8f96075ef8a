"""mappedcache.aiocache.MappedCache against aiocache's BaseCache contract (the
operations aiocache's acceptance tests run on its memory and Redis backends), and
get_or_compute: one computation across processes, waiting without blocking the loop."""

import asyncio
import os
import subprocess
import sys
import time
import unittest
import uuid

from aiocache.lock import OptimisticLock, OptimisticLockError, RedLock
from aiocache.serializers import JsonSerializer, PickleSerializer

import mappedcache
from mappedcache.aiocache import MappedCache


def temp_path(tag):
    return f"/dev/shm/mc-aiocache-{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}.mcache"


class AiocacheBackendTests(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.path = temp_path("t")
        self.cache = MappedCache(self.path, 8 << 20)
        self.addCleanup(lambda: os.path.exists(self.path) and os.unlink(self.path))

    async def test_get_set_and_values_of_every_kind(self):
        c = self.cache
        values = {"s": "héllo", "b": b"\x00\xff", "i": 42, "f": 1.5, "none": None, "l": [1, {"a": (2, 3)}]}
        for k, v in values.items():
            self.assertTrue(await c.set(k, v))
        for k, v in values.items():
            self.assertEqual(await c.get(k), v)
        self.assertIsNone(await c.get("missing"))
        self.assertEqual(await c.get("missing", default="d"), "d")
        self.assertTrue(await c.exists("none"))  # a stored None is there
        self.assertFalse(await c.exists("missing"))

    async def test_add_is_atomic_and_raises_on_a_live_key(self):
        c = self.cache
        self.assertTrue(await c.add("k", 1))
        with self.assertRaises(ValueError):
            await c.add("k", 2)
        self.assertEqual(await c.get("k"), 1)
        await c.set("brief", 1, ttl=0.1)
        await asyncio.sleep(0.2)
        self.assertTrue(await c.add("brief", 2))  # expired: added again

    async def test_ttl_expire_and_forever(self):
        c = self.cache
        await c.set("t", "v", ttl=0.1)
        await c.set("forever", "v", ttl=0)
        await c.set("none", "v")
        await asyncio.sleep(0.2)
        self.assertIsNone(await c.get("t"))
        self.assertEqual(await c.get("forever"), "v")
        self.assertTrue(await c.expire("forever", 0.1))
        await asyncio.sleep(0.2)
        self.assertIsNone(await c.get("forever"))
        self.assertTrue(await c.expire("none", 0))
        self.assertEqual(c.cache.ttl("none"), float("inf"))
        self.assertFalse(await c.expire("missing", 1))

    async def test_default_ttl(self):
        c = MappedCache(self.path, ttl=0.1)
        await c.set("k", "v")
        await asyncio.sleep(0.2)
        self.assertIsNone(await c.get("k"))

    async def test_increment_starts_at_zero_and_is_an_int_for_other_handles(self):
        c = self.cache
        self.assertEqual(await c.increment("n"), 1)
        self.assertEqual(await c.increment("n", 10), 11)
        self.assertEqual(await c.increment("n", -20), -9)
        self.assertEqual(mappedcache.Cache(self.path).get("n"), -9)
        await c.set("text", "abc")
        with self.assertRaises(TypeError):
            await c.increment("text")
        self.assertEqual(await c.get("text"), "abc")

    async def test_multi_get_set_delete_and_clear(self):
        c = self.cache
        self.assertTrue(await c.multi_set([("a", 1), ("b", "two"), ("c", None)]))
        self.assertEqual(await c.multi_get(["a", "b", "c", "d"]), [1, "two", None, None])
        self.assertEqual(await c.delete("a"), 1)
        self.assertEqual(await c.delete("a"), 0)
        self.assertTrue(await c.clear())
        self.assertEqual(await c.multi_get(["b"]), [None])

    async def test_namespaces_and_clear_of_one_namespace(self):
        a = MappedCache(self.path, namespace="a:")
        b = MappedCache(self.path, namespace="b:")
        await a.set("k", 1)
        await b.set("k", 2)
        self.assertEqual(await a.get("k"), 1)
        self.assertEqual(await a.get("k", namespace="b:"), 2)
        self.assertIn("a:k", a.cache.keys())
        await a.clear(namespace="a:")  # clear() with no namespace clears all, as aiocache's backends do
        self.assertIsNone(await a.get("k"))
        self.assertEqual(await b.get("k"), 2)
        await b.clear()
        self.assertEqual(a.cache.keys(), [])

    async def test_long_keys_are_hashed(self):
        c = self.cache
        long_key = "k" * 1000
        await c.set(long_key, "long")
        self.assertEqual(await c.get(long_key), "long")
        self.assertTrue(await c.exists(long_key))

    async def test_serializers(self):
        for serializer in (JsonSerializer(), PickleSerializer()):
            c = MappedCache(self.path, serializer=serializer)
            await c.set("k", {"a": [1, 2]})
            self.assertEqual(await c.get("k"), {"a": [1, 2]})

    async def test_optimistic_lock_and_red_lock(self):
        c = self.cache
        await c.set("k", "one")
        async with OptimisticLock(c, "k") as lock:
            await lock.cas("two")
        self.assertEqual(await c.get("k"), "two")
        with self.assertRaises(OptimisticLockError):
            async with OptimisticLock(c, "k") as lock:
                await c.set("k", "changed meanwhile")
                await lock.cas("three")
        self.assertEqual(await c.get("k"), "changed meanwhile")
        async with RedLock(c, "job", lease=5):
            self.assertTrue(await c.exists("job-lock"))
        self.assertFalse(await c.exists("job-lock"))

    async def test_get_and_set_keep_every_layer_of_aiocache(self):
        # Plugins, per-call timeouts, loads_fn/dumps_fn, namespaces and AIOCACHE_DISABLE
        # hold for get and set as for every other call.
        from aiocache.plugins import BasePlugin

        calls = []

        class Recorder(BasePlugin):
            async def pre_get(self, client, key, *args, **kwargs):
                calls.append(("pre_get", key))

            async def post_get(self, client, key, *args, ret=None, **kwargs):
                calls.append(("post_get", key, ret))

            async def pre_set(self, client, key, value, *args, **kwargs):
                calls.append(("pre_set", key, value))

            async def post_set(self, client, key, value, *args, ret=None, **kwargs):
                calls.append(("post_set", key, ret))

        c = MappedCache(self.path, plugins=[Recorder()])
        self.assertTrue(await c.set("k", "v"))
        self.assertEqual(await c.get("k"), "v")
        self.assertEqual(
            calls, [("pre_set", "k", "v"), ("post_set", "k", True), ("pre_get", "k"), ("post_get", "k", "v")]
        )
        c = self.cache
        self.assertTrue(await c.set("t", "v", timeout=1))
        self.assertEqual(await c.get("t", timeout=1), "v")
        self.assertTrue(await c.set("f", 2, dumps_fn=lambda v: v * 10))
        self.assertEqual(await c.get("f", loads_fn=lambda v: v + 1), 21)
        self.assertTrue(await c.set("n", "in ns", namespace="ns:"))
        self.assertEqual(await c.get("ns:n"), "in ns")
        self.assertEqual(await c.get("n", namespace="ns:"), "in ns")
        os.environ["AIOCACHE_DISABLE"] = "1"
        try:
            self.assertTrue(await c.set("off", "v"))
            self.assertIsNone(await c.get("n", namespace="ns:"))
        finally:
            del os.environ["AIOCACHE_DISABLE"]
        self.assertIsNone(await c.get("off"))

    async def test_raw(self):
        await self.cache.set("k", 1)
        self.assertEqual(await self.cache.raw("keys"), ["k"])

    async def test_get_or_compute_once_while_the_loop_runs(self):
        c = self.cache
        calls = []
        ticks = []

        async def compute():
            calls.append(1)
            await asyncio.sleep(0.2)
            return {"computed": True}

        async def ticker():
            for _ in range(10):
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        results = await asyncio.gather(*(c.get_or_compute("r", compute, ttl=60) for _ in range(5)), ticker())
        self.assertEqual(results[:5], [{"computed": True}] * 5)
        self.assertEqual(len(calls), 1)
        self.assertEqual(len(ticks), 10)  # the loop kept running while they waited
        self.assertEqual(await c.get_or_compute("r", compute), {"computed": True})
        self.assertEqual(len(calls), 1)
        self.assertEqual(await c.get_or_compute("sync", lambda: 7), 7)

    async def test_get_or_compute_releases_the_claim_on_an_exception(self):
        c = self.cache

        async def fail():
            raise RuntimeError("no")

        with self.assertRaises(RuntimeError):
            await c.get_or_compute("k", fail)
        self.assertEqual(await c.get_or_compute("k", lambda: "second"), "second")

    def test_get_or_compute_once_across_processes(self):
        script = (
            "import asyncio, sys, time\n"
            "from mappedcache.aiocache import MappedCache\n"
            "c = MappedCache(sys.argv[1])\n"
            "async def compute():\n"
            "    with open(sys.argv[2], 'a') as f: f.write('x')\n"
            "    await asyncio.sleep(0.5)\n"
            "    return 'shared'\n"
            "print(asyncio.run(c.get_or_compute('k', compute, ttl=60)))\n"
        )
        log = self.path + ".log"
        self.addCleanup(lambda: os.path.exists(log) and os.unlink(log))
        procs = [subprocess.Popen([sys.executable, "-c", script, self.path, log], stdout=subprocess.PIPE, text=True)
                 for _ in range(4)]
        outs = [p.communicate(timeout=60)[0].strip() for p in procs]
        self.assertEqual(outs, ["shared"] * 4)
        with open(log) as f:
            self.assertEqual(f.read(), "x")


if __name__ == "__main__":
    unittest.main()
