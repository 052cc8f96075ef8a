"""A Flask app on mappedcache.flask.MappedCache, for test_flask_backend.py: a view cached
with @cache.cached and a function cached with @cache.memoize, each answering with the
process that computed it. main() prints what a request and a call see (run in another
process by importing this module, so that memoize's keys name the same module)."""

import json
import os

import flask
import flask_caching


def create_app(path: str) -> "tuple[flask.Flask, flask_caching.Cache]":
    app = flask.Flask(__name__)
    app.config.update(
        CACHE_TYPE="mappedcache.flask.MappedCache",
        CACHE_MAPPEDCACHE_PATH=path,
        CACHE_DEFAULT_TIMEOUT=60,
        CACHE_KEY_PREFIX="flask-test:",
        CACHE_OPTIONS={"capacity": 8 << 20},
    )
    cache = flask_caching.Cache(app)

    @app.route("/made-by")
    @cache.cached()
    def made_by():
        return f"view made by {os.getpid()}"

    @cache.memoize()
    def square(n: int) -> str:
        return f"{n * n} made by {os.getpid()}"

    app.square = square
    return app, cache


def main(path: str) -> None:
    """Prints what a request and a call see (the test runs it in another process)."""
    app, cache = create_app(path)
    with app.app_context():
        view = app.test_client().get("/made-by").get_data(as_text=True)
        print(json.dumps({"pid": os.getpid(), "view": view, "square": app.square(12)}))
