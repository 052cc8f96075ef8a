"""A Django cache backend on a shared MappedCache file: every worker process of the
host (gunicorn, uWSGI, Celery) shares the entries, reads cost about a microsecond and
no server runs::

    CACHES = {
        "default": {
            "BACKEND": "mappedcache.django.MappedCache",
            "LOCATION": "/dev/shm/django.mcache",
            "TIMEOUT": 300,                        # seconds; None: forever
            "OPTIONS": {"capacity": 256 << 20,     # and max_value_size, average_entry_size, ...
                        "MAX_ENTRIES": 100_000},   # the file's entry count limit
        }
    }

Timeouts are Django's: ``None`` keeps an entry until it is evicted for room, ``0`` or
less expires it at once, the default is the cache's ``TIMEOUT``. Keys go through
Django's key function, prefix and version; a key longer than the file's key limit is
hashed (SHA-256) to fit. Values are stored as the Python package stores them (bytes,
str, int, float as such, anything else pickled), so ``incr``/``decr`` change integers in
place, atomically across processes; they raise ``ValueError`` for a missing key and
``TypeError`` for a value that is not an integer, as Django's own backends do.

``MAX_ENTRIES`` is the file's entry count limit: set in the file when the backend opens
it, honoured by every process, and enforced by evicting what the file's policy evicts
first (expired entries, then those read least). ``CULL_FREQUENCY`` is accepted
(an integer, 0 or more) and has nothing to choose: Django's own backends remove a
fraction of their entries when full, and this file never needs to.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Dict, Iterable, List, Optional

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache

from . import Cache, NotAnIntegerError

# Django's own options for every backend (see BaseCache); the rest are Cache's.
_DJANGO_OPTION_NAMES = {"MAX_ENTRIES", "CULL_FREQUENCY"}
_OPTION_NAMES = {
    "capacity",
    "max_key_size",
    "max_value_size",
    "average_entry_size",
    "max_processes",
    "mode",
    "shared_group",
    "verify_checksums",
    "use_flock",
}


class MappedCache(BaseCache):
    """Django's ``BaseCache`` over a ``mappedcache.Cache`` (see the module's documentation)."""

    def __init__(self, location: str, params: Dict[str, Any]) -> None:
        super().__init__(params)
        self._path = location or "/dev/shm/django-mappedcache.mcache"
        options = dict(params.get("OPTIONS") or {})
        unknown = set(options) - _OPTION_NAMES - _DJANGO_OPTION_NAMES
        if unknown:
            raise ValueError(f"unknown OPTIONS for mappedcache.django.MappedCache: {sorted(unknown)}")
        self._count_limit = _count_option(options, "MAX_ENTRIES")
        _count_option(options, "CULL_FREQUENCY")
        self._options = {k: v for k, v in options.items() if k not in _DJANGO_OPTION_NAMES}
        self._lock = threading.Lock()
        self._cache: Optional[Cache] = None

    @property
    def cache(self) -> Cache:
        """The open file (opened on first use; one handle shared by the process's threads)."""
        cache = self._cache
        if cache is None:
            with self._lock:
                if self._cache is None:
                    opened = Cache(self._path, pickle=True, value_type="python", **self._options)
                    if self._count_limit is not None:
                        opened.set_limits(count=self._count_limit)
                    self._cache = opened
                cache = self._cache
        return cache

    # Keys and timeouts

    def _key(self, key: Any, version: Optional[int]) -> str:
        k = self.make_and_validate_key(key, version=version)
        if len(k.encode("utf-8")) > self.cache.max_key_size:
            k = "sha256:" + hashlib.sha256(k.encode("utf-8")).hexdigest()
        return k

    def _ttl(self, timeout: Any) -> Optional[float]:
        """Seconds to live (None: forever), or 0.0 when the entry expires at once."""
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        if timeout is None:
            return None
        return float(timeout) if timeout > 0 else 0.0

    # BaseCache's contract

    def add(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Optional[int] = None) -> bool:
        k = self._key(key, version)
        ttl = self._ttl(timeout)
        if ttl == 0.0:
            # Stored and expired at once: added only where nothing live was there.
            return k not in self.cache
        return self.cache.add(k, value, ttl)

    def get(self, key: Any, default: Any = None, version: Optional[int] = None) -> Any:
        return self.cache.get(self._key(key, version), default)

    def set(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Optional[int] = None) -> None:
        k = self._key(key, version)
        ttl = self._ttl(timeout)
        if ttl == 0.0:
            self.cache.delete(k)
        else:
            self.cache.set(k, value, ttl)

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: Optional[int] = None) -> bool:
        k = self._key(key, version)
        ttl = self._ttl(timeout)
        if ttl == 0.0:
            return self.cache.delete(k)
        return self.cache.touch(k, ttl)

    def delete(self, key: Any, version: Optional[int] = None) -> bool:
        return self.cache.delete(self._key(key, version))

    def has_key(self, key: Any, version: Optional[int] = None) -> bool:
        return self._key(key, version) in self.cache

    def get_many(self, keys: Iterable[Any], version: Optional[int] = None) -> Dict[Any, Any]:
        originals = {self._key(key, version): key for key in keys}
        found = self.cache.get_many(list(originals))
        return {originals[k]: v for k, v in found.items()}

    def set_many(self, data: Dict[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: Optional[int] = None) -> List:
        ttl = self._ttl(timeout)
        pairs = {self._key(key, version): value for key, value in data.items()}
        if ttl == 0.0:
            self.cache.delete_many(list(pairs))
        else:
            self.cache.set_many(pairs, ttl)
        return []

    def delete_many(self, keys: Iterable[Any], version: Optional[int] = None) -> None:
        self.cache.delete_many([self._key(key, version) for key in keys])

    def incr(self, key: Any, delta: int = 1, version: Optional[int] = None) -> int:
        k = self._key(key, version)
        if k not in self.cache:
            raise ValueError(f"Key '{key}' not found")
        # In place under the file's write lock; the entry keeps its expiry.
        try:
            return self.cache.incr(k, delta)
        except NotAnIntegerError:
            raise TypeError(f"the value of key '{key}' is not an integer") from None

    def clear(self) -> None:
        self.cache.clear()

    def close(self, **kwargs: Any) -> None:
        # The handle stays open for the life of the process: opening the file costs a
        # system call or two per request otherwise, and the file is shared anyway.
        pass


def _count_option(options: Dict[str, Any], name: str) -> Optional[int]:
    """An OPTIONS entry that must be an integer, 0 or more (None when not given)."""
    if name not in options:
        return None
    value = options[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"OPTIONS {name} must be an int, 0 or more, not {value!r}")
    return value
