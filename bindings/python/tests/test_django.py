"""mappedcache.django.MappedCache against Django's BaseCache contract, as Django's own
cache tests exercise a backend: timeouts as Django defines them (None forever, 0 or less
expired at once, the default TIMEOUT), versions and key prefixes, incr/decr, the
many-key methods, and sharing between worker processes."""

import time
import unittest

from support import fork, remove, temp_path, unavailable, wait_statuses

try:
    import django
except ImportError:  # pragma: no cover - .ci/run installs Django
    django = None

PATH = temp_path("django")
OTHER = temp_path("django-prefixed")


def setUpModule():
    if django is None:
        unavailable("Django is not installed (pip install django)")
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            CACHES={
                "default": {"BACKEND": "mappedcache.django.MappedCache", "LOCATION": PATH, "TIMEOUT": 300,
                            "OPTIONS": {"capacity": 8 << 20}},
                "prefixed": {"BACKEND": "mappedcache.django.MappedCache", "LOCATION": PATH, "KEY_PREFIX": "p",
                             "VERSION": 2, "TIMEOUT": None},
                "short": {"BACKEND": "mappedcache.django.MappedCache", "LOCATION": OTHER, "TIMEOUT": 0.2},
            }
        )
        django.setup()


def tearDownModule():
    remove(PATH)
    remove(OTHER)


class BackendTests(unittest.TestCase):
    def setUp(self):
        from django.core.cache import caches

        self.cache = caches["default"]
        self.cache.clear()

    def test_simple_values_and_types(self):
        c = self.cache
        values = {"str": "héllo", "bytes": b"\x00\x01", "int": 42, "float": 1.5, "none": None, "bool": True,
                  "list": [1, "two", {"three": 3}], "dict": {"a": (1, 2)}}
        for k, v in values.items():
            c.set(k, v)
        for k, v in values.items():
            self.assertEqual(c.get(k, "default"), v)
        self.assertIsNone(c.get("missing"))
        self.assertEqual(c.get("missing", "d"), "d")
        self.assertTrue(c.has_key("str"))
        self.assertIn("str", c)
        self.assertFalse(c.has_key("missing"))

    def test_add_delete_touch(self):
        c = self.cache
        self.assertTrue(c.add("k", 1))
        self.assertFalse(c.add("k", 2))
        self.assertEqual(c.get("k"), 1)
        self.assertTrue(c.delete("k"))
        self.assertFalse(c.delete("k"))
        c.set("t", 1, timeout=0.2)
        self.assertTrue(c.touch("t", 10))
        time.sleep(0.3)
        self.assertEqual(c.get("t"), 1)
        self.assertTrue(c.touch("t", None))
        self.assertEqual(c.cache.ttl(c.make_key("t")), float("inf"))
        self.assertFalse(c.touch("missing"))

    def test_timeouts_as_django_defines_them(self):
        c = self.cache
        c.set("forever", 1, timeout=None)
        self.assertEqual(c.cache.ttl(c.make_key("forever")), float("inf"))
        c.set("default", 1)
        self.assertTrue(299 < c.cache.ttl(c.make_key("default")) <= 300)
        c.set("zero", 1, timeout=0)
        self.assertIsNone(c.get("zero"))
        c.set("negative", 1, timeout=-1)
        self.assertIsNone(c.get("negative"))
        c.set("gone", 1)
        c.set("gone", 2, timeout=0)  # expires the existing entry too
        self.assertIsNone(c.get("gone"))
        self.assertTrue(c.add("expired-add", 1, timeout=0))
        self.assertIsNone(c.get("expired-add"))
        c.set("brief", 1, timeout=0.1)
        time.sleep(0.2)
        self.assertIsNone(c.get("brief"))
        from django.core.cache import caches

        short = caches["short"]
        short.set("k", 1)
        time.sleep(0.3)
        self.assertIsNone(short.get("k"))

    def test_incr_decr(self):
        c = self.cache
        c.set("n", 1)
        self.assertEqual(c.incr("n"), 2)
        self.assertEqual(c.incr("n", 10), 12)
        self.assertEqual(c.decr("n"), 11)
        self.assertEqual(c.decr("n", 20), -9)
        with self.assertRaises(ValueError):
            c.incr("missing")
        for value in ("abc", None, [1]):
            c.set("other", value)
            with self.assertRaises(TypeError):  # as Django's own backends raise
                c.incr("other")
            self.assertEqual(c.get("other"), value)
        c.set("timed", 1, timeout=50)
        c.incr("timed")
        self.assertTrue(49 < c.cache.ttl(c.make_key("timed")) <= 50)

    def test_many(self):
        c = self.cache
        self.assertEqual(c.set_many({"a": 1, "b": 2, "c": "three"}), [])
        self.assertEqual(c.get_many(["a", "b", "c", "d"]), {"a": 1, "b": 2, "c": "three"})
        c.delete_many(["a", "b"])
        self.assertEqual(c.get_many(["a", "b", "c"]), {"c": "three"})
        c.set_many({"x": 1}, timeout=0)
        self.assertIsNone(c.get("x"))
        c.clear()
        self.assertEqual(c.get_many(["c"]), {})

    def test_versions_and_prefixes(self):
        from django.core.cache import caches

        c = self.cache
        c.set("v", "one", version=1)
        c.set("v", "two", version=2)
        self.assertEqual(c.get("v", version=1), "one")
        self.assertEqual(c.get("v", version=2), "two")
        self.assertEqual(c.get("v"), "one")  # VERSION defaults to 1
        self.assertEqual(c.incr_version("v"), 2)  # moves version 1 to 2
        self.assertEqual(c.get("v", version=2), "one")
        self.assertIsNone(c.get("v", version=1))
        prefixed = caches["prefixed"]  # the same file, another prefix and version
        prefixed.set("v", "prefixed")
        self.assertEqual(prefixed.get("v"), "prefixed")
        self.assertEqual(c.get("v", version=2), "one")
        self.assertEqual(prefixed.cache.ttl(prefixed.make_key("v")), float("inf"))  # TIMEOUT None
        self.assertIn("p:2:v", prefixed.cache.keys())

    def test_get_or_set_and_long_and_unicode_keys(self):
        c = self.cache
        self.assertEqual(c.get_or_set("gos", lambda: "computed"), "computed")
        self.assertEqual(c.get_or_set("gos", lambda: "again"), "computed")
        long_key = "k" * 400
        with self.assertWarns(Warning):  # Django's memcached-portability warning; stored hashed here
            c.set(long_key, "long")
        with self.assertWarns(Warning):
            self.assertEqual(c.get(long_key), "long")
            self.assertEqual(c.get_many([long_key]), {long_key: "long"})
        c.set("ключ-🔑", "unicode")
        self.assertEqual(c.get("ключ-🔑"), "unicode")

    def test_worker_processes_share_the_cache(self):
        c = self.cache
        c.set("shared", "from parent")

        def worker():
            code = 0 if c.get("shared") == "from parent" else 1
            for _ in range(100):
                if not c.has_key("hits"):
                    c.add("hits", 0)  # one process adds; the others find it
                c.incr("hits")
            return code

        pids = [fork(worker) for _ in range(3)]
        self.assertEqual(wait_statuses(pids), [0, 0, 0])
        self.assertEqual(c.get("hits"), 300)

    def test_unknown_options_are_refused(self):
        from mappedcache.django import MappedCache

        with self.assertRaises(ValueError):
            MappedCache(PATH, {"OPTIONS": {"capacty": 1}})
        for bad in ({"MAX_ENTRIES": "many"}, {"MAX_ENTRIES": -1}, {"CULL_FREQUENCY": 1.5}):
            with self.assertRaises(ValueError):
                MappedCache(PATH, {"OPTIONS": bad})

    def test_max_entries_is_the_files_count_limit(self):
        from mappedcache.django import MappedCache

        path = temp_path("django-max-entries")
        self.addCleanup(remove, path)
        c = MappedCache(path, {"OPTIONS": {"MAX_ENTRIES": 10, "CULL_FREQUENCY": 3, "capacity": 4 << 20}})
        for i in range(25):
            c.set(f"k{i}", i)
        self.assertEqual(sum(c.has_key(f"k{i}") for i in range(25)), 10)
        self.assertTrue(c.has_key("k24"))  # the newest stays
        self.assertEqual(len(c.cache), 10)


if __name__ == "__main__":
    unittest.main()
