#!/usr/bin/env python3
"""long-functions.py [--max N] PATH... - lists Swift functions longer than N lines (60).

A function is a `func`, `init`, `deinit`, `subscript` or a computed property or accessor
(`var name: T {`): its length counts from its declaration's first line (attributes and
doc comments excluded) to its closing brace. Braces inside comments and string literals
(single-line, multi-line and raw, with interpolations) are skipped. A function that is a
table of data is let through by a `// long-functions: table` comment on the line before
its declaration. Exits 1 when any function is too long.
"""
import os
import re
import sys

DECL = re.compile(
    r"^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*(?:(?:public|package|internal|private|fileprivate|open|static|class|final|"
    r"override|mutating|nonmutating|nonisolated|convenience|required|dynamic|@inlinable|@usableFromInline)"
    r"(?:\([^)]*\))?\s+)*"
    r"(?:func\s|init[?!]?\s*[(<]|deinit\b|subscript\s*[(<]|(?:var|let)\s+\w+\s*:[^=]*\{\s*$|(?:get|set|didSet|willSet)\s*\{)")


def strip(source):
    """The source with comments and string contents blanked (newlines kept)."""
    out = []
    i, n = 0, len(source)
    # Each stack entry is the closing delimiter of a string being read ('"', '"""', or
    # with #s for raw strings), or ')' for an interpolation's parenthesis depth.
    stack = []
    depth = []  # parenthesis depth within each interpolation
    while i < n:
        c = source[i]
        if stack and stack[-1] != ")":
            close = stack[-1]
            if source.startswith(close, i):
                stack.pop()
                out.append(" " * len(close))
                i += len(close)
                continue
            raw = len(close) - len(close.rstrip("#"))
            esc = "\\" + "#" * raw
            if source.startswith(esc, i):
                if source.startswith(esc + "(", i):
                    stack.append(")")
                    depth.append(0)
                    out.append(" " * (len(esc) + 1))
                    i += len(esc) + 1
                    continue
                escaped = source[i + len(esc):i + len(esc) + 1]
                out.append(" " * (len(esc) + 1) if escaped != "\n" else " " * len(esc) + "\n")
                i += len(esc) + 1
                continue
            out.append("\n" if c == "\n" else " ")
            i += 1
            continue
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in source[i:j]))
            i = j
            continue
        m = re.match(r'(#*)("""|")', source[i:i + 40])
        if m:
            hashes, quote = m.group(1), m.group(2)
            stack.append(quote + hashes)
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
            continue
        if stack and stack[-1] == ")":
            if c == "(":
                depth[-1] += 1
            elif c == ")":
                if depth[-1] == 0:
                    stack.pop()
                    depth.pop()
                    out.append(" ")
                    i += 1
                    continue
                depth[-1] -= 1
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    text = open(path, encoding="utf-8").read()
    lines = text.split("\n")
    code = strip(text).split("\n")
    found = []
    for k, line in enumerate(code):
        if not DECL.match(line):
            continue
        # The body's opening brace: the first `{` from the declaration on (a protocol
        # requirement has none before the next declaration).
        depth, opened, end = 0, False, None
        for j in range(k, len(code)):
            for ch in code[j]:
                if ch == "{":
                    depth += 1
                    opened = True
                elif ch == "}":
                    depth -= 1
                    if opened and depth == 0:
                        end = j
                        break
            if end is not None:
                break
            if not opened and j > k and DECL.match(code[j]):
                break
            if not opened and j > k + 12:
                break
        if end is None:
            continue
        table = k > 0 and "long-functions: table" in lines[k - 1]
        found.append((end - k + 1, k + 1, lines[k].strip(), table))
    return found


def main(argv):
    limit = 60
    if argv[:1] == ["--max"]:
        limit, argv = int(argv[1]), argv[2:]
    status = 0
    for root in argv:
        paths = [root] if os.path.isfile(root) else sorted(
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".swift"))
        for p in paths:
            for length, line, decl, table in functions(p):
                if length > limit:
                    print("%s:%d: %d lines%s: %s" % (p, line, length, " (table, allowed)" if table else "", decl[:90]))
                    if not table:
                        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
