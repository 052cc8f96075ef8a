"""MappedCache for Python: one cache shared by every process of a host, through one
memory-mapped file.

Reads take no lock and make no system call (about a microsecond from Python); writes
are serialised by a lock in the file that survives any writer being killed. The file
is the same one Swift's ``SharedCache`` opens, so Python and Swift processes (and any
other language through libmappedcache's C ABI) share entries, counters and
get-or-compute claims::

    import mappedcache
    cache = mappedcache.Cache("/dev/shm/app.mcache", capacity=64 << 20)
    cache.set("greeting", "hello", ttl=60)
    cache["user:1"] = b"\\x01\\x02"
    cache.get("greeting")                      # 'hello'
    cache.incr("hits")                         # 1, 2, 3 ... across every process
    report = cache.get_or_compute("report", build_report, ttl=600)   # computed once on the host

A handle opened before ``os.fork()`` (gunicorn ``--preload``, multiprocessing) works in
every child: the child opens the file again for itself on first use.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar, Union

from . import _mappedcache
from ._mappedcache import (
    CacheError,
    CacheOSError,
    CacheTimeoutError,
    ClosedError,
    ComputeFailedError,
    CorruptedError,
    DecodingError,
    ForkedClaimError,
    InvalidKeyError,
    InvalidValueError,
    NotACacheError,
    NotAnIntegerError,
    ReadOnlyError,
    TypeMismatchError,
    UnsafeFileError,
)

__all__ = [
    "Cache",
    "cached",
    "default_cache",
    "versions",
    "CacheError",
    "CacheOSError",
    "CacheTimeoutError",
    "ClosedError",
    "ComputeFailedError",
    "CorruptedError",
    "DecodingError",
    "ForkedClaimError",
    "InvalidKeyError",
    "InvalidValueError",
    "NotACacheError",
    "NotAnIntegerError",
    "ReadOnlyError",
    "TypeMismatchError",
    "UnsafeFileError",
]

__version__ = "0.8.0"

Key = Union[str, bytes]
T = TypeVar("T")

# A child of fork() closes what it inherited from the parent at once (every handle
# reopens the file on its next use in the child), so that the parent's exit is seen
# at once by every other process: see Cache's "Processes and fork" notes.
os.register_at_fork(after_in_child=_mappedcache._after_fork_child)


def versions() -> dict:
    """The versions of the loaded library: ``{"abi": 1, "library": "0.8.0", "file_format": 5}``."""
    return _mappedcache.versions()


class Cache(_mappedcache.CacheBase):
    """A cache shared by every process that opens the same file.

    ``Cache(path, capacity=64 << 20)`` opens the cache at ``path``, creating it with
    ``capacity`` bytes when it does not exist (an existing file keeps its own capacity
    and limits). Use a path under ``/dev/shm`` (memory); one handle per process,
    shared by its threads. ``partitions`` sets how many parts a new file has, each
    with its own write lock, index and logs (default: chosen from the capacity and the
    machine's cores); more let more writers run at once, and ``partition_count`` says
    what a file has.

    Values, by the file's value type (``value_type``; by default the file's own, "bytes"
    for an untyped file such as ``mapped-cache create`` makes, and ``create_value_type``
    for a new file, "python" unless told otherwise):

    * ``"python"``: ``bytes``, ``str``, ``int`` and ``float`` stored as such, and with
      ``pickle=True`` any picklable value (read back only by handles opened with
      ``pickle=True``: unpickling runs code, so it is an opt-in).
    * ``"bytes"``: bytes-like values, read as ``bytes`` (Swift's ``SharedCache<[UInt8]>``
      and ``SharedCache<Data>``).
    * ``"string"`` (or ``"str"``): ``str`` values (Swift's ``SharedCache<String>``).
    * ``"int64"``: ``int`` values (Swift's ``SharedCache<Int>`` counters).

    Keys are ``str`` or ``bytes`` (UTF-8), 1 to ``max_key_size`` bytes (250 by default).
    ``ttl`` is seconds from now (``None``: never expires).

    Errors are ``CacheError`` subclasses that also derive from the built-in they
    resemble (``InvalidKeyError`` and ``InvalidValueError`` are ``ValueError``,
    ``TypeMismatchError`` is a ``TypeError``, ``ReadOnlyError`` a ``PermissionError``,
    ``CacheOSError`` an ``OSError`` with its ``errno``). Wrong argument types raise
    ``TypeError``. Nothing a caller passes can crash the process.

    Processes and fork: a handle opened before ``os.fork()`` (gunicorn ``--preload``,
    multiprocessing's fork start method) works in the child, which opens the file again
    for itself on its first call there: a child never writes with its parent's lock
    token. A claim taken before the fork (``get_or_compute`` running in another thread)
    stays the parent's.
    """

    def __init__(
        self,
        path: Union[str, os.PathLike],
        capacity: Optional[int] = None,
        *,
        value_type: Optional[str] = None,
        create_value_type: str = "python",
        pickle: bool = False,
        read_only: bool = False,
        create: bool = True,
        max_key_size: Optional[int] = None,
        max_value_size: Optional[int] = None,
        average_entry_size: Optional[int] = None,
        max_processes: Optional[int] = None,
        mode: Optional[int] = None,
        shared_group: Optional[str] = None,
        verify_checksums: bool = False,
        use_flock: bool = False,
        partitions: Optional[int] = None,
    ) -> None:
        numbers = {
            "capacity": capacity,
            "max_key_size": max_key_size,
            "max_value_size": max_value_size,
            "average_entry_size": average_entry_size,
            "max_processes": max_processes,
            "mode": mode,
            "partitions": partitions,
        }
        for name, n in numbers.items():
            if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n <= 0):
                raise ValueError(f"{name} must be a positive int, not {n!r}")
        if (max_key_size or 0) >= 1 << 32 or (max_value_size or 0) >= 1 << 32:
            raise ValueError("max_key_size and max_value_size must be below 4 GiB")
        super().__init__(
            path,
            capacity or 0,
            value_type=value_type,
            create_value_type=create_value_type,
            pickle=pickle,
            read_only=read_only,
            create=create,
            max_key_size=max_key_size or 0,
            max_value_size=max_value_size or 0,
            average_entry_size=average_entry_size or 0,
            max_processes=max_processes or 0,
            mode=mode or 0,
            shared_group=shared_group,
            verify_checksums=verify_checksums,
            use_flock=use_flock,
            partitions=partitions or 0,
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.value_type
        return f"<mappedcache.Cache {self.path!r} ({state})>"

    def __reduce__(self):
        raise TypeError("a mappedcache.Cache cannot be pickled: open the path again in the other process")

    def get_or_compute(
        self,
        key: Key,
        compute: Callable[[], T],
        ttl: Optional[float] = None,
        *,
        wait: float = 30.0,
        serve_stale: bool = False,
    ) -> T:
        """The value of ``key``; when it is missing, ``compute()`` runs in exactly one
        process (or thread) of the host, Python or Swift alike, and its result is stored
        (expiring after ``ttl`` seconds) and returned; the other callers wait for it.

        Waiting polls with backoff (1 ms to 20 ms) in ``time.sleep``, releasing the GIL.
        After ``wait`` seconds a waiter computes the value itself as well. A computer
        that dies, even by SIGKILL, releases its claim at once. An exception from
        ``compute`` releases the claim (a waiter computes next) and propagates; it is
        not cached. With ``serve_stale``, an expired value still present is returned at
        once while another process recomputes it.
        """
        if not wait >= 0:
            raise ValueError(f"wait must be 0 or more seconds, not {wait!r}")
        deadline = time.monotonic() + wait
        pause = 0.001
        while True:
            status, value, claim = self._claim(key, serve_stale)
            if status == _mappedcache.OK or status == _mappedcache.STALE:
                return value
            if status == _mappedcache.CLAIMED:
                try:
                    value = compute()
                except BaseException:
                    claim.abandon()
                    raise
                claim.publish(value, ttl)
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                value = compute()
                self.set(key, value, ttl)
                return value
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.02)

    def pop(self, key: Key, *default: Any) -> Any:
        """Removes ``key`` and returns its value (``default``, or KeyError, when missing).
        Not atomic: a write between the read and the removal may be lost."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            if default:
                return default[0]
            raise KeyError(key)
        self.delete(key)
        return value

    def setdefault(self, key: Key, default: Any, ttl: Optional[float] = None) -> Any:
        """The value of ``key``; when missing, stores ``default`` (atomically: of
        several processes, one stores) and returns what is then stored."""
        while True:
            value = self.get(key, _MISSING)
            if value is not _MISSING:
                return value
            if self.add(key, default, ttl):
                return default


_MISSING = object()

_default_lock = threading.Lock()
_default: Optional[Cache] = None


def default_cache() -> Cache:
    """The process's default cache, opened on first use: ``$MAPPEDCACHE_PATH``, or
    ``/dev/shm/mappedcache-python-<uid>.mcache`` (64 MiB, values pickled as needed).
    Used by ``@cached`` when it is given no cache."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            path = os.environ.get("MAPPEDCACHE_PATH") or f"/dev/shm/mappedcache-python-{os.getuid()}.mcache"
            _default = Cache(path, pickle=True)
        return _default


def cached(
    ttl: Optional[float] = None,
    *,
    cache: Union[Cache, str, None] = None,
    key: Optional[Callable[..., str]] = None,
    prefix: Optional[str] = None,
    wait: float = 30.0,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Caches a function's results in a shared cache: for the same arguments, the
    function runs once on the host (``get_or_compute``), and every process reads its
    result until ``ttl`` seconds pass::

        @mappedcache.cached(ttl=60)
        def exchange_rate(currency: str) -> float: ...

    ``cache`` is a ``Cache`` (opened with ``pickle=True`` for results that are not
    bytes, str, int or float), a path, or None for ``default_cache()``. The key is
    ``prefix`` (the function's module and qualified name) plus the ``repr`` of the
    arguments, hashed when it is too long, so arguments need a ``repr`` that is the
    same in every process (numbers, strings, tuples of them); ``key`` replaces the
    arguments' part. The wrapper has ``invalidate(*args, **kwargs)`` and
    ``cache_key(*args, **kwargs)``.
    """

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        name = prefix or f"{fn.__module__}.{fn.__qualname__}"
        opened: list = []

        def the_cache() -> Cache:
            if not opened:
                opened.append(
                    default_cache()
                    if cache is None
                    else Cache(cache, pickle=True)
                    if isinstance(cache, (str, os.PathLike))
                    else cache
                )
            return opened[0]

        def cache_key(*args: Any, **kwargs: Any) -> str:
            part = key(*args, **kwargs) if key is not None else repr((args, sorted(kwargs.items())))
            text = f"{name}:{part}"
            if len(text.encode()) > the_cache().max_key_size:
                text = f"{name[:120]}:sha256:{hashlib.sha256(text.encode()).hexdigest()}"
            return text

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            return the_cache().get_or_compute(cache_key(*args, **kwargs), lambda: fn(*args, **kwargs), ttl, wait=wait)

        def invalidate(*args: Any, **kwargs: Any) -> bool:
            return the_cache().delete(cache_key(*args, **kwargs))

        wrapper.invalidate = invalidate  # type: ignore[attr-defined]
        wrapper.cache_key = cache_key  # type: ignore[attr-defined]
        return wrapper

    return decorate
