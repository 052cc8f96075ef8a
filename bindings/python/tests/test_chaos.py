"""The chaos harness with Python workers: Python processes setting and reading self-checking
values (Tests/CheckedValues' format) are SIGKILLed at random, and restarted, while Swift
processes (the helper's writer and reader) set and read the same keys. Nothing read may
be corrupt or wrong, and the file must verify clean afterwards."""

import json
import os
import random
import signal
import subprocess
import sys
import time
import unittest

import mappedcache
from py_worker import check
from support import CacheTest, swift_binary

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "py_worker.py")
SECONDS = float(os.environ.get("MAPPEDCACHE_CHAOS_SECONDS", "5"))
KEYS = 500


class ChaosTests(CacheTest):
    def test_python_workers_killed_at_random_beside_swift_processes(self):
        cache = mappedcache.Cache(self.path, capacity=32 << 20, value_type="bytes")
        problems = self.path + ".problems"
        stop = self.path + ".stop"
        for p in (problems, stop):
            self.addCleanup(lambda p=p: os.path.exists(p) and os.unlink(p))
        helper = swift_binary("mc-test-helper")
        rng = random.Random(31)

        def swift_writer(i):
            return subprocess.Popen([helper, "writer", self.path, str(i), str(SECONDS + 1), str(KEYS), "16", "2000"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def python_worker(slot):
            return subprocess.Popen([sys.executable, WORKER, "chaos", self.path, str(slot), str(KEYS), problems, stop],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        writers = [swift_writer(i) for i in (1, 2)]
        reader = subprocess.Popen([helper, "reader", self.path, str(SECONDS + 5), str(KEYS)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        workers = {slot: python_worker(slot) for slot in range(4)}
        kills = 0
        killed_writer = False
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            time.sleep(rng.uniform(0.1, 0.3))
            slot = rng.randrange(len(workers))
            victim = workers[slot]
            victim.send_signal(signal.SIGKILL)
            victim.communicate(timeout=30)
            self.assertEqual(victim.returncode, -signal.SIGKILL, f"worker {slot} had already exited: {victim.stderr}")
            workers[slot] = python_worker(slot)
            kills += 1
            if not killed_writer and time.monotonic() > end - SECONDS / 2:
                # One Swift writer killed too, mid-run, and replaced.
                writers[0].kill()
                writers[0].communicate(timeout=30)
                writers[0] = swift_writer(3)
                killed_writer = True
        open(stop, "w").close()
        outputs = {slot: p.communicate(timeout=60) for slot, p in workers.items()}
        swift = [p.communicate(timeout=60) for p in writers + [reader]]

        with open(problems) if os.path.exists(problems) else open(os.devnull) as f:
            reported = f.read()
        # The file's counters go with a failure: busy misses, takeovers and repairs tell a
        # read that gave up on a bucket from an entry that was lost.
        self.assertEqual(reported, "", f"workers read corrupt or wrong values; counters: {cache.stats()}")
        for slot, (out, err) in outputs.items():
            self.assertEqual(workers[slot].returncode, 0, err)
            counts = json.loads(out.strip().splitlines()[-1])
            self.assertEqual((counts["corrupt"], counts["wrong"]), (0, 0))
            self.assertGreater(counts["sets"], 0)
            self.assertGreater(counts["hits"], 0)
        for p, (out, err) in zip(writers + [reader], swift):
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual(json.loads(out.strip().splitlines()[-1])["corrupt"], 0)
        self.assertGreaterEqual(kills, int(SECONDS / 0.3))

        # Every entry left in the file checks, and the file verifies clean.
        entries = cache.items()
        self.assertGreater(len(entries), KEYS // 2)
        bad = [k for k, v in entries if not check(v, k)]
        self.assertEqual(bad, [])
        self.assertEqual(cache.verify(), 0)
        print(f"\nchaos: {kills} Python workers SIGKILLed in {SECONDS:.0f} s, {len(entries)} entries checked",
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
