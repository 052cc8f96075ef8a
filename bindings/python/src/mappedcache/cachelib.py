"""A cachelib backend on a shared MappedCache file: every process of the host that opens
the same path shares the entries, and no server runs::

    from mappedcache.cachelib import MappedCache
    cache = MappedCache("/dev/shm/app.mcache", capacity=256 << 20, default_timeout=300)
    cache.set("user:1", {"name": "Ada"})
    cache.inc("hits")                                 # atomic across processes

It follows cachelib's conventions: ``timeout`` is seconds or a ``timedelta`` (``None``:
``default_timeout``, ``0``: never expires, negative: gone at once); ``add`` stores only
where no live entry is, atomically across processes; ``inc``/``dec`` change the number
in place under the file's write lock, a missing key starting at 0; ``has`` is true for
a stored ``None``; ``key_prefix`` (a string or a callable returning one) goes before
every key, and a key longer than the file's key limit is hashed (SHA-256) to fit.

Values: an ``int`` is stored as an integer the file's counters change (and other
languages read); anything else goes through ``serializer`` (pickle by default, as
cachelib's own backends; any cachelib serializer with ``dumps``/``loads``). The file is
opened as one of Python values (``value_type="python"``); ``**options`` are
``mappedcache.Cache``'s (``max_value_size``, ``partitions``, ...).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any, Callable, Dict, List, Optional, Union

from cachelib.base import BaseCache
from cachelib.serializers import BaseSerializer

from . import Cache, NotAnIntegerError

Timeout = Union[int, float, dt.timedelta, None]

# A ttl that means "gone at once": cachelib's negative timeouts.
_GONE = -1.0


class MappedCacheSerializer(BaseSerializer):
    """The default serializer: pickle, as cachelib's SimpleCache and FileSystemCache use."""


class MappedCache(BaseCache):
    """cachelib's ``BaseCache`` over a ``mappedcache.Cache`` (see the module's documentation)."""

    serializer: Any = MappedCacheSerializer()

    def __init__(
        self,
        path: str,
        capacity: Optional[int] = None,
        default_timeout: Union[int, dt.timedelta] = 300,
        key_prefix: Union[str, Callable[[], str], None] = "",
        ignore_delete_many_errors: bool = True,
        **options: Any,
    ) -> None:
        BaseCache.__init__(self, default_timeout)
        # Set here too: cachelib before 0.16 does not take it.
        self.ignore_delete_many_errors = ignore_delete_many_errors
        self.key_prefix = key_prefix or ""
        self.cache = Cache(path, capacity, value_type="python", **options)

    # Keys, timeouts and values

    def _key(self, key: str) -> str:
        prefix = self.key_prefix if isinstance(self.key_prefix, str) else self.key_prefix()
        k = f"{prefix}{key}"
        if len(k.encode("utf-8")) > self.cache.max_key_size:
            k = "sha256:" + hashlib.sha256(k.encode("utf-8")).hexdigest()
        return k

    def _ttl(self, timeout: Timeout) -> Optional[float]:
        """Seconds to live (None: forever), or _GONE for a negative timeout."""
        seconds = self._normalize_timeout(timeout)
        if seconds == 0:
            return None
        return float(seconds) if seconds > 0 else _GONE

    def _dump(self, value: Any) -> Any:
        """What the file stores for ``value``: an int as such, else the serializer's bytes
        (None when the serializer could not serialize it)."""
        if type(value) is int:
            return value
        return self.serializer.dumps(value)

    def _load(self, stored: Any) -> Any:
        # bytes are what _dump stored; an int, str or float was stored as such (by inc,
        # or by other code sharing the file).
        return self.serializer.loads(stored) if isinstance(stored, bytes) else stored

    # cachelib's BaseCache

    def get(self, key: str) -> Any:
        stored = self.cache.get(self._key(key))
        return None if stored is None else self._load(stored)

    def get_many(self, *keys: str) -> List[Any]:
        names = [self._key(key) for key in keys]
        found = self.cache.get_many(names)
        return [self._load(found[k]) if k in found else None for k in names]

    def set(self, key: str, value: Any, timeout: Timeout = None) -> bool:
        return self._write(key, value, timeout, only_new=False)

    def add(self, key: str, value: Any, timeout: Timeout = None) -> bool:
        return self._write(key, value, timeout, only_new=True)

    def _write(self, key: str, value: Any, timeout: Timeout, only_new: bool) -> bool:
        k = self._key(key)
        ttl = self._ttl(timeout)
        stored = self._dump(value)
        if stored is None:
            return False
        if ttl == _GONE:
            # Stored and gone at once: added only where nothing live was there.
            if only_new:
                return k not in self.cache
            self.cache.delete(k)
            return True
        if only_new:
            return self.cache.add(k, stored, ttl)
        self.cache.set(k, stored, ttl)
        return True

    def set_many(self, mapping: Dict[str, Any], timeout: Timeout = None) -> List[Any]:
        ttl = self._ttl(timeout)
        pairs = {}
        for key, value in mapping.items():
            stored = self._dump(value)
            if stored is not None:
                pairs[self._key(key)] = (key, stored)
        if ttl == _GONE:
            self.cache.delete_many(list(pairs))
        else:
            # One hold of the file's write lock for them all.
            self.cache.set_many({k: stored for k, (_, stored) in pairs.items()}, ttl)
        return [key for key, _ in pairs.values()]

    def delete(self, key: str) -> bool:
        return self.cache.delete(self._key(key))

    def delete_many(self, *keys: str) -> List[Any]:
        self.cache.delete_many([self._key(key) for key in keys])
        deleted = [key for key in keys if not self.has(key)]
        if not self.ignore_delete_many_errors and len(deleted) != len(keys):
            raise RuntimeError(f"Failed to delete keys: {[k for k in keys if k not in deleted]}")
        return deleted

    def has(self, key: str) -> bool:
        return self._key(key) in self.cache

    def clear(self) -> bool:
        prefix = self.key_prefix if isinstance(self.key_prefix, str) else self.key_prefix()
        if prefix:
            # Only this prefix's keys, as cachelib's RedisCache does with a prefix.
            self.cache.delete_many([k for k in self.cache.keys() if k.startswith(prefix)])
        else:
            self.cache.clear()
        return True

    def inc(self, key: str, delta: int = 1) -> Optional[int]:
        """Adds ``delta`` atomically across processes; a missing key starts at 0 and never
        expires, an existing one keeps its expiry (as Redis's INCR, which cachelib's
        RedisCache uses). TypeError when the value is not an int."""
        try:
            return self.cache.incr(self._key(key), delta)
        except NotAnIntegerError:
            raise TypeError(f"the value of key {key!r} is not an integer") from None

    def dec(self, key: str, delta: int = 1) -> Optional[int]:
        return self.inc(key, -delta)
