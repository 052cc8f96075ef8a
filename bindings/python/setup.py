"""Builds mappedcache's C extension against libmappedcache.so (MappedCache's C ABI).

The library comes from, in order:
  1. MAPPEDCACHE_LIB_DIR: a directory holding a built libmappedcache.so (for example
     the package's .build/debug or .build/release after `swift build`);
  2. the MappedCache checkout this directory sits in (bindings/python): built there with
     `swift build -c release --product mappedcache` (MAPPEDCACHE_SWIFT_CONFIG=debug for a
     debug build).
The library is copied into the installed package, next to the extension, which finds it
there (its run path is $ORIGIN); the library itself finds the Swift runtime through the
run path the Swift toolchain gave it, so keep that toolchain installed.
"""

import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
HEADER_DIR = os.environ.get("MAPPEDCACHE_INCLUDE_DIR") or os.path.join(REPO, "Sources", "CMappedCacheABI", "include")


def library_dir() -> str:
    given = os.environ.get("MAPPEDCACHE_LIB_DIR")
    if given:
        # A relative directory is taken from the checkout's root (pip builds elsewhere).
        for candidate in (given, os.path.join(REPO, given)):
            if os.path.exists(os.path.join(candidate, "libmappedcache.so")):
                return os.path.abspath(candidate)
        raise SystemExit(f"MAPPEDCACHE_LIB_DIR={given} holds no libmappedcache.so")
    if not os.path.exists(os.path.join(REPO, "Package.swift")):
        raise SystemExit(
            "mappedcache: no MappedCache checkout around bindings/python; set MAPPEDCACHE_LIB_DIR to the directory "
            "of a built libmappedcache.so (and MAPPEDCACHE_INCLUDE_DIR to that of mappedcache.h)"
        )
    config = os.environ.get("MAPPEDCACHE_SWIFT_CONFIG", "release")
    command = ["swift", "build", "-c", config, "--product", "mappedcache", "--package-path", REPO]
    print("mappedcache: building the library:", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    out = subprocess.run(
        ["swift", "build", "-c", config, "--show-bin-path", "--package-path", REPO],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


class BuildWithLibrary(build_ext):
    def run(self):
        lib = library_dir()
        for ext in self.extensions:
            ext.library_dirs.append(lib)
        super().run()
        # The library beside the extension, in the build tree and (for in-place builds)
        # in the source tree: the extension's run path is $ORIGIN.
        for ext in self.extensions:
            target_dir = os.path.dirname(self.get_ext_fullpath(ext.name))
            os.makedirs(target_dir, exist_ok=True)
            shutil.copy2(os.path.join(lib, "libmappedcache.so"), os.path.join(target_dir, "libmappedcache.so"))


setup(
    ext_modules=[
        Extension(
            "mappedcache._mappedcache",
            sources=["src/mappedcache/_mappedcache.c"],
            include_dirs=[HEADER_DIR],
            libraries=["mappedcache"],
            runtime_library_dirs=["$ORIGIN"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-missing-field-initializers"],
        )
    ],
    cmdclass={"build_ext": BuildWithLibrary},
)
