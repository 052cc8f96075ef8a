"""mappedcache.Cache in one process: every method, every value type, and bad input,
which must raise a clear exception and never crash."""

import math
import os
import threading
import time
import unittest

import mappedcache
from support import CacheTest, remove, temp_path


class EntryTests(CacheTest):
    def test_values_of_a_python_cache_keep_their_types(self):
        c = mappedcache.Cache(self.path, capacity=4 << 20)
        self.assertEqual(c.value_type, "python")
        values = {"s": "héllo 🎉", "b": b"\x00\xff", "i": -42, "big": 10**40, "f": 2.5, "e": "", "eb": b""}
        for k, v in values.items():
            c[k] = v
        for k, v in values.items():
            got = c[k]
            self.assertEqual(got, v)
            self.assertIs(type(got), type(v))
        c["ba"] = bytearray(b"xy")
        self.assertEqual(c["ba"], b"xy")
        with self.assertRaises(TypeError):
            c["l"] = [1]  # needs pickle=True
        with self.assertRaises(TypeError):
            c["t"] = True  # bool is not stored as an int

    def test_pickle_is_an_opt_in_for_writing_and_reading(self):
        with mappedcache.Cache(self.path, pickle=True) as c:
            c["obj"] = {"a": [1, (2, 3)], "n": None}
            c["flag"] = True
            self.assertEqual(c["obj"], {"a": [1, (2, 3)], "n": None})
            self.assertIs(c["flag"], True)
        with mappedcache.Cache(self.path) as plain:
            with self.assertRaises(mappedcache.DecodingError):
                plain["obj"]
            self.assertEqual(plain.get("missing", 1), 1)

    def test_get_set_and_the_mapping_protocol(self):
        c = mappedcache.Cache(self.path)
        self.assertIsNone(c.get("k"))
        self.assertEqual(c.get("k", "d"), "d")
        self.assertEqual(c.get(key="k", default=3), 3)
        with self.assertRaises(KeyError):
            c["k"]
        c.set("k", "v")
        c[b"bk"] = "by bytes"
        self.assertEqual(c["bk"], "by bytes")
        self.assertIn("k", c)
        self.assertNotIn("other", c)
        self.assertEqual(sorted(c), ["bk", "k"])
        self.assertEqual(len(c), 2)
        del c["k"]
        with self.assertRaises(KeyError):
            del c["k"]
        self.assertEqual(c.pop("bk"), "by bytes")
        self.assertEqual(c.pop("bk", None), None)
        self.assertEqual(c.setdefault("sd", 1), 1)
        self.assertEqual(c.setdefault("sd", 2), 1)
        big = os.urandom(200_000)
        c["big"] = big
        self.assertEqual(c["big"], big)
        self.assertEqual(c.get_many(["big"])["big"], big)

    def test_conditional_writes_and_compare_and_swap(self):
        c = mappedcache.Cache(self.path)
        self.assertTrue(c.add("a", 1))
        self.assertFalse(c.add("a", 2))
        self.assertFalse(c.replace("b", 1))
        self.assertTrue(c.replace("a", 3))
        value, version = c.gets("a")
        self.assertEqual(value, 3)
        self.assertTrue(c.cas("a", 4, version))
        self.assertFalse(c.cas("a", 5, version))
        self.assertEqual(c["a"], 4)
        self.assertIsNone(c.gets("nothing"))
        self.assertTrue(c.delete("a"))
        self.assertFalse(c.delete("a"))

    def test_expiry_ttl_and_touch(self):
        c = mappedcache.Cache(self.path)
        c.set("forever", 1)
        self.assertEqual(c.ttl("forever"), math.inf)
        c.set("brief", 1, ttl=0.15)
        self.assertTrue(0 < c.ttl("brief") <= 0.15)
        self.assertTrue(c.touch("brief", 30))
        self.assertTrue(29 < c.ttl("brief") <= 30)
        self.assertTrue(c.touch("brief", 0.1))
        time.sleep(0.2)
        self.assertIsNone(c.get("brief"))
        self.assertIsNone(c.ttl("brief"))
        self.assertFalse(c.touch("brief", 5))
        c.set("short", 1, ttl=0.05)
        time.sleep(0.1)
        self.assertEqual(c.sweep(), 2)  # "brief" too: a read of an expired entry leaves it
        for bad in (0, -1, float("nan")):
            with self.assertRaises(ValueError):
                c.set("k", 1, ttl=bad)
        with self.assertRaises(TypeError):
            c.set("k", 1, ttl="10")

    def test_counters(self):
        c = mappedcache.Cache(self.path)
        self.assertEqual(c.incr("n"), 1)
        self.assertEqual(c.incr("n", 10), 11)
        self.assertEqual(c.decr("n", 20), -9)
        self.assertEqual(c["n"], -9)
        self.assertEqual(c.incr("fresh", 5, initial=100), 105)
        c.set("word", "abc")
        with self.assertRaises(mappedcache.NotAnIntegerError):
            c.incr("word")
        self.assertEqual(c["word"], "abc")
        c.set("top", 2**63 - 1)
        with self.assertRaises(OverflowError):
            c.incr("top")
        c.set("timed", 1, ttl=30)
        c.incr("timed")
        self.assertTrue(29 < c.ttl("timed") <= 30)  # a counter keeps its expiry
        # Atomic across threads.
        threads = [threading.Thread(target=lambda: [c.incr("race") for _ in range(2000)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(c["race"], 8000)

    def test_batches_and_iteration(self):
        c = mappedcache.Cache(self.path)
        data = {f"key-{i}": f"value-{i}" for i in range(300)}
        c.set_many(data)
        c.set_many([("pair", 1)])
        got = c.get_many(list(data) + ["missing"])
        self.assertEqual(got, data)
        self.assertEqual(c.get_many([]), {})
        self.assertEqual(sorted(c.keys()), sorted(list(data) + ["pair"]))
        self.assertEqual(dict(c.items()), {**data, "pair": 1})
        self.assertEqual(len(c.values()), 301)
        self.assertEqual(c.delete_many(["key-1", "key-2", "nope"]), 2)
        # A bad entry stores nothing of the batch.
        with self.assertRaises(mappedcache.InvalidKeyError):
            c.set_many({"good": 1, "": 2})
        self.assertNotIn("good", c)
        with self.assertRaises(TypeError):
            c.set_many({"good": 1, "bad": object()})
        self.assertNotIn("good", c)
        c.clear()
        self.assertEqual(len(c), 0)

    def test_stats_verify_and_limits(self):
        c = mappedcache.Cache(self.path, capacity=2 << 20)
        self.assertEqual(c.capacity, 2 << 20)
        c["a"] = 1
        c.get("a")
        c.get("b")
        s = c.stats()
        self.assertEqual(s["entries"], 1)
        self.assertGreaterEqual(s["hits"], 1)
        self.assertGreaterEqual(s["misses"], 1)
        self.assertTrue(0 < s["hit_ratio"] < 1)
        self.assertEqual(c.verify(), 0)
        self.assertEqual(c.verify(repair=True), 0)
        c.set_many({f"k{i}": i for i in range(50)})
        c.set_limits(count=10)
        self.assertLessEqual(len(c), 10)
        self.assertEqual(c.stats()["count_limit"], 10)
        c.set_limits(count=0)
        with self.assertRaises(ValueError):
            c.set_limits(count=-1)

    def test_grow_keeps_every_entry(self):
        c = mappedcache.Cache(self.path, capacity=4 << 20, partitions=2)
        c.set_many({f"g{i}": f"value-{i}" for i in range(2000)})
        other = mappedcache.Cache(self.path)
        grown = c.grow(16 << 20)
        self.assertGreater(grown, 12 << 20)
        self.assertLessEqual(grown, 16 << 20)
        self.assertEqual(c.capacity, grown)
        self.assertEqual(c.stats()["partition_count"], 8)
        # The other handle, opened before the growth, sees it too.
        self.assertEqual(other.capacity, grown)
        self.assertEqual(other.partition_count, 8)
        for i in range(2000):
            self.assertEqual(other.get(f"g{i}"), f"value-{i}")
        other.set("after", "grown")
        self.assertEqual(c.get("after"), "grown")
        self.assertEqual(c.verify(), 0)
        with self.assertRaises(ValueError):
            c.grow(1 << 20)
        with self.assertRaises(TypeError):
            c.grow("big")
        c.set_growth_policy(0.05, factor=2, min_interval=30, min_inserts=1000)
        with self.assertRaises(ValueError):
            c.set_growth_policy(5)
        with self.assertRaises(ValueError):
            c.set_growth_policy(0.05, factor=0.5)
        c.set_growth_policy(None)

    def test_partitions_are_chosen_at_creation_and_shown(self):
        c = mappedcache.Cache(self.path, capacity=8 << 20, partitions=4)
        self.assertEqual(c.partition_count, 4)
        c.set_many({f"k{i}": i for i in range(400)})
        self.assertEqual(c.get_many([f"k{i}" for i in range(400)]), {f"k{i}": i for i in range(400)})
        s = c.stats()
        self.assertEqual(s["partition_count"], 4)
        self.assertEqual(s["entries"], 400)
        self.assertGreaterEqual(s["index_splits"], 0)
        self.assertGreaterEqual(s["index_merges"], 0)
        # A second handle on the file finds the file's count, whatever it asks for.
        other = mappedcache.Cache(self.path, partitions=2)
        self.assertEqual(other.partition_count, 4)
        self.assertEqual(other["k7"], 7)
        other.close()
        c.close()
        remove(self.path)
        self.assertEqual(mappedcache.Cache(self.path, capacity=1 << 20, partitions=1).partition_count, 1)


class TypedFileTests(CacheTest):
    def test_a_cache_of_strings_bytes_or_ints_takes_only_its_type(self):
        s = mappedcache.Cache(self.path, value_type="str")
        s["k"] = "text"
        self.assertEqual(s["k"], "text")
        with self.assertRaises(TypeError):
            s["k"] = b"bytes"
        s.close()
        # Opened for the file's own type, and for another type: refused.
        again = mappedcache.Cache(self.path)
        self.assertEqual(again.value_type, "string")
        with self.assertRaises(mappedcache.TypeMismatchError):
            mappedcache.Cache(self.path, value_type="bytes")
        b_path = temp_path("bytes")
        self.addCleanup(remove, b_path)
        b = mappedcache.Cache(b_path, value_type="bytes")
        b["k"] = memoryview(b"abc")
        self.assertEqual(b["k"], b"abc")
        with self.assertRaises(TypeError):
            b["k"] = "str"
        self.assertEqual(b.incr("n"), 1)
        self.assertEqual(b["n"], b"1")  # ASCII decimal, as memcached
        i_path = temp_path("int64")
        self.addCleanup(remove, i_path)
        i = mappedcache.Cache(i_path, create_value_type="int64")
        i["n"] = 2**62
        self.assertEqual(i["n"], 2**62)
        with self.assertRaises(OverflowError):
            i["n"] = 2**64
        with self.assertRaises(TypeError):
            i["n"] = 1.5
        self.assertEqual(i.incr("c", 3), 3)

    def test_read_only_handles_refuse_writes(self):
        mappedcache.Cache(self.path)["k"] = 1
        ro = mappedcache.Cache(self.path, read_only=True)
        self.assertFalse(ro.writable)
        self.assertEqual(ro["k"], 1)
        with self.assertRaises(mappedcache.ReadOnlyError):
            ro["k"] = 2
        with self.assertRaises(PermissionError):
            ro.delete("k")


class BadInputTests(CacheTest):
    def test_bad_keys_values_and_arguments_raise_clear_errors(self):
        c = mappedcache.Cache(self.path)
        cases = [
            (lambda: c.get(None), TypeError, "str or bytes"),
            (lambda: c.get(5), TypeError, "str or bytes"),
            (lambda: c.get(""), mappedcache.InvalidKeyError, "empty"),
            (lambda: c.set("x" * 251, 1), mappedcache.InvalidKeyError, "251 bytes"),
            (lambda: c.get("x" * 10_000_000), mappedcache.InvalidKeyError, "limit"),
            (lambda: c.get(b"\xff\xfe"), mappedcache.InvalidKeyError, "UTF-8"),
            (lambda: c.get("\ud800"), UnicodeEncodeError, "surrogate"),
            (lambda: c.set("k", b"v" * (2 << 20)), mappedcache.InvalidValueError, "exceeds"),
            (lambda: c.set("k", object()), TypeError, "pickle=True"),
            (lambda: c.get(), TypeError, "missing required argument"),
            (lambda: c.get("k", 1, 2), TypeError, "at most"),
            (lambda: c.get("k", nope=1), TypeError, "unexpected keyword"),
            (lambda: c.incr("k", "1"), TypeError, ""),
            (lambda: c.cas("k", 1, -1), OverflowError, ""),
            (lambda: c.get_many(5), TypeError, "iterable"),
            (lambda: c.set_many([1, 2]), TypeError, "pairs"),
            (lambda: c.get_or_compute("k", lambda: 1, wait=-1), ValueError, "wait"),
        ]
        for call, error, words in cases:
            with self.assertRaises(error) as caught:
                call()
            self.assertIn(words, str(caught.exception))
        for bad in (0, -5, 1.5, True):
            with self.assertRaises(ValueError):
                mappedcache.Cache(temp_path("bad"), capacity=bad)
        with self.assertRaises(ValueError):
            mappedcache.Cache(temp_path("bad"), capacity=1000)  # under 1 MiB
        with self.assertRaises(ValueError):
            mappedcache.Cache(temp_path("bad"), value_type="codable:Foo")
        with self.assertRaises(mappedcache.CacheOSError) as e:
            mappedcache.Cache("/nonexistent-mc-dir/x.mcache", create=False)
        self.assertEqual(e.exception.errno, 2)
        with self.assertRaises(TypeError):
            import pickle

            pickle.dumps(c)
        self.assertEqual(c.verify(), 0)

    def test_a_file_that_is_not_a_cache_is_refused_and_left_alone(self):
        with open(self.path, "wb") as f:
            f.write(b"not a cache " * 10_000)
        with self.assertRaises(mappedcache.NotACacheError):
            mappedcache.Cache(self.path)
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(12), b"not a cache ")

    def test_a_closed_handle_raises(self):
        c = mappedcache.Cache(self.path)
        c["k"] = 1
        c.close()
        c.close()
        self.assertTrue(c.closed)
        for call in (lambda: c.get("k"), lambda: c.set("k", 1), lambda: c["k"], lambda: len(c), lambda: list(c)):
            with self.assertRaises(mappedcache.ClosedError):
                call()
        with mappedcache.Cache(self.path) as d:
            self.assertEqual(d["k"], 1)
        self.assertTrue(d.closed)
        self.assertIn("closed", repr(d))


class ComputeTests(CacheTest):
    def test_get_or_compute_runs_once_across_threads(self):
        c = mappedcache.Cache(self.path)
        calls = []

        def build():
            calls.append(1)
            time.sleep(0.2)
            return "report"

        results = []
        threads = [threading.Thread(target=lambda: results.append(c.get_or_compute("r", build, ttl=60))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, ["report"] * 8)
        self.assertEqual(len(calls), 1)
        self.assertTrue(59 < c.ttl("r") <= 60)
        self.assertFalse(c.is_computing("r"))

    def test_a_failed_compute_releases_the_claim(self):
        c = mappedcache.Cache(self.path)
        with self.assertRaises(ZeroDivisionError):
            c.get_or_compute("k", lambda: 1 / 0)
        self.assertFalse(c.is_computing("k"))
        self.assertEqual(c.get_or_compute("k", lambda: 7), 7)

    def test_waiters_compute_themselves_after_the_wait_and_serve_stale(self):
        c = mappedcache.Cache(self.path)
        status, _, claim = c._claim("k")
        self.assertEqual(status, mappedcache._mappedcache.CLAIMED)
        self.assertTrue(c.is_computing("k"))
        start = time.monotonic()
        self.assertEqual(c.get_or_compute("k", lambda: "mine", wait=0.1), "mine")
        self.assertGreaterEqual(time.monotonic() - start, 0.1)
        claim.publish("theirs")
        with self.assertRaises(mappedcache.ClosedError):
            claim.publish("again")
        self.assertEqual(c["k"], "theirs")
        c.set("s", "old", ttl=0.05)
        time.sleep(0.1)
        _, _, claim = c._claim("s")
        self.assertEqual(c.get_or_compute("s", lambda: "new", serve_stale=True), "old")
        claim.abandon()
        self.assertEqual(c.get_or_compute("s", lambda: "new"), "new")

    def test_the_cached_decorator(self):
        c = mappedcache.Cache(self.path, pickle=True)
        calls = []

        @mappedcache.cached(ttl=60, cache=c)
        def square(x, scale=1):
            calls.append(x)
            return {"square": x * x * scale}

        self.assertEqual(square(3), {"square": 9})
        self.assertEqual(square(3), {"square": 9})
        self.assertEqual(square(3, scale=2), {"square": 18})
        self.assertEqual(calls, [3, 3])
        self.assertTrue(square.invalidate(3))
        square(3)
        self.assertEqual(calls, [3, 3, 3])
        self.assertIn("square", square.cache_key(3))

        @mappedcache.cached(cache=self.path, key=lambda s: s[:3])
        def long_args(s):
            return len(s)

        self.assertEqual(long_args("x" * 1000), 1000)
        self.assertEqual(long_args("xxxy"), 1000)  # same key: "xxx"

        @mappedcache.cached(cache=c)
        def many(s):
            return s

        self.assertEqual(many("y" * 1000), "y" * 1000)  # a long key is hashed
        self.assertTrue(any(k.endswith(":" + "0" * 0) or "sha256" in k for k in c.keys()))


if __name__ == "__main__":
    unittest.main()
