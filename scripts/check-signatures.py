#!/usr/bin/env python3
"""Checks the engine's signatures (DESIGN.md section 15): no function or initializer
takes more than --max parameters, and none takes a `Partition` and a `WriteLock.Held`
separately (a change to a partition takes its `LockedPartition`, which is both).

    python3 scripts/check-signatures.py                  # Sources/MappedCache/Engine, --max 6
    python3 scripts/check-signatures.py --max 6 DIR...   # other folders

Prints each offence as `path:line: name: why`, then `N functions checked, N offences`;
exits 1 when there is any.
"""

import argparse
import os
import re
import sys

DECL = re.compile(r"\b(func\s+(`?[A-Za-z_][A-Za-z0-9_]*`?|[^\s(<]+)|init[?!]?)\s*(<[^(]*>)?\s*\(")


def strip_comments_and_strings(text):
    """The text with comments and string literals blanked (newlines kept), so that a
    parenthesis or `func` inside them is not taken for code."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('"""', i):
            j = text.find('"""', i + 3)
            j = n if j < 0 else j + 3
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] not in '"\n':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parameter_list(code, start):
    """The text between the parenthesis at `start` and its match, and the parameters in
    it split at top-level commas (parentheses, brackets and generic arguments nest)."""
    depth = 0
    angle = 0
    params = []
    cur = []
    i = start + 1
    while i < len(code):
        c = code[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif c == "<" and i > 0 and (code[i - 1].isalnum() or code[i - 1] == "_"):
            angle += 1
        elif c == ">" and angle > 0 and code[i - 1] != "-":
            angle -= 1
        elif c == "," and depth == 0 and angle == 0:
            params.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    last = "".join(cur).strip()
    if last:
        params.append(last)
    return params


def parameter_type(param):
    """The type part of `label name: Type = default`."""
    if ":" not in param:
        return ""
    t = param.split(":", 1)[1]
    return t.split("=", 1)[0].strip()


def check_file(path, maximum):
    with open(path, encoding="utf-8") as f:
        code = strip_comments_and_strings(f.read())
    offences = []
    count = 0
    for m in DECL.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        name = m.group(2) or m.group(1)
        params = parameter_list(code, m.end() - 1)
        count += 1
        if len(params) > maximum:
            offences.append(f"{path}:{line}: {name}: {len(params)} parameters (at most {maximum})")
        types = [re.sub(r"\b(borrowing|consuming|inout|__owned|__shared)\s+", "", parameter_type(p)) for p in params]
        if any(t == "Partition" for t in types) and any(t in ("WriteLock.Held", "Held") for t in types):
            offences.append(
                f"{path}:{line}: {name}: takes a `Partition` and a `WriteLock.Held` apart (take a `LockedPartition`)"
            )
    return count, offences


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, default=6, help="most parameters a function may take")
    ap.add_argument("dirs", nargs="*", help="folders of Swift sources (default: Sources/MappedCache/Engine)")
    args = ap.parse_args()
    dirs = args.dirs or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Sources", "MappedCache", "Engine")]
    total = 0
    offences = []
    for d in dirs:
        if not os.path.isdir(d):
            print(f"error: no folder {d}", file=sys.stderr)
            return 2
        for root, _, files in os.walk(d):
            for name in sorted(files):
                if name.endswith(".swift"):
                    n, o = check_file(os.path.normpath(os.path.join(root, name)), args.max)
                    total += n
                    offences += o
    for o in offences:
        print(o.replace(os.getcwd() + os.sep, ""))
    print(f"{total} functions checked, {len(offences)} offences")
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main())
