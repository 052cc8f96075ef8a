"""aiocache's get and set through mappedcache.aiocache.MappedCache against aiocache's own
RedisCache (redis-py's asyncio client to a local redis-server), in one event loop: REPS
interleaved passes (the order alternating), each timing OPS operations of each backend,
for one task awaiting in turn and for TASKS tasks at once. Prints each backend's
operations per second (best and median of the passes) and the ratio of the two in each
pass (best and median). Run by scripts/python-frameworks-bench.sh, which starts the
redis-server."""

import argparse
import asyncio
import os
import statistics
import time

from aiocache import RedisCache

from mappedcache.aiocache import MappedCache


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--path", required=True)
    p.add_argument("--redis-port", type=int, required=True)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ops", type=int, default=20000)
    p.add_argument("--keys", type=int, default=10000)
    p.add_argument("--tasks", type=int, default=32)
    return p.parse_args()


async def timed(cache, op, keys, ops, tasks):
    """Operations per second of `op` ("get" or "set") over `ops` operations shared by `tasks` tasks."""
    value = "v" * 64
    per_task = ops // tasks

    async def worker(start):
        n = len(keys)
        if op == "get":
            for i in range(per_task):
                await cache.get(keys[(start + i) % n])
        else:
            for i in range(per_task):
                await cache.set(keys[(start + i) % n], value)

    t = time.perf_counter()
    await asyncio.gather(*(worker(w * 7919) for w in range(tasks)))
    return per_task * tasks / (time.perf_counter() - t)


async def main():
    a = parse()
    keys = [f"bench:{i}" for i in range(a.keys)]
    configs = {
        # Each backend as it comes: aiocache wraps a Redis call in asyncio.wait_for (timeout 5).
        "defaults": (MappedCache(a.path, 64 << 20), RedisCache(port=a.redis_port)),
        # Neither wrapped: the same aiocache layers over each backend's own call.
        "timeout=None": (MappedCache(a.path, 64 << 20), RedisCache(port=a.redis_port, timeout=None)),
    }
    for mapped, redis in configs.values():
        for k in keys:
            await mapped.set(k, "v" * 64)
            await redis.set(k, "v" * 64)
    print(f"aiocache {a.ops} operations a pass, {a.keys} keys, 64-byte str values, {a.reps} interleaved passes")
    print(f"{'config':13} {'op':4} {'tasks':>5} {'mappedcache ops/s best/median':>30} "
          f"{'redis ops/s best/median':>24} {'ratio best/median':>18}")
    for name, (mapped, redis) in configs.items():
        for tasks in (1, a.tasks):
            for op in ("get", "set"):
                m, r = [], []
                for rep in range(a.reps):
                    order = [(mapped, m), (redis, r)] if rep % 2 == 0 else [(redis, r), (mapped, m)]
                    for cache, out in order:
                        out.append(await timed(cache, op, keys, a.ops, tasks))
                ratios = [x / y for x, y in zip(m, r)]
                print(f"{name:13} {op:4} {tasks:5} {max(m):14,.0f} / {statistics.median(m):<13,.0f} "
                      f"{max(r):10,.0f} / {statistics.median(r):<11,.0f} "
                      f"{max(ratios):8.1f} / {statistics.median(ratios):.1f}")
    for mapped, redis in configs.values():
        await redis.close()


if __name__ == "__main__":
    asyncio.run(main())
