#!/usr/bin/env python3
"""check-layout.py [MANIFEST.json] - fails when a product of the package depends, directly
or through other targets, on a target under Tests/ (what only the tests may use), or when
a product's target lives there itself.

Reads the manifest as `swift package dump-package` prints it (run here when no file is
given). docs/layout.md describes the layout this keeps.
"""
import json
import subprocess
import sys


def load(argv):
    if len(argv) > 1:
        with open(argv[1]) as f:
            return json.load(f)
    out = subprocess.run(["swift", "package", "dump-package"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def dependency_names(target):
    """The names of the targets and products a target depends on."""
    names = []
    for dep in target.get("dependencies", []):
        for kind in ("byName", "target", "product"):
            if kind in dep and dep[kind]:
                names.append(dep[kind][0])
    return names


def main(argv):
    manifest = load(argv)
    targets = {t["name"]: t for t in manifest["targets"]}
    products = {p["name"]: p for p in manifest["products"]}
    failures = []
    for product in manifest["products"]:
        seen = set()
        stack = [(name, [name]) for name in product["targets"]]
        while stack:
            name, chain = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name not in targets:
                # A product of this package named as a dependency: its targets count too.
                stack += [(t, chain + [t]) for t in products.get(name, {}).get("targets", [])]
                continue
            path = targets[name].get("path") or ""
            if path == "Tests" or path.startswith("Tests/"):
                failures.append("product %s depends on %s (%s): %s" % (product["name"], name, path, " -> ".join(chain)))
            stack += [(d, chain + [d]) for d in dependency_names(targets[name])]
    for f in failures:
        print("check-layout: " + f, file=sys.stderr)
    if failures:
        return 1
    print("check-layout: no product depends on a target under Tests/ (%d products)" % len(manifest["products"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
