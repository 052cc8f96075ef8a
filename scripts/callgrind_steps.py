#!/usr/bin/env python3
"""Where a read's instructions go, step by step (scripts/callgrind.sh).

    callgrind_steps.py BINARY SOURCES N PROFILE_N PROFILE_2N [LABEL]

The two profiles are callgrind's (`--dump-instr=yes`) of the same loop run N and 2N
times; each instruction's cost is the difference over N, so setup cancels as in
callgrind.sh's totals. Every instruction of the library is named by the functions
inlined at its address (`addr2line -i` on the unstripped BINARY), and those name its
step of the read protocol (DESIGN.md, sections 3 and 12):

    hash     KeyHash (the key's hash and its words)
    R1       the partition and its geometry word
    R2       the two places, the tag, the buckets' prefetch, the move sequence
    R3-R4    the seqlock read of the buckets: sequence, tags, slots, the record's check,
             the key compared, the value copied (split into its parts)
    R5       the geometry word again, and a miss's checks
    R6       the hit bit and the hit counter
    B1-B2    a batch's hashes and prefetches (`--mget`)
    call     the library's entry and exit: argument checks, spills, returns
    caller   outside the library: the harness's loop, retains and releases

Code written in `Reader.quickCopy` itself (not in a function inlined there) takes its
step from the `// R<n>` comment above it in Reader.swift. Prints one line per step
(`step instructions`), or with LABEL one line `LABEL: step=n step=n ...` (the R3 parts
summed as R3-R4, their split after it in brackets).
"""
import collections
import re
import subprocess
import sys

LIB = "$s11MappedCache"


def costs(path):
    """Instruction -> (function, cost) from a callgrind profile with instructions."""
    out = {}
    names = {}
    fn = None
    addr = 0
    skip = False
    with open(path) as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                # A function's name comes with its first mention, as a caller or a callee.
                # Compressed (`fn=(id) name`, then `fn=(id)`) or not (`fn=name`).
                m = re.match(r"c?fn=(?:\((\d+)\))? ?(.*)", line.strip())
                ident = m.group(1) or m.group(2)
                if m.group(2):
                    names[ident] = m.group(2)
                if line.startswith("fn="):
                    fn = names.get(ident, "?")
                continue
            if line.startswith("calls="):
                skip = True  # the next line is the call's inclusive cost
                continue
            if not line or line[0] not in "+-*0123456789":
                continue
            parts = line.split()
            p = parts[0]
            if p.startswith("+"):
                addr += int(p[1:], 0)
            elif p.startswith("-"):
                addr -= int(p[1:], 0)
            elif p != "*":
                addr = int(p, 0)
            if skip:
                skip = False
                continue
            key = (fn, addr)
            out[key] = out.get(key, 0) + int(parts[-1])
    return out


def step_lines(reader_swift):
    """Line -> step for code written in `quickCopy`'s own body."""
    marks = {}
    inside = False
    current = "call"
    with open(reader_swift) as f:
        for i, line in enumerate(f, 1):
            if re.search(r"func quickCopy\(", line):
                inside = True
            elif inside and re.match(r"  (///|func |@|})", line) and "quickCopy" not in line:
                if line.startswith("  }"):
                    inside = False
                continue
            if not inside:
                continue
            m = re.search(r"// (R\d)", line)
            if m:
                current = {"R3": "R3-R4 sequence, slots", "R4": "R3-R4 sequence, slots",
                           "R6": "R6 hit bit, counters"}.get(m.group(1), m.group(1))
            marks[i] = current
    return marks


RULES = [  # (step, substrings of a demangled frame), the first match wins
    ("R6 hit bit, counters", ["markHit", "hitBit", "countHit", "countMiss", "HandleCounters", "SharedWord.increment"]),
    ("B1-B2 batch", ["BatchReader", "copyValues", "prefetchFirstBuckets", "prefetchRecords"]),
    ("R3 tags", ["tagMatches", "mc_tag_matches"]),
    ("R3 record check", ["shortRecord", "shortEntry", "record(at", "decodeRecord"]),
    ("R3 key compare", ["keyEquals", "bytesEqual"]),
    ("R3 value copy", ["copyValue(record", "mc_copy_record_bytes", "mc_copy_from_both_ends"]),
    ("R3 record prefetch", ["prefetchRecordTail"]),
    ("R3-R4 sequence, slots", ["seqlockRead", "quickRead", "lookup(", "bucketView", "PartitionMemory.Bucket"]),
    ("R2", ["Placement", "prefetchBuckets", "moveSequence"]),
    ("R5", ["geometryRelaxed", "liveRouting"]),
    ("R1", ["IndexGeometry.partition", "PartitionRoute", "MappedMemory.route", "MappedMemory.partition",
            "partitionCount", "geometry()",
            "isValidGroupCount", "PartitionMemory.init"]),
    ("hash", ["KeyHash"]),
]


# The tag compare's vector instructions (`mc_tag_matches`), which the optimizer leaves
# without a source line once merged into the read.
TAG_VECTOR_OPS = {"pcmpeqw", "packsswb", "pmovmskb", "pshuflw", "pshufd", "movd", "punpcklwd"}


def mnemonics(binary, addrs):
    """Address -> mnemonic, for the library's instructions that ran."""
    if not addrs:
        return {}
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", f"--start-address={min(addrs)}", f"--stop-address={max(addrs) + 16}",
         binary], capture_output=True, text=True
    ).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+)", line)
        if m:
            found[int(m.group(1), 16)] = m.group(2)
    return found


def classify(chain, marks, mnemonic=None):
    """The step of one instruction, from its inline chain (innermost first)."""
    for step, keys in RULES:
        for name, _ in chain:
            if any(k in name for k in keys):
                return step
    for name, where in chain:
        if "Reader.quickCopy" in name:
            m = re.search(r"Reader\.swift:(\d+)", where)
            if m and int(m.group(1)) in marks:
                return marks[int(m.group(1))]
    if mnemonic in TAG_VECTOR_OPS:
        return "R3 tags"
    return "call"


def one_line(label, steps, n):
    """`label: hash=29 R1=29 ... (tags=10 record=20 ...)`, rounded."""
    r3 = {s: v for s, v in steps.items() if s.startswith("R3")}
    short = {"hash": "hash", "R1": "R1", "R2": "R2", "R5": "R5", "R6 hit bit, counters": "R6",
             "B1-B2 batch": "B1-B2", "call": "call", "caller": "caller"}
    parts = []
    for s in ["hash", "R1", "R2"]:
        parts.append(f"{short[s]}={steps.get(s, 0) / n:.0f}")
    parts.append(f"R3-R4={sum(r3.values()) / n:.0f}")
    for s in ["R5", "R6 hit bit, counters", "B1-B2 batch", "call", "caller"]:
        if steps.get(s, 0) or s != "B1-B2 batch":
            parts.append(f"{short[s]}={steps.get(s, 0) / n:.0f}")
    names = {"R3 tags": "tags", "R3 record check": "check", "R3 key compare": "key", "R3 value copy": "copy",
             "R3 record prefetch": "prefetch", "R3-R4 sequence, slots": "seq"}
    split = " ".join(f"{names[s]}={r3.get(s, 0) / n:.0f}" for s in names)
    return f"{label}: {' '.join(parts)} (R3-R4: {split})"


def main():
    binary, sources, n, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    ca, cb = costs(a), costs(b)
    diff = {k: cb.get(k, 0) - ca.get(k, 0) for k in set(ca) | set(cb)}
    steps = collections.Counter()
    lib = sorted({addr for (fn, addr), c in diff.items() if c and fn.startswith(LIB)})
    for (fn, addr), c in diff.items():
        if c and not fn.startswith(LIB):
            steps["caller"] += c
    chains = {}
    if lib:
        # `-a`: each address's frames (function, file:line pairs) come after a line naming it.
        text = subprocess.run(
            ["addr2line", "-a", "-i", "-f", "-e", binary] + [hex(x) for x in lib], capture_output=True, text=True
        ).stdout.splitlines()
        names = subprocess.run(
            ["swift", "demangle", "--simplified"], input="\n".join(text) + "\n", capture_output=True, text=True
        ).stdout.splitlines()
        current = None
        i = 0
        while i < len(text):
            if re.match(r"0x[0-9a-f]+$", text[i]):
                current = int(text[i], 16)
                chains[current] = []
                i += 1
            else:
                chains[current].append((names[i], text[i + 1]))
                i += 2
    marks = step_lines(sources + "/MappedCache/Engine/Reader.swift")
    ops = mnemonics(binary, lib)
    for (fn, addr), c in diff.items():
        if c and fn.startswith(LIB):
            steps[classify(chains.get(addr, []), marks, ops.get(addr))] += c
    order = ["hash", "R1", "R2"] + [s for s, _ in RULES if s.startswith("R3")] + ["R5"]
    order += ["R6 hit bit, counters", "B1-B2 batch", "call", "caller"]
    total = 0
    if len(sys.argv) > 6:
        print(one_line(sys.argv[6], steps, n))
        return
    for s in order + sorted(set(steps) - set(order)):
        v = steps.get(s, 0) / n
        total += v
        if v:
            print(f"{s:24} {v:6.1f}")
    print(f"{'total':24} {total:6.1f}")


if __name__ == "__main__":
    main()
