# frozen_string_literal: true

# The chaos harness with Ruby workers: Ruby processes setting and reading self-checking
# values (Tests/CheckedValues' format) are SIGKILLed at random, and restarted, while
# Swift processes (the helper's writer and reader) set and read the same keys. Nothing
# read may be corrupt or wrong, and the file must verify clean afterwards.
require_relative "test_helper"
require_relative "ruby_worker"
require "json"

class ChaosTest < CacheTestCase
  SECONDS = Float(ENV.fetch("MAPPEDCACHE_CHAOS_SECONDS", "5"))
  KEYS = 500
  MIN_KILLS = 10

  def spawn_capture(*command)
    out_r, out_w = IO.pipe
    err_r, err_w = IO.pipe
    pid = Process.spawn(*command, out: out_w, err: err_w)
    out_w.close
    err_w.close
    { pid:, out: out_r, err: err_r }
  end

  # Waits for the process; [stdout, stderr, status].
  def finish(process)
    out = process[:out].read
    err = process[:err].read
    [process[:out], process[:err]].each(&:close)
    [out, err, Process.wait2(process[:pid])[1]]
  end

  def test_ruby_workers_killed_at_random_beside_swift_processes
    helper = swift_binary("mc-test-helper")
    cache = open_cache(capacity: 32 << 20, value_type: "bytes")
    problems = "#{@path}.problems"
    stop = "#{@path}.stop"
    rng = Random.new(31)
    swift_writer = ->(i) { spawn_capture(helper, "writer", @path, i.to_s, (SECONDS + 1).to_s, KEYS.to_s, "16", "2000") }
    ruby_worker = ->(slot) { spawn_capture(*TestSupport.ruby_worker("chaos", @path, slot, KEYS, problems, stop)) }
    writers = [swift_writer.call(1), swift_writer.call(2)]
    reader = spawn_capture(helper, "reader", @path, (SECONDS + 5).to_s, KEYS.to_s)
    workers = (0...4).map { |slot| ruby_worker.call(slot) }
    kills = 0
    killed_writer = false
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    finish_at = started + SECONDS
    # SECONDS of kills, and at least MIN_KILLS however slowly a loaded machine restarts
    # workers (within the Swift reader's SECONDS + 5).
    while (now = Process.clock_gettime(Process::CLOCK_MONOTONIC)) < finish_at || (kills < MIN_KILLS && now < finish_at + 4)
      sleep rng.rand(0.1..0.3)
      slot = rng.rand(workers.size)
      Process.kill(:KILL, workers[slot][:pid])
      _, err, status = finish(workers[slot])
      assert_equal Signal.list["KILL"], status.termsig, "worker #{slot} had already exited: #{err}"
      workers[slot] = ruby_worker.call(slot)
      kills += 1
      next if killed_writer || Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish_at - SECONDS / 2

      # One Swift writer killed too, mid-run, and replaced.
      Process.kill(:KILL, writers[0][:pid])
      finish(writers[0])
      writers[0] = swift_writer.call(3)
      killed_writer = true
    end
    File.write(stop, "")
    outputs = workers.map { |w| finish(w) }
    swift = (writers + [reader]).map { |p| finish(p) }

    reported = File.exist?(problems) ? File.read(problems) : ""
    # The file's counters go with a failure: busy misses, takeovers and repairs tell a
    # read that gave up on a bucket from an entry that was lost.
    assert_equal "", reported, "workers read corrupt or wrong values; counters: #{cache.stats}"
    outputs.each do |out, err, status|
      assert status.success?, err
      counts = JSON.parse(out.lines.last)
      assert_equal [0, 0], counts.values_at("corrupt", "wrong")
      assert_operator counts["sets"], :>, 0
      assert_operator counts["hits"], :>, 0
    end
    swift.each do |out, err, status|
      assert status.success?, err
      assert_equal 0, JSON.parse(out.lines.last)["corrupt"]
    end
    assert_operator kills, :>=, MIN_KILLS

    # Every entry left in the file checks, and the file verifies clean.
    entries = cache.to_a
    assert_operator entries.size, :>, KEYS / 2
    assert_equal [], entries.reject { |k, v| Checked.check(v, k) }.map(&:first)
    assert_equal 0, cache.verify
    warn "\nchaos: #{kills} Ruby workers SIGKILLed in #{SECONDS.round} s, #{entries.size} entries checked"
  end
end
