# frozen_string_literal: true

# Rails' own cache store behaviour tests (activesupport's test/cache/behaviors, the
# modules Rails includes in test/cache/stores/*_test.rb for FileStore and MemCacheStore)
# run against MappedCacheStore, plus this store's own: raw values, increment across
# processes, fork, namespaced clear, long and binary keys. The behaviours are not part of
# this repository: MAPPEDCACHE_RAILS_TESTS names activesupport's test directory
# (.ci/ruby.sh extracts it from Debian's rails source package into .build/).
require_relative "test_helper"
require "active_support"
require "active_support/test_case"
require "active_support/testing/method_call_assertions"
require "active_support/logger"
require "active_support/cache/mapped_cache_store"

RAILS_TESTS = File.expand_path(ENV.fetch("MAPPEDCACHE_RAILS_TESTS", File.join(TestSupport::REPO, ".build", "rails-tests", "activesupport", "test")))
RAILS_BEHAVIORS = File.exist?(File.join(RAILS_TESTS, "cache", "behaviors.rb"))
if RAILS_BEHAVIORS
  ActiveSupport::Deprecation.silenced = true if ActiveSupport::Deprecation.respond_to?(:silenced=)
  require File.join(RAILS_TESTS, "cache", "behaviors")
end

module MappedCacheStoreSetup
  include ActiveSupport::Testing::MethodCallAssertions

  def lookup_store(options = {})
    store = ActiveSupport::Cache.lookup_store(:mapped_cache_store, @path, { namespace: @namespace, capacity: 16 << 20 }.merge(options))
    @stores << store
    store
  end

  def setup
    @path = TestSupport.temp_path(name.sub(/\Atest_/, ""))
    @stores = []
    @namespace = "test-#{SecureRandom.hex}"
    @cache = lookup_store(expires_in: 60)
    @peek = lookup_store
    # Debug logging sends every call down Rails' general path; info keeps the fast one in play.
    @cache.logger = ActiveSupport::Logger.new(File::NULL, level: :info)
  end

  def teardown
    assert_equal 0, @cache.cache.verify, "the file verifies clean" if passed?
    @stores.each { |s| s.cache.close }
    File.unlink(@path) if File.exist?(@path)
  end
end

if RAILS_BEHAVIORS
  # Included as Rails' FileStoreTest and MemCacheStoreTest include them.
  class MappedCacheStoreBehaviorTest < ActiveSupport::TestCase
    include MappedCacheStoreSetup
    include CacheStoreBehavior
    include CacheStoreVersionBehavior
    include CacheStoreCoderBehavior
    include LocalCacheBehavior
    include CacheDeleteMatchedBehavior
    include CacheIncrementDecrementBehavior
    include CacheInstrumentationBehavior
    include EncodedKeyCacheBehavior
    include AutoloadingCacheBehavior

    # Not included, each for a reason that holds for any store over a local file:
    #   ConnectionPoolBehavior  tests a pool of connections to a server (pool_size,
    #                           pool_timeout); a mapped file has no connections.
    #   FailureSafetyBehavior   tests a store whose server is down (reads miss, writes
    #                           return false); a mapped file has no server to lose.
    EXCLUDED_BEHAVIORS = %w[ConnectionPoolBehavior FailureSafetyBehavior].freeze
  end
else
  class MappedCacheStoreBehaviorTest < Minitest::Test
    def test_rails_behaviors_are_present
      TestSupport.unavailable(self, "Rails' cache behaviour tests are not at #{RAILS_TESTS} " \
                                    "(run bindings/ruby/test/rails-tests.sh, or set MAPPEDCACHE_RAILS_TESTS)")
    end
  end
end

class MappedCacheStoreTest < ActiveSupport::TestCase
  include MappedCacheStoreSetup

  def test_config_convention_opens_the_store
    store = ActiveSupport::Cache.lookup_store(:mapped_cache_store, @path, { capacity: 8 << 20 })
    @stores << store
    assert_instance_of ActiveSupport::Cache::MappedCacheStore, store
    assert store.write("k", "v")
    assert_equal "v", store.read("k")
  end

  def test_raw_values_are_the_strings_other_languages_read
    cache = lookup_store(raw: true, namespace: nil)
    cache.write("foo", 2)
    assert_equal "2", cache.read("foo")
    assert_equal "2", cache.cache.get("foo")
    cache.write("m", Marshal.dump([]))
    assert_equal Marshal.dump([]), cache.read("m")
  end

  def test_increment_creates_and_expires_in
    assert_equal 5, @cache.increment("fresh", 5)
    assert_equal 4, @cache.decrement("fresh")
    @cache.increment("timed", 1, expires_in: 30)
    ttl = @cache.cache.ttl("#{@namespace}:timed")
    assert ttl.between?(25, 30), "ttl #{ttl}"
  end

  def test_increment_of_a_marshalled_entry_is_nil
    @cache.write("object", { a: 1 })
    assert_nil @cache.increment("object")
    assert_equal({ a: 1 }, @cache.read("object"))
  end

  def test_unless_exist_adds_once
    assert @cache.write("once", "first", unless_exist: true)
    assert_not @cache.write("once", "second", unless_exist: true)
    assert_equal "first", @cache.read("once")
  end

  def test_long_and_binary_keys_are_hashed_and_kept_apart
    long = "x" * 1000
    binary = "caf\xE9".b
    @cache.write(long, 1)
    @cache.write(long + "y", 2)
    @cache.write(binary, 3)
    @cache.write("caf\u00E9", 4)
    assert_equal [1, 2, 3, 4], [@cache.read(long), @cache.read(long + "y"), @cache.read(binary), @cache.read("caf\u00E9")]
    assert(@cache.cache.keys.all? { |k| k.bytesize <= @cache.cache.max_key_size })
  end

  def test_clear_with_a_namespace_keeps_other_namespaces
    other = lookup_store(namespace: "other")
    other.write("k", "kept")
    @cache.write("k", "gone")
    @cache.clear
    assert_nil @cache.read("k")
    assert_equal "kept", other.read("k")
  end

  def test_too_large_a_value_is_not_written_and_loses_nothing
    @cache.write("small", "v")
    assert_not @cache.write("big", "x" * (@cache.cache.max_value_size + 1), compress: false)
    assert_nil @cache.read("big")
    assert_equal "v", @cache.read("small")
  end

  def test_cleanup_removes_expired_entries
    @cache.write("short", "v", expires_in: 0.05)
    sleep 0.1
    @cache.cleanup
    assert_equal 0, @cache.cache.keys.count { |k| k.end_with?(":short") }
  end

  def payload(name)
    @cache.cache.get_raw("#{@namespace}:#{name}")
  end

  def test_values_without_a_version_are_stored_without_an_entry
    store = ActiveSupport::Cache::MappedCacheStore
    @cache.write("text", "caf\u00E9", expires_in: nil)
    @cache.write("expiring", "soon")
    @cache.write("binary", "\xFF\x00".b, expires_in: nil)
    @cache.write("hash", { a: [1, "x"] }, expires_in: nil)
    @cache.write("versioned", "v1", version: "1")
    @cache.write("large", "0" * 4096)
    assert_equal "\x04\x08caf\u00E9".b + store::MARK_STRING, payload("text")
    assert payload("expiring").end_with?(store::MARK_STRING_EXPIRING)
    assert payload("binary").end_with?(store::MARK_MARSHAL)
    assert payload("hash").end_with?(store::MARK_MARSHAL)
    assert_not payload("versioned").end_with?(*store::MARKS.values.map(&:first)), "a versioned entry keeps Rails' format"
    assert_not payload("large").end_with?(*store::MARKS.values.map(&:first)), "a compressed entry keeps Rails' format"
    assert_equal ["caf\u00E9", Encoding::UTF_8], [@cache.read("text"), @cache.read("text").encoding]
    assert_equal ["\xFF\x00".b, Encoding::BINARY], [@cache.read("binary"), @cache.read("binary").encoding]
    assert_equal [{ a: [1, "x"] }, "soon", "v1", "0" * 4096],
                 [@cache.read("hash"), @cache.read("expiring"), @cache.read("versioned", version: "1"), @cache.read("large")]
    assert_nil @cache.read("versioned", version: "2")
  end

  def test_an_expired_value_reads_nil_and_goes_whichever_path_reads_it
    @cache.write("fast", "v", expires_in: 10)
    @cache.write("multi", "v", expires_in: 10)
    @cache.write("local", "v", expires_in: 10)
    Time.stub(:now, Time.now + 11) do
      assert_nil @cache.read("fast")
      assert_equal({}, @cache.read_multi("multi"))
      @cache.with_local_cache { assert_nil @cache.read("local") }
      assert_equal "computed", @cache.fetch("fast") { "computed" }
    end
    assert_nil payload("local"), "an expired entry read is deleted"
    assert_equal "computed", @cache.read("fast")
  end

  def test_race_condition_ttl_serves_a_stale_value_of_the_stores_format
    @cache.write("report", "old", expires_in: 10, race_condition_ttl: 5)
    Time.stub(:now, Time.now + 12) do
      assert_equal "new", @cache.fetch("report", race_condition_ttl: 5) { "new" }
    end
    assert_equal "new", @cache.read("report")
  end

  def test_a_hit_is_still_instrumented_when_something_listens
    events = []
    subscriber = ActiveSupport::Notifications.subscribe(/cache_(read|fetch_hit|read_multi)/) { |*args| events << args }
    @cache.write("k", "v")
    assert_equal "v", @cache.read("k")
    assert_equal "v", @cache.fetch("k") { "x" }
    assert_equal({ "k" => "v" }, @cache.read_multi("k"))
    names = events.map(&:first)
    assert_equal %w[cache_read.active_support cache_read.active_support cache_fetch_hit.active_support
                    cache_read_multi.active_support], names
    assert_equal true, events.first.last[:hit]
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  def test_fetch_and_read_multi_hits_and_misses
    calls = 0
    assert_equal "v", @cache.fetch("f") { calls += 1; "v" }
    assert_equal "v", @cache.fetch("f") { calls += 1; "w" }
    assert_equal 1, calls
    @cache.write("nil", nil)
    assert_nil @cache.fetch("nil") { flunk "a stored nil is a hit" }
    assert_equal({ "f" => "v", "nil" => nil }, @cache.read_multi("f", "missing", "nil", "f"))
  end

  def test_a_raw_value_that_looks_like_the_stores_format_reads_as_it_is
    cache = lookup_store(raw: true, namespace: nil)
    looks = "\x04\x08\x04not marshal".b + ActiveSupport::Cache::MappedCacheStore::MARK_MARSHAL
    cache.write("looks", looks)
    assert_equal looks, cache.read("looks")
    assert_equal({ "looks" => looks }, cache.read_multi("looks"))
  end

  def test_a_hit_makes_no_entry
    # A notifier of its own: what other tests left subscribed would take Rails' path.
    notifier = ActiveSupport::Notifications.notifier
    ActiveSupport::Notifications.notifier = ActiveSupport::Notifications::Fanout.new
    @cache.write("s", "v")
    @cache.write("h", { a: 1 })
    assert_not_called(ActiveSupport::Cache::Entry, :new) do
      assert_equal "v", @cache.read("s")
      assert_equal({ a: 1 }, @cache.fetch("h") { flunk })
      assert_equal({ "s" => "v", "h" => { a: 1 } }, @cache.read_multi("s", "h"))
    end
  ensure
    ActiveSupport::Notifications.notifier = notifier
  end

  def test_a_store_opened_before_fork_works_in_every_worker
    @cache.write("parent", "p")
    pids = 3.times.map do |i|
      fork do
        ok = @cache.read("parent") == "p" && @cache.write("child#{i}", i) && @cache.increment("forks") >= 1
        exit!(ok ? 0 : 1)
      end
    end
    statuses = pids.map { |pid| Process.wait2(pid)[1] }
    assert statuses.all?(&:success?), statuses.inspect
    assert_equal [0, 1, 2], 3.times.map { |i| @cache.read("child#{i}") }
    assert_equal 3, @cache.read("forks", raw: true).to_i
  end

  def test_four_processes_increment_one_key_4000_times
    @cache.cache.delete("#{@namespace}:hits")
    pids = 4.times.map do
      fork do
        1000.times { @cache.increment("hits") }
        exit!(0)
      end
    end
    assert pids.map { |pid| Process.wait2(pid)[1] }.all?(&:success?)
    assert_equal 4000, @cache.read("hits", raw: true).to_i
  end
end
