"""Python and Swift processes on one file: values typed the same way both ways (a
SharedCache<String> value is a str in Python, [UInt8]/Data values are bytes, Int values
int), counters shared, and get-or-compute computing once across both languages."""

import json
import os
import subprocess
import sys
import time
import unittest

import mappedcache
from support import CacheTest, swift_binary

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "py_worker.py")

STRINGS = {"plain": "hello", "accents": "héllo wörld", "emoji": "🎉 party", "empty": "", "nul": "a\0b"}
BYTES = {"zero": bytes([0, 1, 2, 255]), "empty": b"", "text": b"abc"}
INTS = {"one": 1, "negative": -42, "max": 2**63 - 1}


def helper(*args: str, timeout: float = 60) -> str:
    r = subprocess.run([swift_binary("mc-test-helper"), *args], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"mc-test-helper {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r.stdout


class SwiftWritesPythonReads(CacheTest):
    def test_strings_are_str(self):
        helper("interop-write", self.path, "string")
        c = mappedcache.Cache(self.path)
        self.assertEqual(c.value_type, "string")
        self.assertEqual({k: c[k] for k in STRINGS}, STRINGS)
        self.assertTrue(all(type(c[k]) is str for k in STRINGS))
        self.assertEqual(sorted(c.keys()), sorted(STRINGS))

    def test_byte_arrays_and_data_are_bytes(self):
        for kind in ("bytes", "data"):
            with self.subTest(kind=kind):
                helper("interop-write", self.path, kind)
                c = mappedcache.Cache(self.path)
                self.assertEqual(c.value_type, "bytes")
                self.assertEqual({k: c[k] for k in BYTES}, BYTES)
                self.assertTrue(all(type(c[k]) is bytes for k in BYTES))
                c.close()
                os.unlink(self.path)

    def test_ints_are_int(self):
        helper("interop-write", self.path, "int")
        c = mappedcache.Cache(self.path)
        self.assertEqual(c.value_type, "int64")
        self.assertEqual({k: c[k] for k in INTS}, INTS)


class PythonWritesSwiftReads(CacheTest):
    def read(self, kind, keys):
        return helper("interop-read", self.path, kind, *keys).splitlines()

    def test_str_values_are_swift_strings(self):
        c = mappedcache.Cache(self.path, capacity=4 << 20, create_value_type="string")
        for k, v in STRINGS.items():
            c[k] = v
        lines = self.read("string", list(STRINGS) + ["missing"])
        self.assertEqual([json.loads(line) for line in lines[:-1]], list(STRINGS.values()))
        self.assertEqual(lines[-1], "MISSING")

    def test_bytes_values_are_swift_byte_arrays(self):
        c = mappedcache.Cache(self.path, capacity=4 << 20, create_value_type="bytes")
        for k, v in BYTES.items():
            c[k] = v
        self.assertEqual(self.read("bytes", list(BYTES)), [v.hex() for v in BYTES.values()])

    def test_int_values_and_counters_are_swift_ints(self):
        c = mappedcache.Cache(self.path, capacity=4 << 20, create_value_type="int64")
        for k, v in INTS.items():
            c[k] = v
        self.assertEqual(self.read("int", list(INTS)), [str(v) for v in INTS.values()])
        # Python's incr and Swift's increment on one counter, at once: nothing lost.
        swift = subprocess.Popen([swift_binary("mc-test-helper"), "incr", self.path, "hits", "3000"],
                                 stdout=subprocess.DEVNULL)
        for _ in range(3000):
            c.incr("hits")
        self.assertEqual(swift.wait(60), 0)
        self.assertEqual(c["hits"], 6000)


class ComputeOnceAcrossLanguages(CacheTest):
    def test_python_and_swift_racers_compute_once(self):
        counter = self.path + ".count"
        self.addCleanup(lambda: os.path.exists(counter) and os.unlink(counter))
        mappedcache.Cache(self.path, capacity=4 << 20, create_value_type="string").close()
        start = str(int(time.time() * 1000) + 1500)
        racers = [
            subprocess.Popen([swift_binary("mc-test-helper"), "compute-race", self.path, "report", counter, start, "300"],
                             stdout=subprocess.PIPE, text=True)
            for _ in range(3)
        ] + [
            subprocess.Popen([sys.executable, WORKER, "compute-race", self.path, "report", counter, start, "300"],
                             stdout=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        outputs = [p.communicate(timeout=60)[0].split() for p in racers]
        self.assertTrue(all(p.returncode == 0 for p in racers), outputs)
        with open(counter) as f:
            computes = f.read().splitlines()
        self.assertEqual(len(computes), 1, computes)
        values = {o[0] for o in outputs}
        self.assertEqual(len(values), 1, outputs)
        self.assertEqual(sorted(o[1] for o in outputs), ["cached"] * 5 + ["computed"])

    def test_a_swift_waiter_gets_the_value_python_publishes(self):
        c = mappedcache.Cache(self.path, capacity=4 << 20, create_value_type="string")
        status, _, claim = c._claim("k")
        self.assertEqual(status, mappedcache._mappedcache.CLAIMED)
        swift = subprocess.Popen([swift_binary("mc-test-helper"), "compute-once", self.path, "k", "20"],
                                 stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        self.assertIsNone(swift.poll())  # waiting for this claim
        claim.publish("from python")
        out, _ = swift.communicate(timeout=30)
        self.assertEqual(out.strip(), "from python cached")

    def test_python_waits_for_a_swift_claim_and_takes_it_when_swift_dies(self):
        mappedcache.Cache(self.path, capacity=4 << 20, create_value_type="string").close()
        swift = subprocess.Popen([swift_binary("mc-test-helper"), "compute-hold", self.path, "k"],
                                 stdout=subprocess.PIPE, text=True)
        self.assertEqual(swift.stdout.readline().strip(), "claimed")
        c = mappedcache.Cache(self.path)
        self.assertTrue(c.is_computing("k"))
        status, _, _ = c._claim("k")
        self.assertEqual(status, mappedcache._mappedcache.BUSY)
        swift.kill()
        swift.wait(10)
        swift.stdout.close()
        self.assertEqual(c.get_or_compute("k", lambda: "python took over", wait=5), "python took over")


if __name__ == "__main__":
    unittest.main()
