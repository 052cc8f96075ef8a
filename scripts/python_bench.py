"""Gets and sets per second from Python: mappedcache against multiprocessing.Manager().dict(),
diskcache, redis-py (unix socket) and pymemcache (unix socket) to local servers, and a
plain dict as the ceiling. 64-byte values, KEYS keys (str, "key-%08d"), random keys in an
order fixed by the seed, 1 and 2 processes (forked, started together), each running for
SECONDS per cell. Every cell is measured REPS times, the backends interleaved within each
pass, and the table gives the best and the median. Run by scripts/python-bench.sh, which
starts the servers and passes their sockets:

  python_bench.py --redis-socket PATH --memcached-socket PATH [--keys N] [--seconds S] [--reps R]
"""

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time

VALUE = b"v" * 64


def make_backends(args, tmp):
    """name -> (setup() -> client factory in the worker, prefill(client, keys))."""
    backends = {}

    def mapped():
        import mappedcache

        path = os.path.join("/dev/shm", f"python-bench-{os.getpid()}.mcache")
        if os.path.exists(path):
            os.unlink(path)
        c = mappedcache.Cache(path, capacity=64 << 20, average_entry_size=100)
        return c, lambda: c, lambda: (c.close(), os.unlink(path))

    backends["mappedcache"] = mapped

    def through_ctypes():
        # The same library called through ctypes instead of the package's C extension:
        # why the package is an extension.
        c, connect, close = mapped()
        client = CtypesClient(c.path)
        return client, lambda: client, lambda: (client.close(), close())

    backends["ctypes over libmappedcache"] = through_ctypes

    def plain():
        d = {}
        return d, lambda: d, lambda: None

    backends["dict (in-process)"] = plain

    def manager():
        m = multiprocessing.Manager()
        d = m.dict()
        return d, lambda: d, m.shutdown

    backends["Manager().dict()"] = manager

    def disk():
        import diskcache

        d = diskcache.Cache(os.path.join(tmp, "diskcache"))
        d.clear()
        return d, lambda: diskcache.Cache(os.path.join(tmp, "diskcache")), d.close

    backends["diskcache"] = disk

    if args.redis_socket:

        def red():
            import redis

            r = redis.Redis(unix_socket_path=args.redis_socket)
            r.flushall()
            return r, lambda: redis.Redis(unix_socket_path=args.redis_socket), lambda: None

        backends["redis-py (unix socket)"] = red

    if args.memcached_socket:

        def mem():
            from pymemcache.client.base import Client

            c = Client(args.memcached_socket)
            c.flush_all()
            return c, lambda: Client(args.memcached_socket), c.close

        backends["pymemcache (unix socket)"] = mem

    return backends


class CtypesClient:
    """get and set of bytes through ctypes calls of mc_get and mc_set."""

    def __init__(self, path):
        import ctypes
        import mappedcache

        self.ctypes = ctypes
        lib = ctypes.CDLL(os.path.join(os.path.dirname(mappedcache.__file__), "libmappedcache.so"))
        self.handle = ctypes.c_void_p()
        if lib.mc_open(path.encode(), None, ctypes.byref(self.handle)) != 0:
            raise RuntimeError(lib.mc_last_error())
        self.lib = lib
        self.mc_get = lib.mc_get
        self.mc_get.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.POINTER(ctypes.c_size_t)]
        self.mc_set = lib.mc_set
        self.mc_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                                ctypes.c_double]
        self.buffer = ctypes.create_string_buffer(1024)
        self.length = ctypes.c_size_t()

    def get(self, key):
        k = key.encode()
        if self.mc_get(self.handle, k, len(k), self.buffer, 1024, self.ctypes.byref(self.length)) == 0:
            return self.buffer.raw[1 : self.length.value]  # after the python cache's tag byte
        return None

    def set(self, key, value):
        k = key.encode()
        v = b"B" + value
        self.mc_set(self.handle, k, len(k), v, len(v), 0.0)

    def set_many(self, mapping):
        for k, v in mapping.items():
            self.set(k, v)

    def close(self):
        self.lib.mc_close(self.handle)


def prefill(client, keys):
    if hasattr(client, "transact"):  # diskcache: one transaction
        with client.transact():
            for k in keys:
                client[k] = VALUE
    elif hasattr(client, "set_many") and not isinstance(client, dict):
        for i in range(0, len(keys), 1000):
            client.set_many({k: VALUE for k in keys[i : i + 1000]})
    elif hasattr(client, "mset"):
        for i in range(0, len(keys), 1000):
            client.mset({k: VALUE for k in keys[i : i + 1000]})
    elif hasattr(client, "update"):
        client.update({k: VALUE for k in keys})
    else:
        for k in keys:
            client[k] = VALUE


def operations(client, op):
    """The bound get or set of a client, as its users call it."""
    if op == "get":
        return client.get
    if hasattr(client, "set") and not isinstance(client, dict) and not hasattr(client, "_callmethod"):
        s = client.set
        return lambda k: s(k, VALUE)
    return lambda k: client.__setitem__(k, VALUE)


def worker(connect, op, keys, seconds, seed, start, results):
    client = connect()
    fn = operations(client, op)
    order = [keys[i] for i in random.Random(seed).choices(range(len(keys)), k=65536)]
    start.wait()
    n = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        for k in order[n & 0xFFFF : (n & 0xFFFF) + 256]:
            fn(k)
        n += 256
        if time.perf_counter() >= end:
            break
    results.put(n / (time.perf_counter() - t0))


def measure(connect, op, keys, seconds, procs):
    if procs == 1:
        q = multiprocessing.SimpleQueue()

        class Now:
            def wait(self):
                pass

        worker(connect, op, keys, seconds, 1, Now(), q)
        return q.get()
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(procs)
    q = ctx.SimpleQueue()
    ps = [ctx.Process(target=worker, args=(connect, op, keys, seconds, s + 1, start, q)) for s in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return sum(q.get() for _ in ps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redis-socket")
    ap.add_argument("--memcached-socket")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    keys = [f"key-{i:08d}" for i in range(args.keys)]
    cells = {}
    with tempfile.TemporaryDirectory() as tmp:
        backends = make_backends(args, tmp)
        for rep in range(args.reps):
            for name, make in backends.items():
                client, connect, close = make()
                prefill(client, keys)
                for op in ("get", "set"):
                    for procs in (1, 2):
                        rate = measure(connect, op, keys, args.seconds, procs)
                        cells.setdefault((name, op, procs), []).append(rate)
                close()
                print(f"pass {rep + 1}/{args.reps}: {name} done", file=sys.stderr, flush=True)

    def best(name, op, procs):
        return max(cells[(name, op, procs)])

    def median(name, op, procs):
        return statistics.median(cells[(name, op, procs)])

    print(f"\n{args.keys} keys, 64-byte values, {args.seconds:g} s per run, best / median of {args.reps} interleaved runs")
    print(f"{'ops per second':28} {'get, 1 proc':>22} {'get, 2 procs':>22} {'set, 1 proc':>22} {'set, 2 procs':>22}")
    for name in backends:
        row = [f"{best(name, op, p):>10,.0f} / {median(name, op, p):>9,.0f}" for op in ("get", "set") for p in (1, 2)]
        print(f"{name:28} " + " ".join(f"{c:>22}" for c in row))
    ours = "mappedcache"
    print("\nmappedcache's rate over each (best over best, median over median):")
    for name in backends:
        if name == ours:
            continue
        row = []
        for op in ("get", "set"):
            for p in (1, 2):
                row.append(f"{best(ours, op, p) / best(name, op, p):8.1f}x / {median(ours, op, p) / median(name, op, p):.1f}x")
        print(f"{name:28} " + " ".join(f"{c:>22}" for c in row))
    print(f"\nmappedcache get from Python: {1e9 / best(ours, 'get', 1):.0f} ns best, "
          f"{1e9 / median(ours, 'get', 1):.0f} ns median (one process; the call into C included)")


if __name__ == "__main__":
    main()
