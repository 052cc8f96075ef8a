#!/usr/bin/env python3
"""Splits one operation's instructions into the write protocol's steps (DESIGN.md
section 4, W0-W7), from two callgrind profiles of the same loop run for N and 2N
iterations (`scripts/callgrind.sh` makes them with --dump-instr=yes).

    callgrind_steps.py UNSTRIPPED_BINARY OUT_N OUT_2N N

Each instruction's own count in the 2N run less its count in the N run, over N, is its
share of one operation. An instruction of the binary is placed by the chain of inlined
functions it came from (llvm-symbolizer on the unstripped binary, whose addresses the
stripped one that valgrind ran keeps): the first rule of STEPS whose pattern the chain
matches names its step. Instructions of other objects (libc, the Swift runtime) are
`runtime`, whoever called them; so are the functions of the binary that no step's
function inlines, whoever called them, `loop` (the harness's own among them). Prints one line `steps API=.. own=.. W0=.. ...` and then
each step's functions, largest first. `own`: the lines of the engine's entry itself
(`CacheEngine.set`, `rewriteInPlace`): its checks, and the moves and stack traffic
between the inlined steps; `loop`: the harness's.
"""

import collections
import os
import re
import subprocess
import sys

# A function's step, by its name (demangled, simplified): each instruction takes the step
# of the innermost function of its inline chain that has one. Helpers used by several
# steps (KeyHash, IndexGeometry, PartitionMemory, PartitionCounters) have none: they take
# their caller's. Inlined straight into the operation's entry (ENTRY), they are W0's (the
# key's hash, its routing, the value's checksum); the entry's own lines are `own`.
STEPS = [
    ("W7", r"releaseUncontended|WriteLock\.release|wakeWaiter|countStore"),
    ("W6", r"BucketIndex\.publish"),
    ("W5", r"Writer\.write\(|writeRecord|RecordLogs\.(reserve|commit)"),
    ("W4", r"storeChanging|makeRoom|Writer\.allocate|Writer\.destination|EvictionPolicy|IndexResizer|GhostTable"
     r"|FreeLists|BucketIndex\.(allocate|displace|placement|slot|otherPlace|entry)|RecordLogs"),
    ("W3", r"Writer\.rewrite\(|rewriteValue|marking|storeTrailer|rewriteFound|Writer\.changeCounter|Writer\.resize"
     r"|Writer\.rewriteInPlace"),
    ("W2", r"shortEntry|keyEquals|BucketIndex\.(find|lookup)|Writer\.store\(|Writer\.unexpired"),
    ("W1", r"tryAcquireUncontended|takeFree|acquireSettled|WriteLock\.acquire|needsRepair|mustReroute|whileHolding"
     r"|withWriteLock|withKeyLock|hintedWord|overwriteHinted|setHolding"),
    ("W0", r"Writer\.prepare|prefetchFirstBucket|lookAhead|RecentSlots|checkKey"),
    ("API", r"SharedCache|withUTF8Bytes|ValueCodec"),
]
ENTRY = r"CacheEngine\.(set|setPrepared|changeCounter|rewriteInPlace)\("
# The entry's lines, by what they call: a `@_transparent` function (`lookAhead`,
# `overwriteHinted`) leaves no frame, and its code keeps the line of its call. Under the
# hinted write's line, a slot's or record's read is W2's, the rest W1's checks.
LINES = [
    ("W1-W2", r"overwriteHinted|writer\.changeCounter|hintedWord"),
    ("W7", r"releaseUncontended"),
    ("W1", r"tryAcquireUncontended|\.intent"),
    ("W0", r"lookAhead|prefetchFirstBucket|KeyHash|IndexGeometry|partition|checksum"),
]
# Step functions that inline a `@_transparent` one: their lines are split by LINES too,
# and a line no rule names is theirs.
LINED = r"Writer\.changeCounter\("
SLOT_READS = r"entryWord|\.tag\(|shortEntry|shortRecord|keyEquals|shortWords|tailWord|withValue|bucket|groupOffset"


def self_costs(path, binary):
    """Per instruction address of `binary` its own count; other objects by function."""
    own = collections.Counter()
    other = collections.Counter()
    ob = fn = ""
    skip = False
    with open(path) as f:
        for line in f:
            if line.startswith("ob="):
                ob = line[3:].strip()
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                skip = True  # the next cost line is the call's inclusive cost
            elif line.startswith("0x"):
                if skip:
                    skip = False
                    continue
                parts = line.split()
                cost = int(parts[-1])
                if os.path.basename(ob) == binary:
                    own[int(parts[0], 16)] += cost
                else:
                    other[f"{os.path.basename(ob)}: {fn}"] += cost
    return own, other


def demangle(names):
    out = subprocess.run(
        ["swift", "demangle", "--simplified"], input="\n".join(names), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return out if len(out) == len(names) else names


FUNC = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:private|fileprivate|internal|public|static|mutating)\s+)*func\s+(\w+)")


def enclosing(path, line):
    """The function declared last before `line` in the Swift file `path`, as "File.name"."""
    names = [m.group(1) if (m := FUNC.match(text)) else None for text in source(path)[: max(0, line)]]
    name = next((n for n in reversed(names) if n), None)
    stem = os.path.basename(path).split(".")[0].split("+")[0]
    return f"{stem}.{name}" if name else None


def source(path, cache={}):
    """The lines of the source file `path`: as committed at $CALLGRIND_STEPS_REV when set
    (a binary built from that commit), else as they are."""
    if path not in cache:
        rev = os.environ.get("CALLGRIND_STEPS_REV")
        try:
            if rev:
                top = subprocess.run(
                    ["git", "-C", os.path.dirname(path), "rev-parse", "--show-toplevel"],
                    capture_output=True, text=True, check=True,
                ).stdout.strip()
                text = subprocess.run(
                    ["git", "-C", top, "show", f"{rev}:{os.path.relpath(path, top)}"],
                    capture_output=True, text=True, check=True,
                ).stdout
            else:
                with open(path) as f:
                    text = f.read()
            cache[path] = text.splitlines()
        except (OSError, subprocess.CalledProcessError):
            cache[path] = []
    return cache[path]


def source_line(path, line):
    """Line `line` of `path`, stripped ("" past its end)."""
    lines = source(path)
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def chains(binary, addresses):
    """Per address its inlined frames, outermost first, each a demangled name. A frame
    whose line lies in another function than its name (a `@_transparent` function,
    inlined with no frame of its own) is followed by that function ("File.name")."""
    query = "\n".join(hex(a) for a in addresses)
    out = subprocess.run(
        ["llvm-symbolizer", f"--obj={binary}", "--inlining", "--functions=linkage", "--no-demangle"],
        input=query,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    blocks = [b.splitlines() for b in out.strip("\n").split("\n\n")]
    flat = demangle([name for b in blocks for name in b[0::2]])
    result, i = {}, 0
    for a, b in zip(addresses, blocks):
        frames = []
        for name, where in zip(flat[i : i + len(b) // 2], b[1::2]):
            path, line = where.rsplit(":", 2)[0], int(where.rsplit(":", 2)[1])
            swift = path.endswith(".swift") and line > 0
            if swift and (re.search(ENTRY, name) or re.search(LINED, name)):
                frames.append([name, "@" + source_line(path, line) + "\n" + source_line(path, line - 1)])
                continue
            inner = enclosing(path, line) if swift else None
            frames.append([name] + ([inner] if inner and inner.split(".")[1] not in name else []))
        i += len(b) // 2
        result[a] = [f for fr in reversed(frames) for f in fr]
    return result


def step_of(chain):
    """The step of an instruction whose inline chain (outermost first) is `chain`."""
    reads = False
    for depth, frame in enumerate(reversed(chain)):
        if frame.startswith("@"):  # a line (`chains`): its text, then the line before
            entry = bool(re.search(ENTRY, chain[-depth - 2]))
            for text in frame[1:].split("\n"):
                for step, pattern in LINES if entry else LINES[:1]:
                    if re.search(pattern, text):
                        return ("W2" if reads else "W1") if step == "W1-W2" else step
            if entry:
                return "own"
            continue
        reads = reads or bool(re.search(SLOT_READS, frame))
        for step, pattern in STEPS:
            if re.search(pattern, frame):
                return step
    return "loop"


def short(name):
    if name.startswith("@"):
        return "line: " + name[1:].split("\n")[0][:54]
    name = re.sub(r"\(.*", "", name)
    return name[-60:]


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    unstripped, out_n, out_2n, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    binary = "mc-test-helper"
    own_a, other_a = self_costs(out_n, binary)
    own_b, other_b = self_costs(out_2n, binary)
    diff = {a: own_b[a] - own_a.get(a, 0) for a in own_b if own_b[a] - own_a.get(a, 0) >= n // 2}
    where = chains(unstripped, sorted(diff))
    steps = collections.Counter()
    functions = collections.defaultdict(collections.Counter)
    for a, d in diff.items():
        chain = where[a]
        s = step_of(chain)
        steps[s] += d
        functions[s][short(chain[-1])] += d
    for key in other_b:
        d = other_b[key] - other_a.get(key, 0)
        if d >= n // 2:
            # Another object's function (libc's, the Swift runtime's): its callers are not
            # told apart.
            s = "runtime"
            steps[s] += d
            functions[s][short(key)] += d
    order = ["API", "own", "W0", "W1", "W2", "W3", "W4", "W5", "W6", "W7", "runtime", "loop"]
    print("steps " + " ".join(f"{s}={round(steps[s] / n)}" for s in order if steps[s]))
    for s in order:
        for name, d in functions[s].most_common():
            if round(d / n):
                print(f"  {s:6} {round(d / n):5}  {name}")


if __name__ == "__main__":
    main()
