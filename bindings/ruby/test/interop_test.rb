# frozen_string_literal: true

# One file, every language: values Ruby sets read back the same from Swift (mc-test-helper),
# the CLI (mapped-cache) and Python (bindings/python), and theirs from Ruby: strings and
# bytes, counters, expiry, and get-or-compute computing once across all of them.
require_relative "test_helper"
require "json"

class InteropTest < CacheTestCase
  STRINGS = { "plain" => "hello", "accents" => "héllo wörld", "emoji" => "🎉 party", "empty" => "", "nul" => "a\0b" }.freeze
  BYTES = { "zero" => [0, 1, 2, 255].pack("C*"), "empty" => "".b, "text" => "abc".b }.freeze
  INTS = { "one" => 1, "negative" => -42, "max" => 2**63 - 1 }.freeze

  def helper(*args)
    run_command(swift_binary("mc-test-helper"), *args.map(&:to_s))
  end

  def cli(*args)
    Open3.capture3(swift_binary("mapped-cache"), *args.map(&:to_s))
  end

  # A Python that imports the mappedcache package: $MAPPEDCACHE_PYTHON, else the venv
  # .ci/run builds.
  def python(script, *args)
    exe = ENV.fetch("MAPPEDCACHE_PYTHON", File.join(TestSupport::REPO, ".build", "ci-python", "bin", "python"))
    _, _, ok = Open3.capture3(exe, "-c", "import mappedcache") if File.executable?(exe)
    TestSupport.unavailable(self, "no Python with the mappedcache package (set MAPPEDCACHE_PYTHON)") unless ok&.success?
    run_command(exe, "-c", script, *args.map(&:to_s))
  end

  def test_swift_writes_ruby_reads
    helper("interop-write", @path, "string")
    c = open_cache(value_type: nil)
    assert_equal "string", c.value_type
    assert_equal STRINGS, STRINGS.keys.to_h { |k| [k, c[k]] }
    assert(STRINGS.keys.all? { |k| c[k].encoding == Encoding::UTF_8 })
    bytes_path = "#{@path}.bytes"
    helper("interop-write", bytes_path, "data")
    b = open_cache(bytes_path)
    assert_equal BYTES, BYTES.keys.to_h { |k| [k, b[k]] }
    ints_path = "#{@path}.ints"
    helper("interop-write", ints_path, "int")
    i = open_cache(ints_path)
    assert_equal INTS, INTS.keys.to_h { |k| [k, i[k]] }
  end

  def test_ruby_writes_swift_reads_and_counters_add_up
    c = open_cache(create_value_type: "string")
    STRINGS.each { |k, v| c[k] = v }
    lines = helper("interop-read", @path, "string", *STRINGS.keys, "missing").lines(chomp: true)
    assert_equal STRINGS.values, lines[0...-1].map { |l| JSON.parse("[#{l}]")[0] }
    assert_equal "MISSING", lines[-1]
    b = open_cache("#{@path}.bytes")
    BYTES.each { |k, v| b[k] = v }
    assert_equal BYTES.values.map { |v| v.unpack1("H*") }, helper("interop-read", b.path, "bytes", *BYTES.keys).lines(chomp: true)
    i = open_cache("#{@path}.ints", create_value_type: "int64")
    INTS.each { |k, v| i[k] = v }
    assert_equal INTS.values.map(&:to_s), helper("interop-read", i.path, "int", *INTS.keys).lines(chomp: true)
    # Ruby's incr and Swift's increment on one counter at once: nothing lost.
    swift = Process.spawn(swift_binary("mc-test-helper"), "incr", i.path, "hits", "3000", out: File::NULL)
    3000.times { i.incr("hits") }
    Process.wait(swift)
    assert $?.success?
    assert_equal 6000, i["hits"]
  end

  def test_the_cli_reads_what_ruby_writes_and_ruby_reads_what_it_writes
    c = open_cache
    c.set("text", "héllo")
    c.set("binary", "\x00\xFF\n".b)
    c.set("expiring", "soon", ttl: 100)
    3.times { c.incr("count") }
    { "text" => "héllo".b, "binary" => "\x00\xFF\n".b, "count" => "3".b }.each do |key, want|
      out, err, status = Open3.capture3(swift_binary("mapped-cache"), "get", @path, key, binmode: true)
      assert status.success?, err
      assert_equal want, out.b, key
    end
    _, _, status = cli("get", @path, "missing")
    assert_equal 1, status.exitstatus
    keys, = cli("keys", @path)
    assert_match(/expiring/, keys)
    _, err, status = cli("set", @path, "from-cli", "v1", "--ttl", "60")
    assert status.success?, err
    assert_equal "v1", c["from-cli"]
    assert c.ttl("from-cli").between?(45, 60), c.ttl("from-cli").to_s
    assert_equal 4, c.incr("count")
  end

  def test_python_and_ruby_share_strings_bytes_counters_and_expiry
    c = open_cache
    c.set("from-ruby", "\x00r\xFFuby".b)
    c.set("expiring", "x", ttl: 30)
    out = python(<<~PY, @path)
      import json, sys, mappedcache
      c = mappedcache.Cache(sys.argv[1], value_type="bytes")
      c.set("from-python", "pythön".encode() + b"\\x00\\xff")
      for _ in range(2000):
          c.incr("shared")
      print(json.dumps([c.get("from-ruby").hex(), c.get("expiring").decode(), 0 < c.ttl("expiring") <= 30]))
    PY
    assert_equal ["\x00r\xFFuby".b.unpack1("H*"), "x", true], JSON.parse(out)
    assert_equal "pythön".b + "\x00\xFF".b, c["from-python"]
    2000.times { c.incr("shared") }
    assert_equal "4000", c["shared"]
    c.touch("expiring", ttl: 0.2)
    sleep 0.3
    out = python("import sys, mappedcache; print(mappedcache.Cache(sys.argv[1], value_type='bytes').get('expiring'))", @path)
    assert_equal "None", out.strip
    assert_nil c["expiring"]
  end

  def test_ruby_python_and_swift_racers_compute_once
    counter = "#{@path}.count"
    open_cache(create_value_type: "string")
    start = (Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond) + 2000).to_s
    python("import mappedcache") # the Python racers need the package
    py_worker = File.join(TestSupport::REPO, "bindings", "python", "tests", "py_worker.py")
    exe = ENV.fetch("MAPPEDCACHE_PYTHON", File.join(TestSupport::REPO, ".build", "ci-python", "bin", "python"))
    commands = [[swift_binary("mc-test-helper"), "compute-race"]] * 2 + [TestSupport.ruby_worker("compute-race")] * 2 +
               [[exe, py_worker, "compute-race"]] * 2
    racers = commands.map { |cmd| IO.popen([*cmd, @path, "report", counter, start, "300"]) }
    outputs = racers.map { |io| io.read.split.tap { io.close } }
    assert_equal 1, File.readlines(counter).size, File.read(counter)
    assert_equal 1, outputs.map(&:first).uniq.size, outputs.inspect
    # Swift adds "on-time" or "late" after the second word.
    assert_equal ["cached"] * 5 + ["computed"], outputs.map { |o| o[1] }.sort
  end
end
