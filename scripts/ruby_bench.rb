# frozen_string_literal: true

# Rails cache store reads and writes, MappedCacheStore beside RedisCacheStore and
# MemCacheStore (dalli) over unix sockets and MemoryStore in-process: KEYS keys of
# VALUE_BYTES-byte values, read at random for SECONDS per measurement, by 1 and by 2
# processes at once, in ROUNDS interleaved rounds (every store once per round, in turn).
# Prints each store's best and median operations per second and MappedCacheStore's ratio
# to each, and the CPU time each operation took over all rounds: the clients' (user and
# system) and, for Redis and memcached, the server's (REDIS_PID, MEMCACHED_PID, from
# /proc), which a machine shared with other work disturbs less than wall-clock rates.
# Run through scripts/ruby-bench.sh, which starts the servers.
#
#   ruby scripts/ruby_bench.rb CACHE_PATH REDIS_SOCKET MEMCACHED_SOCKET
require "active_support"
require "active_support/cache"
require "active_support/cache/mapped_cache_store"
require "redis"
require "dalli"
require "json"

KEYS = Integer(ENV.fetch("KEYS", "100000"))
VALUE_BYTES = Integer(ENV.fetch("VALUE_BYTES", "64"))
SECONDS = Float(ENV.fetch("SECONDS", "0.5"))
ROUNDS = Integer(ENV.fetch("ROUNDS", "5"))
PROCESSES = ENV.fetch("PROCESSES", "1,2").split(",").map(&:to_i)

path, redis_socket, memcached_socket = ARGV
abort "usage: ruby_bench.rb CACHE_PATH REDIS_SOCKET MEMCACHED_SOCKET" unless memcached_socket

# Each process (the parent, then every forked child) builds its own clients.
STORES = {
  "MappedCacheStore" => -> { ActiveSupport::Cache.lookup_store(:mapped_cache_store, path, { capacity: 256 << 20 }) },
  "RedisCacheStore" => -> { ActiveSupport::Cache.lookup_store(:redis_cache_store, { url: "unix://#{redis_socket}" }) },
  "MemCacheStore" => -> { ActiveSupport::Cache.lookup_store(:mem_cache_store, memcached_socket) },
  "MemoryStore" => -> { ActiveSupport::Cache.lookup_store(:memory_store, { size: 512 << 20 }) },
}.freeze

# The clients under the stores, read directly (the stores' keys, the stores' payloads).
CLIENTS = {
  "MappedCache#get" => -> { MappedCache::Cache.new(path) },
  "Redis#get" => -> { Redis.new(path: redis_socket) },
  "Dalli::Client#get" => -> { Dalli::Client.new(memcached_socket) },
}.freeze

KEY_NAMES = Array.new(KEYS) { |i| "bench:key:#{i}" }
RAW_KEYS = Array.new(KEYS) { |i| "bench:raw:#{i}" }
VALUE = ("v" * VALUE_BYTES).freeze

def fill(store)
  KEY_NAMES.each_slice(1000) { |slice| store.write_multi(slice.to_h { |k| [k, VALUE] }) }
end

# Operations one process does in SECONDS.
def run_ops(store, op)
  rng = Random.new(Process.pid)
  n = 0
  cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + SECONDS
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
    100.times do
      key = (op == :get ? RAW_KEYS : KEY_NAMES)[rng.rand(KEYS)]
      case op
      when :read
        store.read(key) or raise "#{key} missing from #{store.class}"
      when :get
        store.get(key) or raise "#{key} missing from #{store.class}"
      else
        store.write(key, VALUE)
      end
    end
    n += 100
  end
  [n, Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu]
end

# CPU seconds a server process has used (user + system, from /proc; 0 for none).
def server_cpu(pid)
  return 0.0 unless pid

  fields = File.read("/proc/#{pid}/stat").split(") ").last.split
  (fields[11].to_i + fields[12].to_i) / 100.0 # utime, stime in clock ticks (USER_HZ)
end

SERVER_PIDS = { "RedisCacheStore" => ENV["REDIS_PID"], "Redis#get" => ENV["REDIS_PID"],
                "MemCacheStore" => ENV["MEMCACHED_PID"], "Dalli::Client#get" => ENV["MEMCACHED_PID"] }.freeze

# Operations per second of `processes` processes at once (forked; each builds its own
# client; MemoryStore's children read the parent's copy, filled before the fork).
# [operations/s, operations, CPU seconds of the clients and the server together].
def measure(name, stores, processes, op)
  server = server_cpu(SERVER_PIDS[name])
  n, cpu = processes == 1 ? run_ops(stores[name], op) : run_forked(name, stores, processes, op)
  [n / SECONDS, n, cpu + server_cpu(SERVER_PIDS[name]) - server]
end

def run_forked(name, stores, processes, op)
  go_r, go_w = IO.pipe
  results = Array.new(processes) do
    r, w = IO.pipe
    pid = fork do
      r.close
      go_w.close
      store = name == "MemoryStore" ? stores[name] : (STORES[name] || CLIENTS[name]).call
      op == :get ? store.get(RAW_KEYS[0]) : store.read(KEY_NAMES[0]) # connected before the start
      go_r.read(1)
      w.write(run_ops(store, op).join(" "))
      exit!(0)
    end
    w.close
    [pid, r]
  end
  go_r.close
  sleep 0.2
  go_w.write("g" * processes)
  go_w.close
  counts = results.map { |pid, r| r.read.split.map(&:to_f).tap { r.close; Process.wait(pid) } }
  [counts.sum(&:first).to_i, counts.sum(&:last)]
end

stores = STORES.transform_values(&:call)
stores.each_value { |s| s.clear }
stores.each_value { |s| fill(s) }
clients = CLIENTS.transform_values(&:call)
# The clients read plain values under keys of their own (RAW_KEYS), beside the stores'.
RAW_KEYS.each_slice(1000) do |slice|
  clients["MappedCache#get"].set_multi(slice.to_h { |k| [k, VALUE] })
  clients["Redis#get"].mset(*slice.flat_map { |k| [k, VALUE] })
  slice.each { |k| clients["Dalli::Client#get"].set(k, VALUE, 0, raw: true) }
end
results = Hash.new { |h, k| h[k] = [] }
ROUNDS.times do
  PROCESSES.each do |processes|
    %i[read write].each do |op|
      STORES.each_key { |name| results[[op, processes, name]] << measure(name, stores, processes, op) }
    end
    CLIENTS.each_key { |name| results[[:get, processes, name]] << measure(name, clients, processes, :get) }
  end
end

def median(xs)
  s = xs.sort
  s.size.odd? ? s[s.size / 2] : (s[s.size / 2 - 1] + s[s.size / 2]) / 2.0
end

puts "#{KEYS} keys, #{VALUE_BYTES}-byte values, #{ROUNDS} interleaved rounds of #{SECONDS} s; Ruby #{RUBY_VERSION}, " \
     "activesupport #{ActiveSupport::VERSION::STRING}, redis-rb #{Redis::VERSION}, dalli #{Dalli::VERSION}"
{ read: STORES, write: STORES, get: CLIENTS }.each do |op, table|
  PROCESSES.each do |processes|
    puts "\n#{op}s, #{processes} process#{processes > 1 ? 'es' : ''} (operations/s, all processes together)"
    puts format("  %-18s %10s %10s %13s %14s %12s %12s", "", "best", "median", "ours/it best", "ours/it median",
                "CPU us/op", "it/ours CPU")
    mine = results[[op, processes, table.keys.first]]
    mine_cpu = mine.sum { |m| m[2] } / mine.sum { |m| m[1] }
    table.each_key do |name|
      runs = results[[op, processes, name]]
      xs = runs.map(&:first)
      cpu = runs.sum { |m| m[2] } / runs.sum { |m| m[1] }
      puts format("  %-18s %10.0f %10.0f %12.2fx %13.2fx %12.2f %11.2fx", name, xs.max, median(xs),
                  mine.map(&:first).max / xs.max, median(mine.map(&:first)) / median(xs), cpu * 1e6, cpu / mine_cpu)
    end
  end
end
File.write(ENV["BENCH_JSON"], JSON.generate(results.transform_keys { |k| k.join("/") })) if ENV["BENCH_JSON"]
