# frozen_string_literal: true

require "pathname"
require "active_support/cache"
require "active_support/digest"
require "mappedcache"
begin
  # Marshal.load autoloads the classes an entry names (FileStore and MemCacheStore load
  # it too), where this version of Rails has it.
  require "active_support/core_ext/marshal"
rescue LoadError
  nil
end

module ActiveSupport
  module Cache
    # A cache store that every process of the host shares through one memory-mapped
    # file (MappedCache): reads take no lock and make no system call, so a read costs
    # no more than MemoryStore's, yet every Puma or Unicorn worker, job runner and console
    # on the machine sees one cache.
    #
    #   config.cache_store = :mapped_cache_store, "/dev/shm/app.mcache", { capacity: 256.megabytes }
    #
    # The options beside Rails' own (namespace, expires_in, race_condition_ttl,
    # compress, compress_threshold, coder, ...) are MappedCache::Cache's: +capacity+
    # (bytes, for a new file), +max_key_size+, +max_value_size+, +partitions+, +mode+,
    # +shared_group+. A value without a version, uncompressed, is stored alone in the
    # store's own format (see MARK_MARSHAL), so a hit loads no Entry; other entries as
    # the coder dumps them (Marshal by default), as is every entry of a store given a
    # coder.
    # +raw: true+ stores the value's to_s, which other languages read as it is, and
    # increment and decrement change such counters in place, atomically across every
    # process. Keys that are longer than the file allows, or not UTF-8, are hashed the
    # way MemCacheStore hashes long keys. The store opened before a fork keeps working in
    # every child (each child opens the file again on its first use).
    class MappedCacheStore < Store
      CACHE_OPTIONS = %i[capacity max_key_size max_value_size average_entry_size max_processes mode partitions
                         shared_group verify_checksums use_flock].freeze

      # Rails 7.0 and later give serialize_entry the call's options (compress, raw).
      SERIALIZE_TAKES_OPTIONS = Store.instance_method(:serialize_entry).parameters.any? { |k, _| k == :keyrest }
      DESERIALIZE_TAKES_OPTIONS = Store.instance_method(:deserialize_entry).parameters.any? { |k, _| k == :keyrest }

      # Payloads in the store's own format begin as Marshal data does and end with a mark:
      # after a UTF-8 String value, its bytes and MARK_STRING; after any other value, its
      # Marshal data and MARK_MARSHAL (Marshal.load stops where the value ends). An
      # expiring entry's mark is MARK_STRING_EXPIRING or MARK_MARSHAL_EXPIRING, with the
      # time it expires at (a double) before it. A hit so gives the value alone, with no
      # Entry to load; entries with a version, or compressed, keep Rails' format.
      MARK_MARSHAL = "\x00mc:v".b.freeze
      MARK_MARSHAL_EXPIRING = "\x00mc:e".b.freeze
      MARK_STRING = "\x00mc:s".b.freeze
      MARK_STRING_EXPIRING = "\x00mc:t".b.freeze
      # Each mark by its last byte: [mark, whether an expiry time goes before it, whether
      # a String's bytes do].
      MARKS = { "v".ord => [MARK_MARSHAL, false, false].freeze, "e".ord => [MARK_MARSHAL_EXPIRING, true, false].freeze,
                "s".ord => [MARK_STRING, false, true].freeze, "t".ord => [MARK_STRING_EXPIRING, true, true].freeze }.freeze
      MARK_SIZE = MARK_MARSHAL.bytesize
      EXPIRY_SIZE = 8
      MAGIC_SIZE = MappedCache::MARSHAL_MAGIC.bytesize
      # Rails' default compress_threshold: a value this large goes in an Entry, compressed.
      COMPRESS_THRESHOLD = 1024
      # Rails 6.1's Entry compresses its value when it is made (later Rails, when stored).
      ENTRY_COMPRESSES = Entry.instance_method(:initialize).parameters.include?(%i[key compress_threshold])
      # What fast_value returns for a payload the general path must read (an Entry, an
      # expired value); nil is a value like any other.
      GENERAL = Object.new.freeze
      READ_EVENT = "cache_read.active_support"
      FETCH_HIT_EVENT = "cache_fetch_hit.active_support"
      READ_MULTI_EVENT = "cache_read_multi.active_support"

      prepend Strategy::LocalCache

      def self.supports_cache_versioning?
        true
      end

      attr_reader :cache

      # +MappedCacheStore.new(path, capacity: 256.megabytes, **options)+, or a
      # MappedCache::Cache of bytes opened elsewhere in place of the path.
      def initialize(path_or_cache = nil, **options)
        cache_options = options.slice(*CACHE_OPTIONS)
        # A coder of the application's own gets every entry; otherwise the format is ours.
        @own_format = !options.key?(:coder) && !options.key?(:serializer)
        super(options.except(*CACHE_OPTIONS))
        @cache =
          case path_or_cache
          when MappedCache::Cache then path_or_cache
          when String, Pathname
            MappedCache::Cache.new(path_or_cache.to_s, value_type: "bytes", create_value_type: "bytes", **cache_options)
          else
            raise ArgumentError, "MappedCacheStore needs the path of its cache file (e.g. \"/dev/shm/app.mcache\"), " \
                                 "not #{path_or_cache.inspect}"
          end
        return if @cache.value_type == "bytes" && !@cache.marshal?

        raise ArgumentError, "MappedCacheStore needs a cache of bytes without marshal (it stores the coder's strings)"
      end

      # Rails' read, fetch and read_multi, less the work no one observes: when no
      # subscriber listens, no debug log is kept, no local cache is on and the call names
      # Strings with no options of its own, a hit goes from the file to its value with
      # no options merged, no payload built and no Entry loaded. Any other call, and any
      # payload that needs an Entry (a version, compression, expiry past), takes Rails'
      # path.
      def read(name, options = nil)
        key = options.nil? && quiet?(READ_EVENT) && fast_key(name)
        return super unless key

        payload = @cache.get_raw(key)
        return nil if payload.nil?

        value = fast_value(payload)
        value.equal?(GENERAL) ? super : value
      end

      def fetch(name, options = nil, &block)
        key = block && options.nil? && !@options[:force] && quiet?(READ_EVENT, FETCH_HIT_EVENT) && fast_key(name)
        payload = key && @cache.get_raw(key)
        value = payload ? fast_value(payload) : GENERAL
        value.equal?(GENERAL) ? super : value
      end

      def read_multi(*names)
        keys = !names.last.is_a?(Hash) && fast_keys(names)
        return super unless keys

        found = @cache.get_multi(keys)
        values = {}
        names.each_with_index do |name, i|
          payload = found[keys[i]]
          next if payload.nil?

          value = fast_value(payload)
          return super if value.equal?(GENERAL)

          values[name] = value
        end
        values
      end

      # Adds +amount+ to the integer under +name+ atomically across every process and
      # returns it; a missing entry starts from 0. nil when the entry holds no integer
      # (an entry written without raw: true).
      def increment(name, amount = 1, options = nil)
        options = merged_options(options)
        instrument(:increment, name, amount: amount) do
          count(normalize_key(name, options), amount, options)
        end
      end

      # Subtracts +amount+, as increment does.
      def decrement(name, amount = 1, options = nil)
        options = merged_options(options)
        instrument(:decrement, name, amount: amount) do
          count(normalize_key(name, options), -amount, options)
        end
      end

      # Deletes every entry of this store's namespace whose key matches +matcher+: a
      # Regexp (as FileStore and MemoryStore take it), or a String glob (as RedisCacheStore
      # takes it: "user:*", "h?llo", "h[ae]llo").
      def delete_matched(matcher, options = nil)
        options = merged_options(options)
        instrument(:delete_matched, matcher.inspect) do
          matching =
            if matcher.is_a?(Regexp)
              pattern = key_matcher(matcher, options)
              @cache.keys.select { |key| key.match?(pattern) }
            else
              glob = namespace_key(matcher.to_s, options)
              @cache.keys.select { |key| File.fnmatch?(glob, key, File::FNM_DOTMATCH) }
            end
          @cache.delete_multi(matching)
        end
      end

      # Removes every entry of this store's namespace (with no namespace, every entry of
      # the file, in every process's view).
      def clear(options = nil)
        options = merged_options(options)
        namespace = options[:namespace].is_a?(Proc) ? options[:namespace].call : options[:namespace]
        return @cache.clear.then { true } if namespace.nil?

        prefix = "#{namespace}:"
        @cache.delete_multi(@cache.keys.select { |key| key.start_with?(prefix) })
        true
      end

      # Removes every expired entry of the file now.
      def cleanup(options = nil)
        options = merged_options(options)
        instrument(:cleanup, size: @cache.stats[:entries]) { @cache.sweep }
      end

      # The file's counters (hits, misses, entries, evictions, ...).
      def stats
        @cache.stats
      end

      def inspect
        "#<#{self.class.name} #{@cache.path} options=#{options.inspect}>"
      end

      private

      def read_entry(key, **options)
        deserialize(read_serialized_entry(key, **options), options)
      end

      def read_serialized_entry(key, **_options)
        @cache.get_raw(key)
      end

      def write_entry(key, entry, **options)
        write_serialized_entry(key, serialize(entry, options), **options)
      end

      def write_serialized_entry(key, payload, **options)
        ttl = file_ttl(options)
        options[:unless_exist] ? @cache.add(key, payload, ttl:) : @cache.set(key, payload, ttl:)
      rescue MappedCache::InvalidValueError => e
        logger&.error("MappedCacheStore: not written (#{e.message})")
        false
      end

      def delete_entry(key, **_options)
        @cache.delete(key)
      end

      def read_multi_entries(names, **options)
        keys_to_names = names.index_by { |name| normalize_key(name, options) }
        found = @cache.get_multi(keys_to_names.keys)
        found.each_with_object({}) do |(key, payload), values|
          name = keys_to_names[key]
          value = fast_value(payload)
          unless value.equal?(GENERAL)
            values[name] = value
            next
          end
          entry = deserialize(payload, options)
          next if entry.nil? || entry.expired? || entry.mismatched?(normalize_version(name, options))

          values[name] = entry.value
        end
      end

      def write_multi_entries(hash, **options)
        # The local cache (with_local_cache) keeps each entry: written one by one.
        return super if options[:unless_exist] || hash.empty? || local_cache

        @cache.set_multi(hash.to_h { |key, entry| [key, serialize(entry, options)] }, ttl: file_ttl(options))
      rescue MappedCache::InvalidValueError
        super # one by one: each entry too large is logged and skipped
      end

      def delete_multi_entries(entries, **_options)
        @cache.delete_multi(entries)
      end

      # Keys as MemCacheStore makes them: the namespaced key, hashed when the file cannot
      # hold it (longer than its key limit, or not UTF-8), the hash after a readable part.
      def normalize_key(key, options = nil)
        key = super
        return key if key.nil?
        return key if key.encoding == Encoding::UTF_8 && key.bytesize <= @cache.max_key_size && key.valid_encoding?

        bytes = key.b
        utf8 = bytes.dup.force_encoding(Encoding::UTF_8)
        return utf8 if utf8.valid_encoding? && bytes.bytesize <= @cache.max_key_size

        digest = ActiveSupport::Digest.hexdigest(bytes)
        readable = bytes.gsub(/[\x80-\xFF]/n, "?")
        "#{readable[0, @cache.max_key_size - digest.size - 5]}:md5:#{digest}"
      end

      # The file's key for +name+ when the call may take the fast path (see #read): nil
      # when the store's options name a version or a namespace Proc, or +name+ is not a
      # UTF-8 String the file holds as it is.
      def fast_key(name)
        return nil unless name.instance_of?(String) && name.encoding == Encoding::UTF_8

        namespace = @options[:namespace]
        key =
          case namespace
          when nil then name
          when String then "#{namespace}:#{name}"
          else return nil
          end
        key if key.bytesize <= @cache.max_key_size && key.valid_encoding? && @options[:version].nil?
      end

      def fast_keys(names)
        return nil unless quiet?(READ_MULTI_EVENT)

        keys = names.map { |name| fast_key(name) || (return nil) }
        keys.uniq.size == keys.size ? keys : nil
      end

      # Whether nothing observes the call: no subscriber to its events, no debug log, no
      # local cache on.
      def quiet?(event, other_event = nil)
        notifier = ActiveSupport::Notifications.notifier
        !(notifier.listening?(event) || (other_event && notifier.listening?(other_event)) ||
          (logger&.debug? && !silence?) || local_cache)
      end

      # A payload's value when it needs no Entry: the store's own format before it
      # expires, or (with the default coder) a raw value, anything but Marshal data, as
      # it is. GENERAL for the rest.
      def fast_value(payload)
        return @own_format ? payload : GENERAL unless payload.start_with?(MappedCache::MARSHAL_MAGIC)

        mark = own_mark(payload)
        return GENERAL if mark.nil? || (mark[1] && own_expires_at(payload) <= Time.now.to_f)

        own_value(payload, mark)
      end

      # The mark (MARKS' entry) ending a payload that begins as Marshal data, when it is
      # one of the store's own.
      def own_mark(payload)
        mark = MARKS[payload.getbyte(-1)]
        mark if mark && payload.end_with?(mark[0])
      end

      # The value of a payload in the store's own format; Marshal data that does not load
      # after all belongs to a raw value that happens to look so, read as it is.
      def own_value(payload, mark)
        if mark[2]
          size = payload.bytesize - MAGIC_SIZE - MARK_SIZE - (mark[1] ? EXPIRY_SIZE : 0)
          return payload.byteslice(MAGIC_SIZE, size).force_encoding(Encoding::UTF_8)
        end
        begin
          Marshal.load(payload)
        rescue StandardError
          payload
        end
      end

      def own_expires_at(payload)
        payload.unpack1("E", offset: payload.bytesize - MARK_SIZE - EXPIRY_SIZE)
      end

      # The store's own payload for +entry+, or nil when it needs Rails' format (a
      # version, a value large enough to compress, a coder of the application's).
      def own_payload(entry, options)
        return nil unless @own_format && entry.version.nil?
        # Rails 6.1's Entry compresses itself when it is made, when that pays.
        return nil if ENTRY_COMPRESSES && entry.send(:compressed?)

        value = entry.value
        string = value.instance_of?(String) && value.encoding == Encoding::UTF_8
        body = string ? (+MappedCache::MARSHAL_MAGIC << value).force_encoding(Encoding::BINARY) : Marshal.dump(value)
        # Later Rails compress when they store what reaches the threshold.
        return nil if !ENTRY_COMPRESSES && options[:compress] != false &&
                      body.bytesize >= (options[:compress_threshold] || COMPRESS_THRESHOLD)

        expires_at = entry.expires_at
        return body << (string ? MARK_STRING : MARK_MARSHAL) unless expires_at

        body << [expires_at].pack("E") << (string ? MARK_STRING_EXPIRING : MARK_MARSHAL_EXPIRING)
      end

      def count(key, delta, options)
        @cache.incr(key, delta, ttl: options[:expires_in]&.to_f)
      rescue MappedCache::NotAnIntegerError
        nil
      end

      # Seconds the file keeps the entry: expires_in (the entry itself says when it
      # expires), and 5 minutes more while race_condition_ttl may serve it stale.
      def file_ttl(options)
        seconds = options[:expires_in].to_f
        return nil unless seconds.positive?

        seconds += 300 if options[:race_condition_ttl] && !options[:raw]
        seconds
      end

      def serialize(entry, options)
        return entry.value.to_s if options[:raw]

        own = own_payload(entry, options)
        return own if own

        payload = SERIALIZE_TAKES_OPTIONS ? serialize_entry(entry, **options) : serialize_entry(entry)
        return payload if payload.is_a?(String)

        raise TypeError, "MappedCacheStore stores Strings: its coder must dump an entry to a String, " \
                         "not #{payload.class}"
      end

      # A payload that does not load as an entry is a raw value (written with raw: true,
      # by increment, or by another language), read as the String it is.
      def deserialize(payload, options)
        return nil if payload.nil?
        mark = payload.start_with?(MappedCache::MARSHAL_MAGIC) && own_mark(payload)
        return own_entry(payload, mark) if mark

        entry =
          begin
            DESERIALIZE_TAKES_OPTIONS ? deserialize_entry(payload, **options.except(:raw)) : deserialize_entry(payload)
          rescue StandardError
            nil
          end
        entry.is_a?(Entry) ? entry : Entry.new(payload, compress: false)
      end

      # An Entry for a payload in the store's own format (Rails' general path: race
      # condition TTLs, the local cache), expiring when the payload says.
      def own_entry(payload, mark)
        entry = Entry.new(own_value(payload, mark), compress: false)
        # Made at 0.0 and expiring at the absolute time, as Rails 7.1 makes its entries: the
        # same payload gives the same entry whenever it is read.
        entry.instance_variable_set(:@created_at, 0.0)
        entry.expires_at = own_expires_at(payload) if mark[1]
        entry
      end
    end
  end
end
