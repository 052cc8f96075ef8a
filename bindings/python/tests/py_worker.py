"""Python worker processes for the interop and chaos tests (run as a script, never
imported by the tests):

  py_worker.py compute-race PATH KEY COUNTER_FILE START_MS COMPUTE_MS
      At wall-clock START_MS, get-or-computes KEY in a cache of strings (as the Swift
      helper's compute-race does); the compute appends a line to COUNTER_FILE and sleeps
      COMPUTE_MS. Prints "VALUE cached|computed".

  py_worker.py chaos PATH SLOT KEYS PROBLEMS STOP
      Until the file STOP exists: sets and reads self-checking values (Tests/CheckedValues'
      format, the one the Swift helper's writer and reader use) on the shared keys
      k0..k{KEYS-1}, and on keys of its own (py{SLOT}-k<n>) whose last write it tracks.
      Every value read must check (else "corrupt"), and a key of its own must hold what it
      last wrote there (else "wrong"); each problem is appended to PROBLEMS at once (the
      worker may be SIGKILLed at any moment). Prints its counts when it stops.
"""

import json
import os
import random
import sys
import time

import mappedcache

MASK = (1 << 64) - 1


def fnv(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def checked_value(key: str, writer: int, seq: int, size: int) -> bytes:
    """CheckedValue.make: key NUL writer NUL seq NUL payload, then FNV-1a of it all."""
    head = f"{key}\0{writer}\0{seq}\0".encode()
    payload = bytearray()
    x = (seq * 0x9E3779B97F4A7C15 & MASK) | 1
    for _ in range(max(0, size - len(head) - 8)):
        x ^= (x << 13) & MASK
        x ^= x >> 7
        x ^= (x << 17) & MASK
        payload.append(x & 0xFF)
    body = head + bytes(payload)
    return body + fnv(body).to_bytes(8, "little")


def check(value: bytes, key: str) -> bool:
    """CheckedValue.check: names the key and its checksum matches."""
    k = key.encode()
    if len(value) < len(k) + 1 + 8:
        return False
    body = value[:-8]
    return int.from_bytes(value[-8:], "little") == fnv(body) and value[: len(k)] == k and value[len(k)] == 0


def seq_of(value: bytes) -> int:
    return int(value.split(b"\0")[2])


def compute_race(path, key, counter, start_ms, compute_ms):
    cache = mappedcache.Cache(path, capacity=4 << 20, value_type="string")
    while time.time() * 1000 < int(start_ms):
        time.sleep(0.0002)

    def compute():
        with open(counter, "a") as f:
            f.write(f"computed by python {os.getpid()}\n")
        time.sleep(int(compute_ms) / 1000)
        return f"value-from-{os.getpid()}"

    computed = []
    value = cache.get_or_compute(key, lambda: computed.append(1) or compute(), wait=30)
    print(value, "computed" if computed else "cached", flush=True)


def chaos(path, slot, keys, problems, stop):
    cache = mappedcache.Cache(path, value_type="bytes", create=False)
    slot, keys = int(slot), int(keys)
    rng = random.Random(os.getpid())
    writer = 1000 + slot
    seq = int(time.time() * 1000) % 1_000_000 * 1000
    mine = {}  # key -> the seq this process last stored there
    counts = {"sets": 0, "reads": 0, "hits": 0, "corrupt": 0, "wrong": 0}

    def problem(kind, text):
        counts[kind] += 1
        fd = os.open(problems, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{kind} slot {slot} pid {os.getpid()}: {text}\n".encode())
        os.close(fd)

    n = 0
    while True:
        n += 1
        if n % 64 == 0 and os.path.exists(stop):
            break
        own = rng.random() < 0.5
        key = f"py{slot}-k{rng.randrange(64)}" if own else f"k{rng.randrange(keys)}"
        if rng.random() < 0.4:
            seq += 1
            value = checked_value(key, writer, seq, rng.choice((16, 64, 200, 1500)))
            cache.set(key, value)
            counts["sets"] += 1
            if own:
                mine[key] = seq
            continue
        counts["reads"] += 1
        value = cache.get(key)
        if value is None:
            if own and key in mine:
                problem("wrong", f"{key} missing after this process stored seq {mine[key]}")
            continue
        counts["hits"] += 1
        if not check(value, key):
            problem("corrupt", f"{key}: {value[:40]!r}")
        elif own and key in mine and seq_of(value) != mine[key]:
            problem("wrong", f"{key} holds seq {seq_of(value)}, this process stored {mine[key]}")
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    {"compute-race": compute_race, "chaos": chaos}[sys.argv[1]](*sys.argv[2:])
