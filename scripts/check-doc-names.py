#!/usr/bin/env python3
"""Fails when the documentation names, in backticks, something the tree does not have.

Scanned: DESIGN.md, README.md, docs/*.md and bindings/*/README.md. Not scanned:
docs/history/ and CHANGELOG.md, which keep the names of their day, and the DocC
articles, whose symbol links the documentation build (scripts/docs.sh) checks.

Only spans that look like names of this project's code are checked; everything else in
backticks (shell commands, options, values, environment variables, C constants, other
projects' calls) and fenced code blocks are left alone. For a span of one word:

- a path: it has a `/` or ends in a known extension (.swift .md .py .sh .c .h ...). It
  must exist from the repository's root, from the document's folder, or as the tail of
  a path in the tree (`Engine/Writer.swift`, `FreeLists.swift`, `API/`). A glob must
  match a file; a placeholder (`<target>`) stands for any name. Paths outside the tree
  (`/dev/shm`, `../shared/...`) and build products (`.build/...`) are skipped.
- `Type`, `Type.member`, `Type.member(label:)`, `Type(label:)`: a type is a word that
  starts with a capital and has a lower-case letter (`WriteLock`, not `MAP_SHARED` nor
  `B`). It must be declared (Swift `struct`, `enum`, `class`, `protocol`, `actor`,
  `typealias`, `extension`; a Python, JavaScript, Ruby or PHP `class` or `module`; a C
  `struct` or `typedef`; a module's folder), and the member in a file that declares or extends the type (or a Python base).
- `member(label:other:)` and bare `lowerCamelCase` names (a capital after the first
  letter, no `_`): declared somewhere (a Swift `func`, `var`, `let`, `case`, `init`; a
  Python `def`; a shell function; a binding's JavaScript, Ruby or PHP function or
  method, or one its C extension registers).
- `mc_name`, `mc_name()`: a C function, type or macro (the C ABI).

Labels must be among the declaration's, in order: the project names an overload by the
labels that tell it apart (`writeRecord(over:)`) and leaves out the lock's `_ held`.

In a span of several words (a command), the words that start with a folder of the tree
(`scripts/bench.sh`, `Sources/...`) are checked as paths. Names the tree cannot hold
(Swift's, Python's, other projects') are listed in scripts/doc-names-allowlist.txt.

Usage: check-doc-names.py [--root DIR] [--allowlist FILE] [FILE.md ...]
Exits 1 when a name is stale, printing each as `doc:line: `name`: why`.
"""

import argparse
import fnmatch
import glob
import os
import re
import sys

CODE_DIRS = ["Sources", "Tests", "Stress", "Fuzz", "bindings", "scripts"]
TOP_FOLDERS = ("Sources/", "Tests/", "Stress/", "Fuzz/", "bindings/", "scripts/",
               "docs/", ".ci/")
EXTENSIONS = (".swift", ".md", ".py", ".sh", ".c", ".h", ".toml", ".json", ".txt",
              ".yml", ".yaml", ".cfg", ".ini", ".js", ".rb", ".php", ".html")
SKIP_DIRS = {".build", ".git", "__pycache__", "node_modules", "vendor", ".venv"}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
NAME_RE = re.compile(
    r"^(?P<dot>\.)?(?P<path>" + IDENT + r"(?:\." + IDENT + r")*)"
    r"(?:<[^<>]*>)?(?P<args>\([^()]*\))?$")
LABELS_RE = re.compile(r"^\((?:(?:" + IDENT + r"|_):)*\)$")


def is_type_name(word):
    return word[0].isupper() and any(c.islower() for c in word)


def is_lower_camel(word):
    return (word[0].islower() and "_" not in word
            and any(c.isupper() for c in word[1:]))


class Tree:
    """What the repository declares: files, folders, and names by kind."""

    def __init__(self, root):
        self.root = root
        self.files = []
        self.dirs = set()
        for top, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            rel = os.path.relpath(top, root)
            if rel != ".":
                self.dirs.add(rel.replace(os.sep, "/"))
            for f in filenames:
                self.files.append(os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/"))
        self.file_set = set(self.files)
        self.types = {}  # type name -> set of files declaring or extending it
        self.members = {}  # member name -> set of files declaring it
        self.labels = {}  # function name -> [(its [(label, defaulted)], file)], one a declaration
        self.c_names = set()  # C functions (declared or called) and macros
        self.bases = {}  # Python class -> its base classes' names
        for d in self.dirs:
            if d.count("/") == 1 and d.split("/")[0] in ("Sources", "Tests"):
                self.types.setdefault(d.split("/")[1], set())  # a module
        for path in self.files:
            if not path.split("/")[0] in CODE_DIRS:
                continue
            full = os.path.join(root, path)
            if path.endswith(".swift"):
                self._swift(path, read(full))
            elif path.endswith((".py", ".pyi")):
                self._python(path, read(full))
            elif path.endswith((".c", ".h")):
                self._c(path, read(full))
            elif path.endswith(".sh"):
                for m in re.finditer(r"^\s*(?:function\s+)?(" + IDENT + r")\s*\(\)", read(full), re.M):
                    self._member(m.group(1), path)
            elif path.endswith((".js", ".mjs", ".cjs", ".ts", ".rb", ".php")):
                self._script(path, read(full))

    def type_files(self, name, seen=()):
        """The files that declare or extend a type, and its Python base classes'."""
        files = set(self.types.get(name, ()))
        for base in self.bases.get(name, ()):
            if base not in seen:
                files |= self.type_files(base, seen + (name,))
        return files

    def _member(self, name, path):
        self.members.setdefault(name, set()).add(path)

    def _swift(self, path, text):
        text = re.sub(r"//[^\n]*", "", text)
        for m in re.finditer(r"\b(?:struct|enum|class|protocol|actor|typealias|extension)\s+"
                             r"(?:" + IDENT + r"\.)*(" + IDENT + ")", text):
            self.types.setdefault(m.group(1), set()).add(path)
        for m in re.finditer(r"\b(?:var|let)\s+(" + IDENT + ")", text):
            self._member(m.group(1), path)
        for m in re.finditer(r"\bcase\s+((?:\.?" + IDENT + r"(?:\([^()]*\))?(?:\s*=\s*[^,\n]+)?\s*,\s*)*"
                             r"\.?" + IDENT + ")", text):
            for name in re.findall(r"(?:^|,)\s*\.?(" + IDENT + ")", m.group(1)):
                self._member(name, path)
        for m in re.finditer(r"\bcase\s+(" + IDENT + r")\(", text):
            self.labels.setdefault(m.group(1), []).append((swift_labels(balanced(text, m.end() - 1)), path))
        for m in re.finditer(r"\b(?:func\s+(" + IDENT + r")|(init|subscript))\s*(?:<[^{}]*?>)?\s*\(", text):
            name = m.group(1) or m.group(2)
            self._member(name, path)
            params = balanced(text, m.end() - 1)
            self.labels.setdefault(name, []).append((swift_labels(params), path))

    def _python(self, path, text):
        for m in re.finditer(r"^\s*class\s+(" + IDENT + r")(?:\(([^)]*)\))?", text, re.M):
            self.types.setdefault(m.group(1), set()).add(path)
            for base in re.findall(IDENT + r"(?:\." + IDENT + ")*", m.group(2) or ""):
                self.bases.setdefault(m.group(1), set()).add(base.split(".")[-1])
        for m in re.finditer(r"^\s*(?:async\s+)?def\s+(" + IDENT + ")", text, re.M):
            self._member(m.group(1), path)
        for m in re.finditer(r"^\s*(?:self\.)?(" + IDENT + r")\s*(?::[^=\n]*)?=", text, re.M):
            self._member(m.group(1), path)

    def _script(self, path, text):
        """A binding's JavaScript, Ruby or PHP: its classes, modules and functions."""
        for m in re.finditer(r"\b(?:class|module|interface|trait)\s+(?:" + IDENT + r"(?:::|\\))*(" + IDENT + ")", text):
            self.types.setdefault(m.group(1), set()).add(path)
        for m in re.finditer(r"\b(?:function|def)\s+(?:self\.)?(" + IDENT + ")", text):
            self._member(m.group(1), path)
        for m in re.finditer(r"^\s*(?:static\s+|async\s+|get\s+|set\s+)*(" + IDENT + r")\s*\([^()]*\)\s*\{", text, re.M):
            self._member(m.group(1), path)
        for m in re.finditer(r"\b(?:exports|prototype)\.(" + IDENT + ")", text):
            self._member(m.group(1), path)

    def _c(self, path, text):
        # Names a C extension gives its language: method tables ({"name", ...}), Ruby's
        # rb_define_*, PHP's PHP_FUNCTION and PHP_METHOD.
        for m in re.finditer(r"\{\s*\"(" + IDENT + r")\"|\brb_define_\w+\([^\"]*\"(" + IDENT + r")\"", text):
            self._member(m.group(1) or m.group(2), path)
        for m in re.finditer(r"\brb_define_(?:class|module)\w*\([^\"]*\"(" + IDENT + r")\"", text):
            self.types.setdefault(m.group(1), set()).add(path)
        for m in re.finditer(r"\bPHP_(?:FUNCTION|METHOD)\((?:\s*" + IDENT + r"\s*,)?\s*(" + IDENT + r")\s*\)", text):
            self._member(m.group(1), path)
        for m in re.finditer(r"#\s*define\s+(" + IDENT + ")", text):
            self.c_names.add(m.group(1))
        for m in re.finditer(r"\b(" + IDENT + r")\s*\(", text):
            self.c_names.add(m.group(1))
        for m in re.finditer(r"\b(?:struct|enum|union)\s+(" + IDENT + ")", text):
            self.types.setdefault(m.group(1), set()).add(path)
        for m in re.finditer(r"\}\s*(" + IDENT + r")\s*;", text):
            self.types.setdefault(m.group(1), set()).add(path)

    def path_exists(self, span, doc_dir):
        if span.startswith(("/", "~", "../", ".build", "http:", "https:")):
            return True
        span = re.sub(r"<[^<>]*>", "*", span)  # a placeholder: `Fuzz/corpus/<target>/`
        p = span.rstrip("/")
        if not p or p == ".":
            return True
        for base in ("", doc_dir):
            cand = os.path.normpath(os.path.join(base, p)).replace(os.sep, "/")
            if any(c in cand for c in "*?["):
                if glob.glob(os.path.join(self.root, cand)):
                    return True
            elif cand in self.file_set or cand in self.dirs:
                return True
        if p.startswith("./"):
            p = p[2:]
        pattern = "*/" + p if not any(c in p for c in "*?[") else "*" + p
        if span.endswith("/"):
            return any(d == p or d.endswith("/" + p) for d in self.dirs)
        return (any(f.endswith("/" + p) or f == p for f in self.files)
                or any(d.endswith("/" + p) for d in self.dirs)
                or any(fnmatch.fnmatch(f, pattern) for f in self.files))


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def balanced(text, start):
    depth = 0
    for i in range(start, min(len(text), start + 4000)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return ""


def split_top(params):
    parts, depth, cur = [], 0, ""
    for c in params:
        if c in "([<{":
            depth += 1
        elif c in ")]>}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur)
    return parts


def swift_labels(params):
    out = []
    for p in split_top(params):
        head = p.split(":", 1)[0].strip()
        words = [w for w in head.split() if not w.startswith("@")]
        if not words:
            continue
        out.append((words[0], "=" in p.split(":", 1)[-1]))
    return out


def labels_fit(wanted, declared):
    """True when `wanted` are some of the declared labels, in order.

    The project names an overload by the labels that tell it apart (`writeRecord(over:)`)
    and leaves out the lock's witness (`_ held`), so a subset in order fits."""
    i = 0
    for label, _ in declared:
        if i < len(wanted) and wanted[i] == label:
            i += 1
    return i == len(wanted)


def spans(text):
    """Backticked spans outside fenced code blocks, with their line numbers."""
    out, fenced, para, para_line = [], False, [], 0
    lines = text.split("\n")

    def flush():
        joined = "\n".join(para)
        for m in re.finditer(r"(`+)(.+?)\1", joined, re.S):
            line = para_line + joined.count("\n", 0, m.start())
            out.append((line, m.group(2).strip()))

    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith(("```", "~~~")):
            flush()
            para = []
            fenced = not fenced
            continue
        if fenced:
            continue
        if not line.strip():
            flush()
            para = []
            continue
        if not para:
            para_line = n
        para.append(line)
    flush()
    return out


class Checker:
    def __init__(self, tree, allowed):
        self.tree = tree
        self.allowed = allowed

    def problem(self, span, doc_dir):
        """None when the span is fine or not ours to check; else why it is stale."""
        if span in self.allowed:
            return None
        words = span.split()
        if len(words) > 1:
            for w in words:
                w = w.strip("\"'(),;").split("=")[-1]
                if w.startswith(TOP_FOLDERS) and not self.tree.path_exists(w, doc_dir):
                    return "no such path: " + w
            return None
        if span.startswith(("-", "@", "$", "#")) or "=" in span or "://" in span:
            return None
        m = NAME_RE.match(span)
        looks_path = "/" in span or span.endswith(EXTENSIONS)
        if looks_path and not (m and m.group("args")):
            return None if self.tree.path_exists(span, doc_dir) else "no such file or folder"
        if not m:
            return None
        parts = m.group("path").split(".")
        args = m.group("args")
        labels = None
        if args is not None:
            if LABELS_RE.match(args.replace(" ", "")):
                labels = [l for l in args[1:-1].replace(" ", "").split(":") if l]
            elif not is_type_name(parts[-1]):
                return None  # a call with arguments: a snippet
        if len(parts) == 1 and m.group("dot") is None:
            return self.single(parts[0], labels, args)
        if m.group("dot") is not None and len(parts) == 1:
            return self.member(None, parts[0], labels)
        if not is_type_name(parts[0]) or parts[0] in self.allowed:
            return None
        return self.qualified(parts, labels)

    def single(self, name, labels, args):
        t = self.tree
        if name.startswith("mc_"):
            return None if name in t.c_names or name in t.types else "no C function, type or macro " + name
        if is_type_name(name) and (args is None or labels is None):
            return None if name in t.types or name in t.c_names else "no type " + name
        if is_type_name(name):
            if name not in t.types:
                return "no type " + name
            inits = [l for l, path in t.labels.get("init", []) if path in t.types[name]]
            if not inits or any(labels_fit(labels, sig) for sig in inits):
                return None
            return "no %s.init(%s)" % (name, "".join(l + ":" for l in labels))
        if labels is not None and (is_lower_camel(name) or labels or name in t.members):
            return self.member(None, name, labels)
        if is_lower_camel(name) and args is None:
            return self.member(None, name, None)
        return None

    def qualified(self, parts, labels):
        t = self.tree
        owner = parts[0]
        if owner not in t.types:
            return "no type " + owner
        files = t.type_files(owner)
        for i, name in enumerate(parts[1:], 1):
            last = i == len(parts) - 1
            if not last and is_type_name(name) and name in t.types:
                files = t.types[name] | files
                continue
            why = self.member(files, name, labels if last else None)
            if why:
                return why + " in " + ".".join(parts[:i])
        return None

    def member(self, files, name, labels):
        t = self.tree
        if name in self.allowed:
            return None
        declared = t.members.get(name, set())
        if name in t.types and labels is None:
            declared = declared | t.types[name]
        if files is not None:
            declared = declared & files if files else declared
        if not declared:
            return "no declaration of " + name
        if labels is None:
            return None
        sigs = [l for l, path in t.labels.get(name, []) if files is None or not files or path in files]
        if any(labels_fit(labels, sig) for sig in sigs):
            return None
        if not sigs and name in t.c_names | t.members.keys() and not labels:
            return None
        return "no %s(%s) with those labels" % (name, "".join(l + ":" for l in labels))


def documents(root):
    found = ["DESIGN.md", "README.md"]
    found += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    found += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "bindings", "*", "README.md")))
    return [f for f in found if os.path.isfile(os.path.join(root, f))]


def load_allowlist(path):
    names = set()
    if os.path.isfile(path):
        for line in read(path).splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(line)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--allowlist", default=None)
    ap.add_argument("docs", nargs="*")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    allowed = load_allowlist(a.allowlist or os.path.join(root, "scripts", "doc-names-allowlist.txt"))
    checker = Checker(Tree(root), allowed)
    stale = 0
    checked = 0
    docs = a.docs or documents(root)
    for doc in docs:
        doc_dir = os.path.dirname(doc)
        for line, span in spans(read(os.path.join(root, doc))):
            checked += 1
            why = checker.problem(span, doc_dir)
            if why:
                stale += 1
                print("%s:%d: `%s`: %s" % (doc, line, span, why))
    print("check-doc-names: %d documents, %d names in backticks, %d stale" % (len(docs), checked, stale))
    if stale:
        print("Rename each to what the code calls it now; a name of another project or language"
              " goes in scripts/doc-names-allowlist.txt.")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
