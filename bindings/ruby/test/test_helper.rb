# frozen_string_literal: true

# Shared helpers for the gem's tests: temporary cache paths, the package's Swift binaries
# (mc-test-helper, mapped-cache), which the interop and chaos tests run beside Ruby, and
# the Python package. With MAPPEDCACHE_REQUIRE_ALL=1 (.ci/ruby.sh sets it) a test that
# would skip for something missing fails instead.
require "minitest/autorun"
require "securerandom"
require "open3"
require "rbconfig"
require "mappedcache"

module TestSupport
  REPO = File.expand_path("../../..", __dir__)
  REQUIRE_ALL = ENV["MAPPEDCACHE_REQUIRE_ALL"] == "1"
  WORKER = File.join(__dir__, "ruby_worker.rb")

  module_function

  def temp_path(tag)
    "/dev/shm/mcrbtest-#{tag[0, 40]}-#{Process.pid}-#{SecureRandom.hex(4)}.mcache"
  end

  # Skips the test, or fails it when every test must run.
  def unavailable(test, reason)
    raise Minitest::Assertion, "required but unavailable: #{reason}" if REQUIRE_ALL

    test.skip(reason)
  end

  # A binary of the package's Swift build ($MAPPEDCACHE_SWIFT_BIN_DIR, else .build/debug
  # or .build/release of the checkout), or nil.
  def swift_binary(name)
    dirs = [ENV.fetch("MAPPEDCACHE_SWIFT_BIN_DIR", nil)] + %w[debug release].map { |c| File.join(REPO, ".build", c) }
    dirs.compact.map { |d| File.join(d, name) }.find { |p| File.executable?(p) }
  end

  # The command that runs this gem's worker script in another Ruby process.
  def ruby_worker(*args)
    [RbConfig.ruby, WORKER, *args.map(&:to_s)]
  end
end

# A fresh path per test (@path), removed afterwards; every cache the test opened through
# open_cache is verified clean, then closed.
class CacheTestCase < Minitest::Test
  def setup
    @path = TestSupport.temp_path(name.sub(/\Atest_/, ""))
    @opened = []
  end

  def teardown
    @opened.each do |c|
      next if c.closed?

      assert_equal 0, c.verify, "#{@path} verifies clean" if passed?
      c.close
    end
    Dir.glob("#{@path}*").each { |p| File.unlink(p) }
  end

  def open_cache(path = @path, **options)
    MappedCache::Cache.new(path, capacity: 4 << 20, **options).tap { |c| @opened << c }
  end

  def swift_binary(name)
    TestSupport.swift_binary(name) ||
      TestSupport.unavailable(self, "#{name} is not built (run `swift build` in #{TestSupport::REPO}, or set MAPPEDCACHE_SWIFT_BIN_DIR)")
  end

  def run_command(*command, timeout: 60)
    out, err, status = Open3.capture3(*command)
    assert status.success?, "#{command.join(' ')} exited #{status.exitstatus}: #{err}"
    out
  end
end
