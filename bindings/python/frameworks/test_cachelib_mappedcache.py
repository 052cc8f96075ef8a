"""cachelib's own backend tests (tests/common.py and its mixins, from cachelib's sdist)
against mappedcache.cachelib.MappedCache and mappedcache.flask.MappedCache, run as
cachelib runs them for FileSystemCache: .ci/python-frameworks.sh copies this file
into the sdist's tests/ and runs pytest there. Every mixin cachelib's backends share
runs whole; nothing is left out."""

import os
import uuid

import pytest
from clear import ClearTests
from common import CommonTests
from delete_many_with_prefix import DeleteManyWithPrefixTests
from has import HasTests
from serializer import SerializerTests

from cachelib.serializers import BaseSerializer
from mappedcache import Cache
from mappedcache.cachelib import MappedCache
from mappedcache.flask import MappedCache as FlaskMappedCache


class SillySerializer(BaseSerializer):
    """A pointless serializer only for testing (as cachelib's own tests have)"""

    def dumps(self, value):
        return repr(value).encode()

    def loads(self, bvalue):
        return eval(bvalue.decode())


class CustomSerializerCache(MappedCache):
    serializer = SillySerializer()


@pytest.fixture(autouse=True, params=[MappedCache, CustomSerializerCache, FlaskMappedCache])
def cache_factory(request):
    path = f"/dev/shm/mc-cachelib-{os.getpid()}-{uuid.uuid4().hex[:8]}.mcache"

    def _factory(self, *args, **kwargs):
        return request.param(path, 8 << 20, *args, **kwargs)

    request.cls.cache_factory = _factory
    yield
    if os.path.exists(path):
        os.unlink(path)


class TestMappedCache(CommonTests, ClearTests, HasTests, DeleteManyWithPrefixTests, SerializerTests):
    def test_has_is_true_for_a_stored_none(self):
        cache = self.cache_factory()
        assert cache.set("none", None)
        assert cache.has("none")
        assert cache.get("none") is None

    def test_negative_timeout_is_gone(self):
        cache = self.cache_factory()
        assert cache.set("k", "v")
        assert cache.set("k", "w", timeout=-1)
        assert not cache.has("k")
        assert cache.add("new", "v", timeout=-1)
        assert not cache.has("new")

    def test_zero_timeout_never_expires(self):
        cache = self.cache_factory(default_timeout=1)
        assert cache.set("forever", "v", timeout=0)
        assert cache.set("default", "v")
        assert cache.cache.ttl(cache._key("forever")) == float("inf")
        assert 0 < cache.cache.ttl(cache._key("default")) <= 1

    def test_long_keys_are_hashed(self):
        cache = self.cache_factory()
        long_key = "k" * 1000
        assert cache.set(long_key, "long")
        assert cache.get(long_key) == "long"
        assert cache.has(long_key)
        assert cache.delete(long_key)

    def test_clear_with_a_prefix_keeps_other_prefixes(self):
        cache = self.cache_factory(key_prefix="a:")
        other = self.cache_factory(key_prefix="b:")
        cache.set("k", 1)
        other.set("k", 2)
        assert cache.clear()
        assert not cache.has("k")
        assert other.get("k") == 2

    def test_inc_of_a_non_integer_is_a_type_error(self):
        cache = self.cache_factory()
        cache.set("text", "abc")
        with pytest.raises(TypeError):
            cache.inc("text")
        assert cache.get("text") == "abc"

    def test_ints_are_the_files_integers(self):
        cache = self.cache_factory(key_prefix="p:")
        cache.set("n", 41)
        assert Cache(cache.cache.path).get("p:n") == 41  # another handle reads an int

    def test_add_and_inc_are_atomic_across_processes(self):
        cache = self.cache_factory()
        pids = []
        for n in range(6):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    added = cache.add("once", n)  # of the six, one adds
                    for _ in range(200):
                        cache.inc("hits")
                    code = 10 if added else 0
                finally:
                    os._exit(code)
            pids.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        assert sorted(codes) == [0, 0, 0, 0, 0, 10]
        assert cache.get("once") == codes.index(10)
        assert cache.get("hits") == 1200

