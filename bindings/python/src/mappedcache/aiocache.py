"""An aiocache backend on a shared MappedCache file, for FastAPI and other asyncio apps:
every worker process of the host shares the entries, and no server runs::

    from mappedcache.aiocache import MappedCache
    cache = MappedCache("/dev/shm/app.mcache", capacity=256 << 20, namespace="app:")
    await cache.set("user:1", {"name": "Ada"}, ttl=60)
    await cache.get("user:1")
    report = await cache.get_or_compute("report", build_report, ttl=600)   # once on the host

A call into the file takes a microsecond or two and never waits for another process
(reads take no lock; a write holds the file's lock for the write alone), so every method
runs inline on the event loop: a thread pool would cost more than the call. For the
same reason the default ``timeout`` is ``None``: aiocache otherwise wraps each call in
``asyncio.wait_for``, a task and a timer for a call that cannot hang. The one method
that waits, ``get_or_compute``, waits with ``asyncio.sleep``.

aiocache's conventions hold: ``ttl`` in seconds (``None`` or ``0``: never expires),
``add`` raises ``ValueError`` when the key has a live entry (atomically across
processes), ``increment`` starts a missing key at 0 (``TypeError`` for a value that is
not an integer), ``namespace`` goes before every key, and a key longer than the file's
key limit is hashed (SHA-256) to fit. The default serializer is aiocache's
``NullSerializer``: values go to the file as Python values (bytes, str, int, float as
such, anything else pickled), so other languages read what they can and counters are
the file's own. ``**options`` are ``mappedcache.Cache``'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import os
import time
from typing import Any, Awaitable, Callable, Optional, Union

from aiocache.base import SENTINEL, BaseCache
from aiocache.base import logger as _aiocache_logger
from aiocache.serializers import NullSerializer

from . import Cache, NotAnIntegerError, _mappedcache


class MappedCache(BaseCache):
    """aiocache's ``BaseCache`` over a ``mappedcache.Cache`` (see the module's documentation)."""

    NAME = "mappedcache"

    def __init__(
        self,
        path: str = "/dev/shm/aiocache.mcache",
        capacity: Optional[int] = None,
        serializer: Any = None,
        timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        base = {k: kwargs.pop(k) for k in ("plugins", "namespace", "key_builder", "ttl") if k in kwargs}
        super().__init__(serializer=serializer or NullSerializer(), timeout=timeout, **base)
        kwargs.setdefault("pickle", True)
        self.cache = Cache(path, capacity, value_type="python", **kwargs)

    # get and set, the calls a cache makes most, skip aiocache's layers where they do
    # nothing: with no plugins, no per-call timeout (a call into the file never waits, so
    # no timeout can fire), no debug log and AIOCACHE_DISABLE unset, the call goes
    # straight to the file; otherwise BaseCache's own get and set run, every layer in.
    def _bare(self, kwargs: dict) -> bool:
        return (
            not kwargs
            and not self._plugins
            and os.environ.get("AIOCACHE_DISABLE") != "1"
            and not _aiocache_logger.isEnabledFor(logging.DEBUG)
        )

    async def get(self, key, default=None, loads_fn=None, namespace=None, _conn=None, **kwargs):
        if not self._bare(kwargs):
            return await super().get(key, default, loads_fn, namespace, _conn, **kwargs)
        ns_key = self.build_key(key, namespace=namespace if namespace is not None else self.namespace)
        value = (loads_fn or self._serializer.loads)(self.cache.get(self._key(ns_key)))
        return value if value is not None else default

    async def set(
        self, key, value, ttl=SENTINEL, dumps_fn=None, namespace=None, _cas_token=None, _conn=None, **kwargs
    ):
        if _cas_token is not None or not self._bare(kwargs):
            return await super().set(key, value, ttl, dumps_fn, namespace, _cas_token, _conn, **kwargs)
        ns_key = self.build_key(key, namespace=namespace if namespace is not None else self.namespace)
        self.cache.set(self._key(ns_key), (dumps_fn or self._serializer.dumps)(value), self._ttl(self._get_ttl(ttl)))
        return True

    def _key(self, key: Union[str, bytes]) -> Union[str, bytes]:
        raw = key.encode("utf-8") if isinstance(key, str) else key
        if not isinstance(raw, bytes):
            raise TypeError(f"a key is str or bytes, not {type(key).__name__}")
        if len(raw) > self.cache.max_key_size:
            return "sha256:" + hashlib.sha256(raw).hexdigest()
        return key

    @staticmethod
    def _ttl(ttl: Optional[float]) -> Optional[float]:
        return float(ttl) if ttl else None

    async def _get(self, key, encoding="utf-8", _conn=None):
        return self.cache.get(self._key(key))

    async def _gets(self, key, encoding="utf-8", _conn=None):
        # The value is its own token, as aiocache's memory and Redis backends have it.
        return self.cache.get(self._key(key))

    async def _multi_get(self, keys, encoding="utf-8", _conn=None):
        names = [self._key(key) for key in keys]
        found = self.cache.get_many(names)
        return [found.get(k) for k in names]

    async def _set(self, key, value, ttl=None, _cas_token=None, _conn=None):
        k = self._key(key)
        if _cas_token is None:
            self.cache.set(k, value, self._ttl(ttl))
            return True
        current = self.cache.gets(k)
        if current is None or current[0] != _cas_token:
            return 0
        # Replaces only the version read: a write between the two calls makes it fail.
        return 1 if self.cache.cas(k, value, current[1], self._ttl(ttl)) else 0

    async def _multi_set(self, pairs, ttl=None, _conn=None):
        # One hold of the file's write lock for them all.
        self.cache.set_many([(self._key(k), v) for k, v in pairs], self._ttl(ttl))
        return True

    async def _add(self, key, value, ttl=None, _conn=None):
        if not self.cache.add(self._key(key), value, self._ttl(ttl)):
            raise ValueError(f"Key {key} already exists, use .set to update the value")
        return True

    async def _exists(self, key, _conn=None):
        return self._key(key) in self.cache

    async def _increment(self, key, delta, _conn=None):
        try:
            return self.cache.incr(self._key(key), delta)
        except NotAnIntegerError:
            raise TypeError("Value is not an integer") from None

    async def _expire(self, key, ttl, _conn=None):
        return self.cache.touch(self._key(key), self._ttl(ttl))

    async def _delete(self, key, _conn=None):
        return 1 if self.cache.delete(self._key(key)) else 0

    async def _clear(self, namespace=None, _conn=None):
        if namespace:
            self.cache.delete_many([k for k in self.cache.keys() if k.startswith(namespace)])
        else:
            self.cache.clear()
        return True

    async def _raw(self, command, *args, encoding="utf-8", _conn=None, **kwargs):
        return getattr(self.cache, command)(*args, **kwargs)

    async def _redlock_release(self, key, value):
        k = self._key(key)
        current = self.cache.gets(k)
        if current is None or current[0] != value:
            return 0
        # Only the version read (this holder's lock) goes: replaced by an entry that
        # expires at once, so a lock another holder took meanwhile stays. Expiry has the
        # clock's resolution, so what is still this holder's value is then removed.
        if not self.cache.cas(k, value, current[1], 1e-9):
            return 0
        again = self.cache.gets(k)
        if again is not None and again[0] == value:
            self.cache.delete(k)
        return 1

    async def get_or_compute(
        self,
        key: str,
        compute: Callable[[], Union[Any, Awaitable[Any]]],
        ttl: Optional[float] = None,
        *,
        wait: float = 30.0,
        namespace: Optional[str] = None,
    ) -> Any:
        """The value of ``key``; when it is missing, ``compute()`` (a function or a
        coroutine function) runs in exactly one process or task of the host and its
        result is stored (expiring after ``ttl`` seconds) and returned, while the other
        callers wait for it with ``asyncio.sleep``, never blocking their loop. After
        ``wait`` seconds a waiter computes the value itself. An exception from
        ``compute`` releases the claim and propagates."""
        ns = namespace if namespace is not None else self.namespace
        k = self._key(self.build_key(key, namespace=ns))
        deadline = time.monotonic() + wait
        pause = 0.001
        while True:
            status, stored, claim = self.cache._claim(k)
            if status == _mappedcache.OK:
                return self.serializer.loads(stored)
            if status == _mappedcache.CLAIMED:
                try:
                    value = await _result(compute)
                except BaseException:
                    claim.abandon()
                    raise
                claim.publish(self.serializer.dumps(value), self._ttl(ttl))
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                value = await _result(compute)
                self.cache.set(k, self.serializer.dumps(value), self._ttl(ttl))
                return value
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 0.02)

    def __repr__(self) -> str:
        return f"MappedCache ({self.cache.path})"


async def _result(compute: Callable[[], Any]) -> Any:
    value = compute()
    return await value if inspect.isawaitable(value) else value
