"""One file, every tool: what the CLI (mapped-cache), Swift (a typed SharedCache, through
mc-test-helper) and Python write reads back in the others as it was given, for bytes,
strings, counters and expiry, in files of every value type the tools make: untyped
(`mapped-cache create`'s default), bytes, string, int64 and python.

Each test is one row of the matrix: a writer, a file type and a kind of value, read by
every tool that opens that file type. Swift opens untyped, bytes, string and int64 files
(SharedCache<[UInt8]>, <String>, <Int>); a python file is Python's own format, which
Swift reads through the C ABI only (as Python does), so Swift has no cell there."""

import json
import os
import subprocess
import time

import mappedcache
from support import CacheTest, remove, swift_binary


def run(binary: str, *args: str, stdin: bytes = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([binary, *args], input=stdin, capture_output=True, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError(f"{os.path.basename(binary)} {' '.join(args)} exited {r.returncode}: {r.stderr!r}")
    return r


class MatrixTest(CacheTest):
    def setUp(self):
        super().setUp()
        self.cli_path = swift_binary("mapped-cache")
        self.helper_path = swift_binary("mc-test-helper")

    # The tools

    def create(self, value_type: str) -> None:
        """The file, made as each tool makes one of that type (in place of the last one)."""
        remove(self.path)
        if value_type == "python":
            mappedcache.Cache(self.path, 4 << 20).close()
        else:
            extra = [] if value_type == "untyped" else ["--type", value_type]
            self.cli("create", self.path, "--capacity", "4MiB", *extra)

    def cli(self, *args: str, stdin: bytes = None) -> bytes:
        return run(self.cli_path, *args, stdin=stdin).stdout

    def cli_get(self, key: str):
        """What `mapped-cache get` prints, or None when it says the key is missing (exit 1)."""
        r = run(self.cli_path, "get", self.path, key, check=False)
        if r.returncode == 1:
            return None
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def cli_ttl(self, key: str):
        rows = [r for r in json.loads(self.cli("dump", self.path, "--json", "--prefix", key)) if r.get("key") == key]
        return rows[0]["ttl_seconds"] if rows else "MISSING"

    def swift(self, kind: str, op: str, *args: str) -> str:
        return run(self.helper_path, "matrix", self.path, kind, op, *args).stdout.decode().strip()

    def python(self) -> mappedcache.Cache:
        c = mappedcache.Cache(self.path)
        self.addCleanup(c.close)
        return c

    # Bytes

    def test_bytes_in_untyped_and_bytes_files(self):
        for value_type in ("untyped", "bytes"):
            with self.subTest(file=value_type):
                self.create(value_type)
                self.cli("set", self.path, "from-cli", "hello")
                self.cli("set", self.path, "from-cli-binary", "-", stdin=b"\x00\xff\x80")
                self.python().set("from-python", b"\x00py\xff")
                self.swift("bytes", "set", "from-swift", "00ff7377")
                expected = {"from-cli": b"hello", "from-cli-binary": b"\x00\xff\x80",
                            "from-python": b"\x00py\xff", "from-swift": b"\x00\xffsw"}
                py = self.python()
                self.assertEqual(py.value_type, "bytes")
                for key, value in expected.items():
                    self.assertEqual(py.get(key), value, key)
                    self.assertEqual(self.cli_get(key), value, key)
                    self.assertEqual(self.swift("bytes", "get", key), value.hex(), key)

    def test_an_untyped_file_opens_as_bytes_however_it_is_opened(self):
        self.create("untyped")
        self.cli("set", self.path, "k", "hello")
        for options in ({}, {"create": False}, {"read_only": True}, {"pickle": True}):
            with self.subTest(**options):
                c = mappedcache.Cache(self.path, **options)
                self.assertEqual((c.value_type, c.get("k")), ("bytes", b"hello"))
                c.close()
        # Asked for another type, the untyped file is that type (nothing is misread: the
        # tag check refuses the CLI's untagged value).
        c = mappedcache.Cache(self.path, value_type="python")
        with self.assertRaises(mappedcache.DecodingError):
            c.get("k")
        c.close()
        self.assertEqual(self.cli_get("k"), b"hello")  # nothing lost

    # Strings

    def test_strings_in_string_files(self):
        self.create("string")
        self.cli("set", self.path, "from-cli", "héllo")
        self.python().set("from-python", "wörld 🎉")
        self.swift("string", "set", "from-swift", "swïft")
        expected = {"from-cli": "héllo", "from-python": "wörld 🎉", "from-swift": "swïft"}
        py = self.python()
        self.assertEqual(py.value_type, "string")
        for key, value in expected.items():
            self.assertEqual(py.get(key), value, key)
            self.assertEqual(self.cli_get(key), value.encode(), key)
            self.assertEqual(json.loads(self.swift("string", "get", key)), value, key)
        r = run(self.cli_path, "set", self.path, "not-text", "-", stdin=b"\xff", check=False)
        self.assertEqual(r.returncode, 3)  # refused, and nothing stored
        self.assertIn(b"UTF-8", r.stderr)
        self.assertIsNone(py.get("not-text"))

    def test_python_values_in_a_python_file_read_in_the_cli_as_given(self):
        self.create("python")
        py = self.python()
        py.set("str", "v")
        py.set("bytes", b"\x00\xff")
        py.set("int", -42)
        py.set("float", 1.5)
        self.assertEqual(self.cli_get("str"), b"v")  # no type tag
        self.assertEqual(self.cli_get("bytes"), b"\x00\xff")
        self.assertEqual(self.cli_get("int"), b"-42")
        self.assertEqual(self.cli_get("float"), b"1.5")
        listed = {r["key"]: r.get("value") for r in json.loads(self.cli("dump", self.path, "--json", "--values"))}
        self.assertEqual(listed, {"str": "v", "bytes": None, "int": "-42", "float": "1.5"})  # bytes: value_base64
        self.cli("set", self.path, "from-cli", "héllo")
        self.cli("set", self.path, "from-cli-binary", "-", stdin=b"\xff\x00")
        self.assertEqual(py.get("from-cli"), "héllo")  # text reads back as str
        self.assertEqual(py.get("from-cli-binary"), b"\xff\x00")
        pickled = mappedcache.Cache(self.path, pickle=True)
        pickled.set("object", {"a": 1})
        r = run(self.cli_path, "get", self.path, "object", check=False)
        self.assertEqual(r.returncode, 3)
        self.assertIn(b"pickle", r.stderr)

    # Counters

    def test_counters_in_int64_files(self):
        self.create("int64")
        self.cli("set", self.path, "n", "40")
        py = self.python()
        self.assertEqual(py.value_type, "int64")
        self.assertEqual(py.incr("n"), 41)
        self.assertEqual(self.swift("int", "incr", "n", "1"), "42")
        self.assertEqual(self.cli_get("n"), b"42")
        self.assertEqual(py.get("n"), 42)
        self.assertEqual(self.swift("int", "get", "n"), "42")
        r = run(self.cli_path, "set", self.path, "n", "forty", check=False)
        self.assertEqual(r.returncode, 3)
        self.assertEqual(py.get("n"), 42)

    def test_counters_in_untyped_and_python_files(self):
        # An untyped file's counters are ASCII decimal, as memcached's and Redis's: the
        # CLI's text "10" is one. In a python file the CLI's text is a str (what it was
        # given), so there a counter is Python's int.
        self.create("untyped")
        self.cli("set", self.path, "n", "10")
        py = self.python()
        self.assertEqual(py.incr("n", 5), 15)
        self.assertEqual(py.incr("fresh"), 1)
        self.assertEqual(self.cli_get("n"), b"15")
        self.assertEqual(self.cli_get("fresh"), b"1")
        self.assertEqual(py.get("n"), b"15")
        self.create("python")
        py = self.python()
        py.set("n", 10)
        self.assertEqual(py.incr("n", 5), 15)
        self.assertEqual(py.decr("fresh"), -1)
        self.assertEqual(self.cli_get("n"), b"15")
        self.assertEqual(self.cli_get("fresh"), b"-1")
        self.cli("set", self.path, "text", "10")
        self.assertEqual(py.get("text"), "10")
        with self.assertRaises(mappedcache.NotAnIntegerError):
            py.incr("text")

    # Expiry

    def test_expiry_across_the_tools(self):
        for value_type in ("untyped", "string"):
            with self.subTest(file=value_type):
                self.create(value_type)
                kind = "bytes" if value_type == "untyped" else "string"
                value = "74657874" if kind == "bytes" else "text"
                self.cli("set", self.path, "cli", "text", "--ttl", "1")
                if kind == "bytes":
                    self.python().set("python", b"text", ttl=1)
                else:
                    self.python().set("python", "text", ttl=1)
                self.swift(kind, "set", "swift", value, "1")
                self.cli("set", self.path, "forever", "text")
                py = self.python()
                for key in ("cli", "python", "swift"):
                    self.assertTrue(0 < py.ttl(key) <= 1, key)
                    self.assertTrue(0 < float(self.swift(kind, "ttl", key)) <= 1, key)
                    self.assertTrue(0 < self.cli_ttl(key) <= 1, key)
                self.assertEqual(py.ttl("forever"), float("inf"))
                self.assertEqual(self.swift(kind, "ttl", "forever"), "never")
                self.assertIsNone(self.cli_ttl("forever"))
                time.sleep(1.2)
                for key in ("cli", "python", "swift"):
                    self.assertIsNone(py.get(key), key)
                    self.assertIsNone(self.cli_get(key), key)
                    self.assertEqual(self.swift(kind, "get", key), "MISSING", key)
                self.assertIsNotNone(self.cli_get("forever"))
