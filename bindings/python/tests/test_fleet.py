"""Fleets of any size with the default options: the handles one process opens on one path
share that process's one slot of the file's process table, in the process and in every
forked child; and a creation that fails for want of space leaves no file behind and says
how big the file system is."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import mappedcache
from support import CacheTest, fork, unavailable, wait_statuses


class FleetTests(CacheTest):
    def test_a_thousand_handles_in_one_process_share_one_slot(self):
        # A table of 4 entries: with a slot per handle the fifth open would fail.
        first = mappedcache.Cache(self.path, capacity=8 << 20, max_processes=4)
        handles = [mappedcache.Cache(self.path) for _ in range(1000)]
        for i, h in enumerate(handles):
            h.set(f"k{i}", i)
        self.assertEqual([first.get(f"k{i}") for i in range(1000)], list(range(1000)))
        for h in handles[::2]:
            h.close()
        handles[1].set("after", "closing half")
        self.assertEqual(first.get("after"), "closing half")
        self.assertEqual(first.verify(), 0)

    def test_forked_children_each_take_one_slot_for_all_their_handles(self):
        # Three children at once, a table of 4: the parent's slot and one per child, each
        # child writing through the inherited handle and three of its own, all held until
        # every child has written.
        parent = mappedcache.Cache(self.path, capacity=8 << 20, max_processes=4)
        parent.set("from", "parent")
        written_r, written_w = os.pipe()
        go_r, go_w = os.pipe()

        def child(c):
            os.close(written_r)
            os.close(go_w)
            own = [mappedcache.Cache(self.path) for _ in range(3)]
            for i, h in enumerate([parent] + own):
                h.set(f"child{c}-{i}", c * 10 + i)
            os.write(written_w, b"w")
            os.read(go_r, 1)  # until the parent closes its end
            return 0 if all(h.get("from") == "parent" for h in own) else 2

        children = [fork(child, c) for c in range(3)]
        os.close(written_w)
        os.close(go_r)
        written = b""
        while len(written) < 3:
            chunk = os.read(written_r, 3)
            if not chunk:
                break  # a child died before writing
            written += chunk
        os.close(go_w)
        os.close(written_r)
        codes = wait_statuses(children)
        self.assertEqual(written, b"www")
        self.assertEqual(codes, [0, 0, 0])
        self.assertEqual(sorted(k for k in parent.keys() if k.startswith("child")),
                         sorted(f"child{c}-{i}" for c in range(3) for i in range(4)))
        self.assertEqual(parent.verify(), 0)

    def test_a_full_table_names_the_option_that_sizes_it(self):
        holder = mappedcache.Cache(self.path, capacity=8 << 20, max_processes=1)
        holder.set("held", 1)
        helper = (
            "import mappedcache, sys\n"
            "try:\n"
            "    mappedcache.Cache(sys.argv[1])\n"
            "except mappedcache.CacheError as e:\n"
            "    print(e)\n"
        )
        # This process holds the one slot; another process is refused, clearly.
        out = subprocess.run([sys.executable, "-c", helper, self.path], capture_output=True, text=True,
                             timeout=60)
        self.assertIn("all 1 process slots", out.stdout, out.stderr)
        self.assertIn("max_processes", out.stdout)


class FullFileSystemTests(unittest.TestCase):
    """On a tmpfs of 32 MiB (mounted here, as root; skipped otherwise), creating a cache of
    the default 64 MiB fails with a clear error and leaves no file."""

    def setUp(self):
        if os.geteuid() != 0 or not shutil.which("mount"):
            unavailable("mounting a small tmpfs needs root and mount(8)")
        self.dir = tempfile.mkdtemp(prefix="mcpytest-small-")
        self.addCleanup(os.rmdir, self.dir)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", self.dir],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            unavailable(f"mount -t tmpfs failed: {mounted.stderr.strip()}")
        self.addCleanup(subprocess.run, ["umount", self.dir], check=True)

    def test_creation_without_room_raises_and_leaves_no_file(self):
        path = os.path.join(self.dir, "cache")
        with self.assertRaises(mappedcache.CacheError) as caught:
            mappedcache.Cache(path)
        message = str(caught.exception)
        self.assertIn("no space to reserve 67108864 bytes", message)
        self.assertIn("holds 32 MiB", message)
        self.assertEqual(os.listdir(self.dir), [])
        # A capacity that fits is created there, and works.
        c = mappedcache.Cache(path, capacity=16 << 20)
        c.set("k", "v")
        self.assertEqual(c.get("k"), "v")
        c.close()
        os.unlink(path)


if __name__ == "__main__":
    unittest.main()
