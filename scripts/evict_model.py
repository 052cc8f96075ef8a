#!/usr/bin/env python3
"""Models of eviction policies in Python, for fast iteration before a change reaches the
engine: libCacheSim's S3-FIFO (ported from its S3FIFO.c, with its fill rule and
move-to-main threshold) and MappedCache's policy under a count limit (EvictionPolicy:
small and main FIFOs by entry count, a hit count 0-3, the ghost as an exact FIFO or in
buckets of 16 like the engine), with the variants tried. Object sizes are 1; a cache of
`n` objects. CHOSEN is the policy the engine implements.

  scripts/evict_model.py TRACE.txt [FRACTION ...]      # one key per line
"""

import sys
from collections import OrderedDict


class Ghost:
    """An exact FIFO of the last `size` keys remembered; recall forgets the key."""

    def __init__(self, size):
        self.size, self.q = max(1, size), OrderedDict()

    def remember(self, k):
        self.q.pop(k, None)
        self.q[k] = True
        if len(self.q) > self.size:
            self.q.popitem(last=False)

    def recall(self, k):
        return self.q.pop(k, None) is not None


class BucketGhost:
    """The engine's ghost: ceil(size / 16) buckets of 16, each a FIFO; a key's bucket
    from a mixed hash of it (not the engine's hash: the spread is what matters)."""

    def __init__(self, size):
        self.n = max(1, -(-size // 16))
        self.b = [OrderedDict() for _ in range(self.n)]

    def _bucket(self, k):
        x = (hash(k) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 29
        return self.b[((x >> 20) & 0xFFFFFFFF) * self.n >> 32]

    def remember(self, k):
        b = self._bucket(k)
        b.pop(k, None)
        b[k] = True
        if len(b) > 16:
            b.popitem(last=False)

    def recall(self, k):
        return self._bucket(k).pop(k, None) is not None


def lcs_s3fifo(trace, n, threshold=2, fill_rule=True):
    """libCacheSim's S3FIFO.c: small 10 %, ghost 90 %, main a 2-bit clock."""
    small_cap = int(n * 0.1)
    main_cap = n - small_cap
    small, main = OrderedDict(), OrderedDict()  # key -> freq, oldest first
    ghost = Ghost(int(n * 0.9))
    has_evicted = False
    hits = 0
    for k in trace:
        if k in small:
            small[k] += 1
            hits += 1
            continue
        on_ghost = ghost.recall(k)
        if k in main:
            main[k] += 1
            hits += 1
            continue
        while len(small) + len(main) + 1 > n:
            has_evicted = True
            if len(main) > main_cap or not small:
                while main:
                    key, f = main.popitem(last=False)
                    if f >= 1:
                        main[key] = min(f, 3) - 1
                    else:
                        break
            else:
                while small:
                    key, f = small.popitem(last=False)
                    if f >= threshold:
                        main[key] = 0
                    else:
                        ghost.remember(key)
                        break
        if on_ghost:
            main[k] = 0
        elif fill_rule and not has_evicted and len(small) >= small_cap:
            main[k] = 0
        else:
            small[k] = 0
    return hits


class Ours:
    """MappedCache's EvictionPolicy under a count limit whose logs never fill, and variants.

    fill: 'none' (today), 'main' (libCacheSim's rule: while nothing was evicted yet and
    small holds its tenth, new keys go to main, marked unearned).
    unearned_ghost: an unearned entry evicted from main is remembered in the ghost.
    displace: an unread small tail displaces an unearned-unread main tail (today's chain).
    threshold: hits in small needed for promotion (1 today); threshold_fill: the same
    while unearned entries remain (None: threshold).
    """

    def __init__(self, n, fill="none", unearned_ghost=False, displace=True, threshold=1,
                 ghost_frac=0.9, small_frac=0.1, unearned_first=False, threshold_fill=None,
                 adaptive=False, adapt_k=1.0, adapt_window=None, fill_frac=None, keep_hits=False, chain_unearned=True,
                 ghost_displaced=False, reuse_gate=False, buckets=False, hand_run=0):
        self.n, self.fill, self.ug, self.displace = n, fill, unearned_ghost, displace
        self.threshold = threshold
        self.threshold_fill = threshold if threshold_fill is None else threshold_fill
        self.adaptive, self.adapt_k = adaptive, adapt_k
        self.adapt_window = adapt_window or n
        self.single = set()  # promoted on one hit, not read in main since
        self.useful = self.wasted = 0
        self.small_frac = small_frac
        self.keep_hits = keep_hits
        # chain_unearned: a newcomer that displaced an unearned entry is unearned itself
        # (so it can be displaced in turn); False: only the first fill is displaceable.
        self.chain_unearned = chain_unearned
        self.ghost_displaced = ghost_displaced
        # reuse_gate: with no entry read and no ghost recalled ever, or for ten cache's
        # worths of evictions, any unread main tail may be displaced (keep the newest).
        self.reuse_gate = reuse_gate
        # hand_run: before deciding on displacement, the hand passes up to this many read
        # entries at main's tail (second chances) while unearned entries remain.
        self.hand_run = hand_run
        self.evictions = 0
        self.last_reuse = None  # evictions at the last reuse; None: never
        self.fill_frac = small_frac if fill_frac is None else fill_frac
        self.unearned_first = unearned_first
        self.small, self.main = OrderedDict(), OrderedDict()  # key -> hits (0-3)
        self.unearned = set()
        self.ghost = (BucketGhost if buckets else Ghost)(int(n * ghost_frac))
        self.has_evicted = False
        self.displacing = False

    def request(self, k):
        if k in self.small:
            self.small[k] = min(3, self.small[k] + 1)
            return True
        if k in self.main:
            self.main[k] = min(3, self.main[k] + 1)
            return True
        to_main = self.ghost.recall(k)
        if to_main:
            self.last_reuse = self.evictions
        while len(self.small) + len(self.main) >= self.n:
            self.evict_one()
        if to_main:
            self.main[k] = 0
        elif self.fill == "main" and not self.has_evicted and len(self.small) >= self.fill_frac * self.n:
            self.main[k] = 0
            self.unearned.add(k)
        else:
            self.small[k] = 0
            if self.fill == "tail" and not self.has_evicted:
                # While filling, small keeps its tenth: its tail moves on to main.
                while len(self.small) > self.fill_frac * self.n:
                    t, h = self.small.popitem(last=False)
                    self.main[t] = h if self.keep_hits else 0
                    if h == 0:
                        self.unearned.add(t)
        return False

    def main_tail_unearned_unread(self):
        if not self.main:
            return False
        k = next(iter(self.main))
        if self.main[k] != 0:
            return False
        no_reuse = self.reuse_gate and (self.last_reuse is None or self.evictions - self.last_reuse >= 10 * (len(self.small) + len(self.main)))
        return k in self.unearned or no_reuse

    def evict_one(self):
        self.has_evicted = True
        s, m = len(self.small), len(self.main)
        if s and (not m or s >= self.small_frac * (s + m)):
            self.evict_small()
        else:
            self.evict_main()

    def evict_small(self):
        k, h = self.small.popitem(last=False)
        if h > 0:
            self.last_reuse = self.evictions
        if self.hand_run and self.unearned:
            for _ in range(self.hand_run):
                t0 = next(iter(self.main), None)
                if t0 is None or self.main[t0] == 0:
                    break
                h0 = self.main.pop(t0)
                self.main[t0] = h0 - 1
                self.unearned.discard(t0)
                self.last_reuse = self.evictions
        t = self.threshold_fill if self.unearned else self.threshold
        if self.adaptive:
            t = 2 if self.wasted > self.adapt_k * self.useful else 1
        if h >= t:
            self.main[k] = 0
            if h == 1:
                self.single.add(k)
        elif self.displace and self.main_tail_unearned_unread():
            self.displacing = True
            self.evict_main()
            self.displacing = False
            if self.displace == "prefer":
                # The newcomer stays at small's tail: small grows past its tenth.
                self.small[k] = h
                self.small.move_to_end(k, last=False)
                return
            self.main[k] = 0
            if self.chain_unearned:
                self.unearned.add(k)
        else:
            self.ghost.remember(k)
            self.evictions += 1

    def evict_main(self):
        while True:
            k, h = self.main.popitem(last=False)
            if k in self.single:
                self.single.discard(k)
                if h > 0:
                    self.useful += 1
                else:
                    self.wasted += 1
                if self.useful + self.wasted > self.adapt_window:
                    self.useful /= 2
                    self.wasted /= 2
            if h > 0:
                self.last_reuse = self.evictions
                self.main[k] = h - 1
                self.unearned.discard(k)
                continue
            if k in self.unearned:
                self.unearned.discard(k)
                if self.ug or (self.ghost_displaced and self.displacing):
                    self.ghost.remember(k)
            self.evictions += 1
            return


# The policy the engine implements now: while filling, small keeps a twelfth of the
# limit (its tail moves on to main, unearned); promotion after 2 hits; a newcomer that
# displaces an unearned entry is not unearned itself; the no-reuse gate; a ghost of
# 0.85 x the limit in buckets of 16.
CHOSEN = dict(fill="tail", fill_frac=1 / 12, ghost_frac=0.85, threshold=2, chain_unearned=False, reuse_gate=True,
              keep_hits=True, buckets=True)


def ours(trace, n, **kw):
    c = Ours(n, **kw)
    return sum(1 for k in trace if c.request(k))


def main():
    trace = [int(x) for x in open(sys.argv[1]) if x.strip()]
    fracs = [float(f) for f in sys.argv[2:]] or [0.05, 0.1, 0.2, 0.4]
    distinct = len(set(trace))
    variants = {
        "libCacheSim S3-FIFO": lambda n: lcs_s3fifo(trace, n),
        "ours before": lambda n: ours(trace, n),
        "ours": lambda n: ours(trace, n, **CHOSEN),
    }
    for f in fracs:
        n = max(10, int(distinct * f))
        print(f, n, " ".join(f"{name}={fn(n) / len(trace):.4f}" for name, fn in variants.items()), flush=True)


if __name__ == "__main__":
    main()
