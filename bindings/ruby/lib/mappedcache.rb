# frozen_string_literal: true

require_relative "mappedcache/version"
require_relative "mappedcache/mappedcache_ext"

# MappedCache for Ruby: one cache shared by every process of a host, through one
# memory-mapped file.
#
# Reads take no lock and make no system call; writes are serialised by a lock in the
# file that survives any writer being killed. The file is the one Swift's SharedCache,
# Python's mappedcache and the mapped-cache tool open, so every process shares entries,
# counters and get-or-compute claims:
#
#   require "mappedcache"
#   cache = MappedCache::Cache.new("/dev/shm/app.mcache", capacity: 64 << 20)
#   cache.set("greeting", "hello", ttl: 60)
#   cache.get("greeting")                          # => "hello" (binary)
#   cache.incr("hits")                             # 1, 2, 3 ... across every process
#   cache.fetch("report", ttl: 600) { build }      # computed once on the host
#
# A cache opened before fork (Puma's or Unicorn's preload_app!) works in every child:
# the child opens the file again for itself on first use.
module MappedCache
  # Marshal's format begins with these two bytes (its major and minor version).
  MARSHAL_MAGIC = "\x04\x08".b.freeze

  # A child of fork closes what it inherited at once (each handle reopens the file on its
  # next use), so that the parent's exit is seen by every other process at once.
  module ForkHook
    def _fork
      pid = super
      MappedCache.after_fork_child if pid.zero?
      pid
    end
  end
  Process.singleton_class.prepend(ForkHook) if Process.respond_to?(:_fork)

  # A cache shared by every process that opens the same file.
  #
  # +Cache.new(path, capacity: bytes)+ opens the cache at +path+, creating it with
  # +capacity+ bytes when it does not exist (an existing file keeps its own capacity and
  # limits). Use a path under /dev/shm; open one per process and share it between threads.
  #
  # Values, by the file's value type (+value_type+; by default the file's own, and
  # +create_value_type+, "bytes" unless told otherwise, for a new file):
  # * "bytes": Strings, stored as their bytes and read as binary (ASCII-8BIT) Strings
  #   (Swift's [UInt8] and Data, Python's bytes). With +marshal: true+ any other value is
  #   stored as Marshal data and read back as the object (Marshal.load runs for values
  #   that begin with Marshal's header, so open with marshal only files your own code
  #   writes); a String that itself begins with that header is marshalled too.
  # * "string": UTF-8 Strings (Swift's String, Python's str).
  # * "int64": Integers (Swift's Int counters).
  #
  # Keys are Strings (or Symbols) of 1 to max_key_size bytes (250 by default), passed to
  # the file unchanged whatever their encoding; the file's keys are UTF-8, so other bytes
  # raise InvalidKeyError. +ttl+ is seconds from now (nil or 0: never expires).
  class Cache
    include Enumerable

    attr_reader :path, :value_type, :max_key_size, :max_value_size, :partition_count

    def initialize(path, capacity: nil, value_type: nil, create_value_type: "bytes", marshal: false,
                   read_only: false, create: true, max_key_size: nil, max_value_size: nil,
                   average_entry_size: nil, max_processes: nil, mode: nil, partitions: nil,
                   shared_group: nil, verify_checksums: false, use_flock: false)
      numbers = { capacity:, max_key_size:, max_value_size:, average_entry_size:,
                  max_processes:, mode:, partitions: }
      numbers.each do |name, n|
        next if n.nil? || (n.is_a?(Integer) && n.positive? && (name == :capacity || n < 1 << 32))
        raise ArgumentError, "#{name} must be a positive Integer below 2**32 (capacity: any), not #{n.inspect}"
      end
      # mc_options' flags: MC_OPEN_READ_ONLY, _NO_CREATE, _VERIFY_CHECKSUMS, _FLOCK.
      flags = (read_only ? 0x01 : 0) | (create ? 0 : 0x02) | (verify_checksums ? 0x04 : 0) | (use_flock ? 0x20 : 0)
      @path = File.path(path)
      open_native(@path, numbers.values.map(&:to_i) + [flags], value_type&.to_s, create_value_type&.to_s,
                  shared_group&.to_s)
      read_info
      @marshal = marshal
      return unless marshal && @value_type != "bytes"

      close
      raise ArgumentError, "marshal: true needs a cache of bytes, not of #{@value_type}"
    end

    # Opens the cache, yields it and closes it.
    def self.open(path, **options)
      cache = new(path, **options)
      return cache unless block_given?

      begin
        yield cache
      ensure
        cache.close
      end
    end

    def inspect
      "#<#{self.class} #{@path} (#{closed? ? 'closed' : @value_type})>"
    end

    # dup and clone: a copy would share the handle, and closing either would close both.
    def initialize_copy(_other)
      raise TypeError, "a MappedCache::Cache cannot be copied: open its path again"
    end

    # The value of +key+, or nil when it is missing or expired.
    def get(key)
      value = get_raw(key)
      @marshal && value ? load(value) : value
    end
    alias [] get

    # Stores +value+ under +key+.
    def set(key, value, ttl: nil)
      write_raw(key, dump(value), ttl, 0)
    end

    def []=(key, value)
      write_raw(key, dump(value), nil, 0)
    end

    # Stores only when +key+ has no live entry (of several processes, exactly one
    # stores); true when it stored.
    def add(key, value, ttl: nil)
      write_raw(key, dump(value), ttl, 1)
    end

    # Stores only when +key+ has a live entry; true when it stored.
    def replace(key, value, ttl: nil)
      write_raw(key, dump(value), ttl, 2)
    end

    # Changes when +key+ expires, keeping its value; false when it is missing.
    def touch(key, ttl: nil)
      touch_native(key, ttl)
    end

    # Adds +by+ to the integer under +key+ atomically across every process and returns
    # the new value; a missing key starts from +initial+. A cache of bytes or strings
    # keeps the counter as ASCII decimal ("42"), as memcached and Redis do.
    def incr(key, by = 1, initial: 0, ttl: nil)
      incr_raw(key, by, initial, ttl)
    end

    # incr by -by.
    def decr(key, by = 1, initial: 0, ttl: nil)
      incr_raw(key, -by, initial, ttl)
    end

    # [value, version] for cas, or nil when missing.
    def gets(key)
      pair = gets_raw(key)
      pair && @marshal ? [load(pair[0]), pair[1]] : pair
    end

    # Stores +value+ only when the entry's version is still +version+ (from gets): true
    # when stored, false when another write came first or the entry is gone.
    def cas(key, value, version, ttl: nil)
      cas_raw(key, dump(value), ttl, version)
    end

    # Replaces the value of +key+ with the block's result for it, retrying when another
    # process wrote in between; nil (and no call) when +key+ is missing.
    def update(key, ttl: nil)
      loop do
        value, version = gets(key)
        return nil if version.nil?
        result = yield value
        return result if cas(key, result, version, ttl:)
      end
    end

    # The values of the keys that are present, as a Hash (keys as given).
    def get_multi(*keys)
      keys = keys.flatten
      values = get_many_raw(keys)
      found = {}
      keys.each_with_index do |key, j|
        value = values[j]
        found[key] = @marshal ? load(value) : value unless value.nil?
      end
      found
    end

    # Stores every pair of +pairs+ (a Hash) under one hold of the write lock.
    def set_multi(pairs, ttl: nil)
      set_many_raw(pairs.keys, pairs.values.map { |v| dump(v) }, ttl)
    end

    # The value of +key+; when it is missing, the block runs in exactly one process (or
    # thread) of the host, Ruby, Python or Swift alike, and its result is stored
    # (expiring after +ttl+ seconds) and returned while the other callers wait for it.
    # After +wait+ seconds a waiter computes the value itself as well. A computer that
    # dies, even by SIGKILL, releases its claim at once; an exception in the block
    # releases it (a waiter computes next) and propagates. With +serve_stale+, an expired
    # value still present is returned at once while another process recomputes it.
    def fetch(key, ttl: nil, wait: 30, serve_stale: false)
      raise ArgumentError, "fetch needs a block that computes the value" unless block_given?
      raise ArgumentError, "wait must be 0 or more seconds, not #{wait.inspect}" unless wait.is_a?(Numeric) && wait >= 0

      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + wait
      pause = 0.001
      loop do
        status, value, claim = claim_raw(key, serve_stale)
        return @marshal ? load(value) : value if status == :ok || status == :stale
        return compute_under(claim, ttl) { yield } if status == :claimed

        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        if left <= 0
          value = yield
          set(key, value, ttl:)
          return value
        end
        sleep([pause, left].min)
        pause = [pause * 2, 0.02].min
      end
    end

    # Yields each live [key, value] (an Enumerator without a block). Entries written or
    # moved meanwhile may be missed; none is yielded twice.
    def each
      return enum_for(:each) unless block_given?

      entries_raw(false).each { |key, value, _ttl| yield key, (@marshal ? load(value) : value) }
      self
    end

    # Every live key (UTF-8 Strings).
    def keys
      entries_raw(true)
    end

    # Checks every invariant of the file; with +repair+, drops what cannot be trusted.
    # The number of problems found (0: sound).
    def verify(repair: false)
      verify_native(repair)
    end

    # Sets the entry count and key+value byte limits every process honours (0 removes a
    # limit; nil leaves it), evicting down to them at once.
    def set_limits(count: nil, bytes: nil)
      set_limits_native(count, bytes)
    end

    def writable?
      @writable
    end

    def marshal?
      @marshal
    end

    private

    def read_info
      i = info
      @value_type = i[:value_type]
      @max_key_size = i[:max_key_size]
      @max_value_size = i[:max_value_size]
      @partition_count = i[:partition_count]
      @writable = i[:writable]
    end

    def compute_under(claim, ttl)
      begin
        value = yield
      rescue Exception # rubocop:disable Lint/RescueException -- released on any exit, then re-raised
        claim.abandon
        raise
      end
      claim.send(:publish_raw, dump(value), ttl)
      value
    end

    def dump(value)
      return value unless @marshal
      return value if value.is_a?(String) && !value.start_with?(MARSHAL_MAGIC)

      Marshal.dump(value)
    end

    def load(value)
      value.start_with?(MARSHAL_MAGIC) ? Marshal.load(value) : value
    rescue ArgumentError, TypeError => e
      raise DecodingError, "a value that begins as Marshal data does not load: #{e.message}"
    end
  end
end
