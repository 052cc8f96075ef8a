"""mappedcache.flask.MappedCache in a Flask app (Flask-Caching's CACHE_TYPE and settings):
@cache.cached and @cache.memoize see what another process cached, and the settings
reach the file."""

import json
import os
import subprocess
import sys
import unittest
import uuid

from flask_app import create_app

HERE = os.path.dirname(os.path.abspath(__file__))


class FlaskBackendTests(unittest.TestCase):
    def setUp(self):
        self.path = f"/dev/shm/mc-flask-{os.getpid()}-{uuid.uuid4().hex[:8]}.mcache"
        self.addCleanup(lambda: os.path.exists(self.path) and os.unlink(self.path))

    def other_process(self):
        code = f"import flask_app; flask_app.main({self.path!r})"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, *sys.path])}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_cached_and_memoized_values_of_another_process(self):
        first = self.other_process()
        self.assertNotEqual(first["pid"], os.getpid())
        self.assertEqual(first["view"], f"view made by {first['pid']}")
        self.assertEqual(first["square"], f"144 made by {first['pid']}")
        app, cache = create_app(self.path)
        with app.app_context():
            self.assertEqual(app.test_client().get("/made-by").get_data(as_text=True), first["view"])
            self.assertEqual(app.square(12), first["square"])
            self.assertEqual(app.square(3), f"9 made by {os.getpid()}")  # not cached yet: computed here
            cache.delete_memoized(app.square, 12)
        second = self.other_process()
        self.assertEqual(second["view"], first["view"])  # still cached
        self.assertEqual(second["square"], f"144 made by {second['pid']}")  # computed again there

    def test_settings_reach_the_file(self):
        app, cache = create_app(self.path)
        with app.app_context():
            backend = cache.cache
            self.assertEqual(type(backend).__module__, "mappedcache.flask")
            self.assertEqual(backend.cache.path, self.path)
            self.assertEqual(backend.cache.capacity, 8 << 20)
            self.assertEqual(backend.default_timeout, 60)
            cache.set("k", {"a": 1})
            self.assertIn("flask-test:k", backend.cache.keys())
            self.assertTrue(59 < backend.cache.ttl("flask-test:k") <= 60)
            self.assertEqual(cache.get("k"), {"a": 1})
            self.assertTrue(cache.add("n", 0))
            self.assertFalse(cache.add("n", 5))
            self.assertEqual(backend.inc("n"), 1)  # flask_caching.Cache has no inc: its backend has
            self.assertEqual(backend.dec("fresh"), -1)

    def test_a_missing_path_is_a_clear_error(self):
        import flask
        import flask_caching

        app = flask.Flask(__name__)
        app.config.update(CACHE_TYPE="mappedcache.flask.MappedCache")
        with self.assertRaisesRegex(ValueError, "CACHE_MAPPEDCACHE_PATH"):
            flask_caching.Cache(app)


if __name__ == "__main__":
    unittest.main()
