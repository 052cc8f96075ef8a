# frozen_string_literal: true

# MappedCache::Cache: every method, its types and its errors (bad input raises a clear
# error, loses nothing stored and never crashes the process).
require_relative "test_helper"

class CacheTest < CacheTestCase
  def test_strings_round_trip_as_binary_and_keys_keep_their_bytes
    c = open_cache
    c.set("greeting", "héllo")
    assert_equal "héllo".b, c.get("greeting")
    assert_equal Encoding::ASCII_8BIT, c["greeting"].encoding
    c["bin"] = "\x00\xFF\x01".b
    assert_equal "\x00\xFF\x01".b, c["bin"]
    c.set("clé".encode("UTF-8"), "1")
    assert_equal "1", c.get("clé".b) # the same bytes, whatever the encoding
    c.set(:sym, "2")
    assert_equal "2", c.get("sym")
    assert_nil c.get("missing")
  end

  def test_add_replace_delete_touch_ttl
    c = open_cache
    assert c.add("k", "a")
    assert_equal false, c.add("k", "b")
    assert c.replace("k", "c")
    assert_equal false, c.replace("nope", "x")
    assert_equal "c", c["k"]
    assert_equal Float::INFINITY, c.ttl("k")
    assert c.touch("k", ttl: 30)
    assert_operator c.ttl("k"), :<=, 30
    assert_operator c.ttl("k"), :>, 20
    assert_nil c.ttl("nope")
    assert_equal false, c.touch("nope", ttl: 5)
    assert c.delete("k")
    assert_equal false, c.delete("k")
    assert_equal false, c.exist?("k")
  end

  def test_expiry
    c = open_cache
    c.set("short", "v", ttl: 30)
    assert_equal "v", c["short"]
    c.touch("short", ttl: 0.05)
    sleep 0.1
    assert_nil c["short"]
    assert_equal 1, c.sweep
  end

  def test_counters
    c = open_cache
    assert_equal 1, c.incr("n")
    assert_equal 11, c.incr("n", 10)
    assert_equal 8, c.decr("n", 3)
    assert_equal "8", c["n"]
    assert_equal 100, c.incr("fresh", initial: 99)
    c["text"] = "abc"
    assert_raises(MappedCache::NotAnIntegerError) { c.incr("text") }
    assert_equal "abc", c["text"]
    assert_raises(ArgumentError) { c.incr("n", 2**63 - 1) }
    assert_equal "8", c["n"]
  end

  def test_gets_cas_update
    c = open_cache
    c["k"] = "1"
    value, version = c.gets("k")
    assert_equal "1", value
    assert c.cas("k", "2", version)
    assert_equal false, c.cas("k", "3", version)
    assert_equal "2", c["k"]
    assert_equal "22", c.update("k") { |v| v * 2 }
    assert_nil c.update("nope") { flunk "no call for a missing key" }
    assert_nil c.gets("nope")
  end

  def test_multi
    c = open_cache
    c.set_multi({ "a" => "1", "b" => "2", "big" => "x" * 5000 }, ttl: 60)
    assert_equal({ "a" => "1", "b" => "2", "big" => "x" * 5000 }, c.get_multi("a", "b", "big", "nope"))
    assert_equal({ "a" => "1" }, c.get_multi(["a"]))
    assert_equal 2, c.delete_multi(%w[a b nope])
    assert_raises(MappedCache::InvalidKeyError) { c.set_multi({ "ok" => "1", "" => "2" }) }
    assert_nil c["ok"] # a bad entry fails the call before anything is stored
  end

  def test_marshal
    c = open_cache(marshal: true)
    values = { "hash" => { a: [1, 2.5, nil] }, "int" => 42, "nil" => nil, "str" => "plain",
               "magic" => "\x04\x08looks marshalled".b }
    values.each { |k, v| c.set(k, v) }
    values.each { |k, v| v.nil? ? assert_nil(c.get(k)) : assert_equal(v, c.get(k)) }
    assert_equal "plain", c.get_raw("str") # other languages read a String as it is
    assert_equal values.except("nil"), c.get_multi(values.keys).except("nil")
    plain = open_cache
    assert_raises(TypeError) { plain.set("x", 1) }
    assert_raises(ArgumentError) { open_cache("#{@path}.m", marshal: true, create_value_type: "string") }
  end

  def test_fetch_computes_once_and_releases_on_error
    c = open_cache
    calls = 0
    assert_equal "v", c.fetch("k", ttl: 60) { calls += 1; "v" }
    assert_equal "v", c.fetch("k") { calls += 1; "w" }
    assert_equal 1, calls
    assert_raises(RuntimeError) { c.fetch("boom") { raise "compute failed" } }
    assert_equal false, c.computing?("boom")
    assert_equal "ok", c.fetch("boom") { "ok" }
    assert_raises(ArgumentError) { c.fetch("k") }
    big = "b" * 5000 # past the extension's stack buffer: read again at its size
    assert_equal big, c.fetch("big") { big }
    assert_equal big, c.fetch("big") { flunk "computed twice" }
    assert_equal big, c.get("big")
    assert_equal big, c.gets("big")[0]
  end

  def test_fetch_waits_for_another_process
    c = open_cache
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      c.fetch("slow") { writer.puts("claimed"); sleep 0.3; "from child" }
      exit!(0)
    end
    writer.close
    assert_equal "claimed\n", reader.gets
    assert c.computing?("slow")
    assert_equal "from child", c.fetch("slow") { "from parent" }
    Process.wait(pid)
  end

  def test_iteration_stats_grow_verify_info
    c = open_cache
    10.times { |i| c.set("k#{i}", i.to_s) }
    assert_equal (0...10).to_h { |i| ["k#{i}", i.to_s] }, c.each.to_h
    assert_equal (0...10).map { |i| "k#{i}" }.sort, c.keys.sort
    assert_equal 10, c.count
    assert_equal 10, c.stats[:entries]
    assert_equal "bytes", c.value_type
    assert_equal 250, c.max_key_size
    grown = c.grow(8 << 20)
    assert_operator grown, :>, 4 << 20
    assert_equal 10, c.keys.size
    c.set_limits(count: 5)
    assert_operator c.stats[:entries], :<=, 5
    assert_equal 0, c.verify
    c.clear
    assert_equal [], c.keys
  end

  def test_typed_caches
    s = open_cache(TestSupport.temp_path("s"), create_value_type: "string")
    s["k"] = "héllo"
    assert_equal "héllo", s["k"]
    assert_equal Encoding::UTF_8, s["k"].encoding
    assert_raises(MappedCache::InvalidValueError) { s["bad"] = "\xFF".b }
    i = open_cache(TestSupport.temp_path("i"), create_value_type: "int64")
    i["n"] = -5
    assert_equal(-5, i["n"])
    assert_equal(-3, i.incr("n", 2))
    assert_raises(TypeError) { i["x"] = "1" }
    assert_raises(MappedCache::TypeMismatchError) { open_cache(i.path, value_type: "bytes") }
  ensure
    [s, i].compact.each { |x| File.unlink(x.path) if File.exist?(x.path) }
  end

  def test_bad_input_raises_and_loses_nothing
    c = open_cache
    c["keep"] = "v"
    assert_raises(MappedCache::InvalidKeyError) { c.set("", "x") }
    assert_raises(MappedCache::InvalidKeyError) { c.set("k" * 251, "x") }
    assert_raises(MappedCache::InvalidKeyError) { c.get("\xFF\xFE".b) }
    assert_raises(MappedCache::InvalidValueError) { c.set("k", "x" * (c.max_value_size + 1)) }
    assert_raises(TypeError) { c.set(1, "x") }
    assert_raises(TypeError) { c.set("k", nil) }
    assert_raises(ArgumentError) { c.set("k", "x", ttl: -1) }
    assert_raises(ArgumentError) { c.set("k", "x", ttl: Float::NAN) }
    assert_raises(ArgumentError) { MappedCache::Cache.new(@path, capacity: -1) }
    assert_equal "v", c["keep"]
    bogus = "#{@path}.notacache"
    File.write(bogus, "x" * 8192)
    File.chmod(0o600, bogus)
    assert_raises(MappedCache::NotACacheError) { MappedCache::Cache.new(bogus) }
    assert_equal "x" * 8192, File.read(bogus)
    err = assert_raises(MappedCache::SystemError) { MappedCache::Cache.new("/nonexistent-dir/x.mcache") }
    assert_equal Errno::ENOENT::Errno, err.errno
    ro = open_cache(read_only: true)
    assert_raises(MappedCache::ReadOnlyError) { ro.set("k", "v") }
    assert_equal "v", ro["keep"]
    assert_raises(TypeError) { c.dup }
    assert_raises(TypeError) { Marshal.dump(c) }
    c.close
    assert_raises(MappedCache::ClosedError) { c.get("keep") }
    assert c.closed?
  end

  def test_a_cache_opened_before_fork_works_in_the_child
    c = open_cache
    c["parent"] = "p"
    pid = fork { exit!(c["parent"] == "p" && c.set("child", "c") && c.incr("n") == 1 ? 0 : 1) }
    _, status = Process.wait2(pid)
    assert status.success?
    assert_equal "c", c["child"]
    assert_equal 2, c.incr("n")
  end

  def test_four_processes_increment_one_key_4000_times
    c = open_cache
    pids = 4.times.map { fork { 1000.times { c.incr("hits") }; exit!(0) } }
    assert(pids.all? { |pid| Process.wait2(pid)[1].success? })
    assert_equal "4000", c["hits"]
  end
end
