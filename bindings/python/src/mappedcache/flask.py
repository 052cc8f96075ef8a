"""A Flask-Caching backend on a shared MappedCache file: every worker process of the
host shares ``@cache.cached`` views and ``@cache.memoize`` results, and no server runs::

    app.config.update(
        CACHE_TYPE="mappedcache.flask.MappedCache",
        CACHE_MAPPEDCACHE_PATH="/dev/shm/app.mcache",
        CACHE_DEFAULT_TIMEOUT=300,
        CACHE_KEY_PREFIX="app:",                          # optional
        CACHE_OPTIONS={"capacity": 256 << 20},            # mappedcache.Cache's options
    )
    cache = flask_caching.Cache(app)

The backend is ``mappedcache.cachelib.MappedCache`` (its conventions are cachelib's,
which Flask-Caching follows) with Flask-Caching's ``factory``.
"""

from __future__ import annotations

from typing import Any, Dict, List

from flask_caching.backends.base import BaseCache

from . import cachelib


class MappedCache(BaseCache, cachelib.MappedCache):
    """Flask-Caching's ``BaseCache`` over ``mappedcache.cachelib.MappedCache``."""

    def __init__(self, path: str, *args: Any, ignore_delete_many_errors: bool = False, **kwargs: Any) -> None:
        cachelib.MappedCache.__init__(
            self, path, *args, ignore_delete_many_errors=ignore_delete_many_errors, **kwargs
        )

    @classmethod
    def factory(cls, app: Any, config: Dict[str, Any], args: List[Any], kwargs: Dict[str, Any]) -> "MappedCache":
        path = config.get("CACHE_MAPPEDCACHE_PATH")
        if not path:
            raise ValueError("mappedcache.flask.MappedCache needs CACHE_MAPPEDCACHE_PATH (the cache file's path)")
        if config.get("CACHE_KEY_PREFIX"):
            kwargs["key_prefix"] = config["CACHE_KEY_PREFIX"]
        return cls(path, *args, **kwargs)
