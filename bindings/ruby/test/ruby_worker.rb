# frozen_string_literal: true

# Ruby worker processes for the interop and chaos tests (run as a script, never loaded by
# the tests):
#
#   ruby_worker.rb chaos PATH SLOT KEYS PROBLEMS STOP
#     Until the file STOP exists: sets and reads self-checking values (Tests/CheckedValues'
#     format, the one the Swift helper's writer and reader use) on the shared keys
#     k0..k{KEYS-1}, and on keys of its own (rb{SLOT}-k<n>) whose last write it tracks.
#     Every value read must check (else "corrupt"), and a key of its own must hold what it
#     last wrote there (else "wrong"); each problem is appended to PROBLEMS at once (the
#     worker may be SIGKILLed at any moment). Prints its counts as JSON when it stops.
#
#   ruby_worker.rb compute-race PATH KEY COUNTER_FILE START_MS COMPUTE_MS
#     At wall-clock START_MS, fetches KEY in a cache of strings, computing it by appending a
#     line to COUNTER_FILE and sleeping COMPUTE_MS. Prints "VALUE cached|computed".
require "json"
require "mappedcache"

# CheckedValue's format: key NUL writer NUL seq NUL payload, then FNV-1a of it all.
module Checked
  MASK = (1 << 64) - 1

  module_function

  def fnv(data)
    h = 0xCBF29CE484222325
    data.each_byte { |b| h = ((h ^ b) * 0x100000001B3) & MASK }
    h
  end

  def make(key, writer, seq, size)
    head = "#{key}\0#{writer}\0#{seq}\0".b
    x = ((seq * 0x9E3779B97F4A7C15) & MASK) | 1
    payload = Array.new([0, size - head.bytesize - 8].max) do
      x ^= (x << 13) & MASK
      x ^= x >> 7
      x ^= (x << 17) & MASK
      x & 0xFF
    end
    body = head + payload.pack("C*")
    body + [fnv(body)].pack("Q<")
  end

  def check(value, key)
    k = key.b
    return false if value.bytesize < k.bytesize + 9

    body = value.byteslice(0, value.bytesize - 8)
    value.byteslice(-8, 8).unpack1("Q<") == fnv(body) && value.start_with?(k + "\0")
  end

  def seq_of(value)
    value.split("\0".b)[2].to_i
  end
end

def chaos(path, slot, keys, problems, stop)
  cache = MappedCache::Cache.new(path, value_type: "bytes", create: false)
  slot = slot.to_i
  keys = keys.to_i
  rng = Random.new(Process.pid)
  writer = 2000 + slot
  seq = (Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond) % 1_000_000) * 1000
  mine = {}
  counts = { "sets" => 0, "reads" => 0, "hits" => 0, "corrupt" => 0, "wrong" => 0 }
  problem = lambda do |kind, text|
    counts[kind] += 1
    File.open(problems, File::WRONLY | File::APPEND | File::CREAT, 0o600) { |f| f.syswrite("#{kind} slot #{slot} pid #{Process.pid}: #{text}\n") }
  end
  n = 0
  loop do
    n += 1
    break if (n % 64).zero? && File.exist?(stop)

    own = rng.rand < 0.5
    key = own ? "rb#{slot}-k#{rng.rand(64)}" : "k#{rng.rand(keys)}"
    if rng.rand < 0.4
      seq += 1
      cache.set(key, Checked.make(key, writer, seq, [16, 64, 200, 1500].sample(random: rng)))
      counts["sets"] += 1
      mine[key] = seq if own
      next
    end
    counts["reads"] += 1
    value = cache.get(key)
    if value.nil?
      problem.call("wrong", "#{key} missing after this process stored seq #{mine[key]}") if own && mine.key?(key)
      next
    end
    counts["hits"] += 1
    if !Checked.check(value, key)
      problem.call("corrupt", "#{key}: #{value.byteslice(0, 40).inspect}")
    elsif own && mine.key?(key) && Checked.seq_of(value) != mine[key]
      problem.call("wrong", "#{key} holds seq #{Checked.seq_of(value)}, this process stored #{mine[key]}")
    end
  end
  puts JSON.generate(counts)
end

def compute_race(path, key, counter, start_ms, compute_ms)
  cache = MappedCache::Cache.new(path, capacity: 4 << 20, value_type: "string")
  sleep 0.0002 while Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond) < start_ms.to_i
  computed = false
  value = cache.fetch(key, wait: 30) do
    computed = true
    File.open(counter, "a") { |f| f.syswrite("computed by ruby #{Process.pid}\n") }
    sleep compute_ms.to_i / 1000.0
    "value-from-#{Process.pid}"
  end
  puts "#{value} #{computed ? 'computed' : 'cached'}"
end

if $PROGRAM_NAME == __FILE__
  command, *args = ARGV
  case command
  when "chaos" then chaos(*args)
  when "compute-race" then compute_race(*args)
  else abort "usage: ruby_worker.rb chaos|compute-race ..."
  end
end
