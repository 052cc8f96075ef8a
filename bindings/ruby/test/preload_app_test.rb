# frozen_string_literal: true

# A store opened before Puma or Unicorn forks its workers (preload_app!) keeps working in
# every worker: each request reads what the master wrote before the fork and increments a
# counter that every worker shares. Needs Debian's puma and unicorn (.ci/ruby.sh installs them).
require_relative "test_helper"
require "fileutils"
require "socket"

class PreloadAppTest < CacheTestCase
  APP = <<~'RUBY'
    require "active_support"
    require "active_support/cache/mapped_cache_store"
    # Opened in the master, before the workers are forked.
    STORE = ActiveSupport::Cache.lookup_store(:mapped_cache_store, ENV.fetch("MC_PATH"), { capacity: 4 << 20 })
    STORE.write("preloaded", "by #{Process.pid}")
    run lambda { |_env|
      sleep 0.02 # requests overlap, so that every worker serves some
      count = STORE.increment("requests")
      [200, { "content-type" => "text/plain" }, ["#{Process.pid} #{STORE.read('preloaded')} #{count}"]]
    }
  RUBY

  def get(socket_path)
    UNIXSocket.open(socket_path) do |s|
      s.write("GET / HTTP/1.0\r\nHost: test\r\n\r\n")
      s.read.split("\r\n\r\n", 2).last
    end
  end

  def serve(command, socket_path)
    pid = Process.spawn({ "MC_PATH" => @path }, *command, chdir: File.dirname(socket_path), out: File::NULL,
                        err: "#{socket_path}.log", pgroup: true)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
    until File.socket?(socket_path) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      pid = nil if Process.wait(pid, Process::WNOHANG)
      break if pid.nil?

      sleep 0.1
    end
    assert File.socket?(socket_path), "the server did not start: #{File.read("#{socket_path}.log") rescue ''}"
    yield
  ensure
    if pid
      Process.kill(:TERM, pid)
      Process.wait(pid)
    end
  end

  def check_workers(server, command_for)
    exe = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |d| File.join(d, server) }.find { |p| File.executable?(p) }
    TestSupport.unavailable(self, "#{server} is not installed (apt-get install #{server})") unless exe
    dir = "#{@path}.d"
    Dir.mkdir(dir)
    File.write(File.join(dir, "config.ru"), APP)
    socket_path = File.join(dir, "http.sock")
    bodies = []
    serve(command_for.call(exe, dir, socket_path), socket_path) do
      # Rounds of 6 requests at a time until both workers have served (at most 10 rounds).
      10.times do
        bodies += Array.new(6) { Thread.new { Array.new(5) { get(socket_path) } } }.flat_map(&:value)
        break if bodies.map { |b| b.split[0] }.uniq.size == 2
      end
    end
    pids = bodies.map { |b| b.split[0] }.uniq
    master = bodies.first.split[2]
    assert_equal 2, pids.size, "both workers served: #{bodies.first(3)}"
    refute_includes pids, master, "the value was written by the master, before the fork"
    assert(bodies.all? { |b| b.split[1..2] == ["by", master] }, bodies.first(3).inspect)
    assert_equal (1..bodies.size).to_a, bodies.map { |b| b.split[3].to_i }.sort
    cache = open_cache
    assert_equal bodies.size.to_s, cache.get("requests")
  ensure
    FileUtils.rm_rf("#{@path}.d")
  end

  def test_puma_preload_app_workers_share_the_store
    check_workers("puma", lambda { |exe, dir, sock|
      [exe, "--workers", "2", "--preload", "--bind", "unix://#{sock}", "--threads", "1:4", File.join(dir, "config.ru")]
    })
  end

  def test_unicorn_preload_app_workers_share_the_store
    check_workers("unicorn", lambda { |exe, dir, sock|
      File.write(File.join(dir, "unicorn.rb"), "worker_processes 2\npreload_app true\ntimeout 30\n")
      [exe, "-c", File.join(dir, "unicorn.rb"), "-l", sock, File.join(dir, "config.ru")]
    })
  end
end
