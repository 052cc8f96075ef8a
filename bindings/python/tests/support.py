"""Shared helpers for the Python package's tests: temporary cache paths and the
package's Swift binaries (mc-test-helper), which the interop and chaos tests run beside
Python. With MAPPEDCACHE_REQUIRE_ALL=1 (.ci/run sets it) a test that would skip for a
missing binary or module fails instead."""

import os
import shutil
import unittest
import uuid

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
REQUIRE_ALL = os.environ.get("MAPPEDCACHE_REQUIRE_ALL") == "1"


def temp_path(tag: str) -> str:
    return f"/dev/shm/mcpytest-{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}.mcache"


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def unavailable(reason: str) -> None:
    """Skips the test, or fails it when every test must run."""
    if REQUIRE_ALL:
        raise AssertionError(f"required but unavailable: {reason}")
    raise unittest.SkipTest(reason)


def swift_binary(name: str) -> str:
    """A binary of the package's Swift build ($MAPPEDCACHE_SWIFT_BIN_DIR, else .build/debug
    or .build/release of the checkout)."""
    dirs = [os.environ.get("MAPPEDCACHE_SWIFT_BIN_DIR", "")]
    dirs += [os.path.join(REPO, ".build", c) for c in ("debug", "release")]
    for d in dirs:
        p = os.path.join(d, name)
        if d and os.access(p, os.X_OK):
            return p
    unavailable(f"{name} is not built (run `swift build` in {REPO}, or set MAPPEDCACHE_SWIFT_BIN_DIR)")
    return ""


def fork(body, *args) -> int:
    """Runs body(*args) in a forked child, which exits with the code body returns (9 when it
    raises) and never returns into the test: the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 9
        try:
            code = body(*args)
        finally:
            os._exit(code)
    return pid


def wait_statuses(pids) -> list:
    """Waits for each child in turn: their wait statuses (0 for a child that exited 0)."""
    return [os.waitpid(pid, 0)[1] for pid in pids]


class CacheTest(unittest.TestCase):
    """Gives each test a fresh path (self.path), removed afterwards."""

    def setUp(self):
        self.path = temp_path(self.id().rsplit(".", 1)[-1][:40])
        self.addCleanup(remove, self.path)
