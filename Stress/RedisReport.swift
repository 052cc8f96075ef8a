import Foundation
import MappedCacheRedis

/// The Redis mode's report: throughput, hit ratio, the staleness of stale reads
/// (percentiles of their lateness, from the merged histogram; the maximum exact),
/// violations of the bound, the checks, the faults and each host's near-cache figures.
struct RedisRunReport {
  let options: StressOptions
  let url: String
  let merged: RedisMerged
  let before: [NearCacheStatistics]
  let after: [NearCacheStatistics]
  let faults: RedisFaults
  /// Tracking connections in CLIENT LIST, sampled once a second.
  let tracking: [Int]
  /// Per host, the oldest its fence (last confirmed heartbeat) was seen during the run.
  let maxHeartbeatAgeMs: [UInt64]
  let toolErrors: Int
  let seconds: Double

  var c: RedisCounters { merged.counters }
  func sum(_ field: KeyPath<NearCacheStatistics, UInt64>) -> UInt64 {
    zip(after, before).reduce(0) { $0 &+ ($1.0[keyPath: field] &- $1.1[keyPath: field]) }
  }
  /// Reads served from the hosts' files: those that did not fetch from Redis.
  var hitRatio: Double {
    c.reads == 0 ? 0 : max(0, 1 - Double(sum(\.remoteFetches)) / Double(c.reads))
  }
  var boundMs: Double { Double(RedisWorker.boundNs(options)) / 1e6 }
  func stale(_ p: Double) -> UInt64 { merged.staleHist.percentile(p) }
  func writeStale(_ p: Double) -> UInt64 { merged.writeStaleHist.percentile(p) }
  /// The largest lateness of any stale read, which is the largest per-write staleness
  /// too: the write log's (which keeps what a SIGKILLed worker's reads found) or the
  /// workers' published maximum, whichever is larger. Both report lines quote it.
  var maxLateness: UInt64 { max(merged.writeStaleMaxNs, c.maxLatenessNs) }

  var failureReasons: [String] {
    var r: [String] = []
    let bound = String(format: "%.0f ms (maxStaleness + slack)", boundMs)
    if c.reads == 0 { r.append("no read completed") }
    if c.corruptReads > 0 { r.append("\(c.corruptReads) corrupt reads") }
    if c.wrongValues > 0 { r.append("\(c.wrongValues) reads went back in time") }
    if c.violations > 0 {
      r.append("\(c.violations) reads served more than \(bound) after their overwrite")
    }
    if merged.writesPastBound > 0 {
      r.append("\(merged.writesPastBound) writes read more than \(bound) after them (the write log)")
    }
    if c.unknownLateness > 0 { r.append("\(c.unknownLateness) stale reads of unknown lateness") }
    if !faults.any && c.errors + c.writeErrors > 0 {
      r.append("\(c.errors + c.writeErrors) operations failed with no fault made")
    }
    if toolErrors > 0 { r.append("\(toolErrors) tool errors") }
    return r
  }

  func text() -> String {
    let o = options
    let ms = { (v: UInt64) in String(format: "%.3f ms", Double(v) / 1e6) }
    var s = """
      cache-stress --redis: \(o.hosts) hosts × \(o.procs) procs × \(o.threads) threads, \(o.keys) keys, \
      \(o.readPct)% reads (\(o.dist.rawValue)), \(String(format: "%.1f", seconds)) s, maxStaleness \
      \(Int(o.maxStaleness * 1000)) ms, seed \(o.seed ?? 0)
      redis:            \(url)
      reads:            \(Fmt.grouped(c.reads)) (\(Fmt.count(Double(c.reads) / seconds))/s), hit ratio \
      \(String(format: "%.4f", hitRatio)), \(c.absent) absent
      writes:           \(Fmt.grouped(c.writes)) (\(Fmt.count(Double(c.writes) / seconds))/s)
      get latency:      p50 \(Fmt.ns(merged.getHist.percentile(0.5))), p99 \(Fmt.ns(merged.getHist.percentile(0.99)))
      set latency:      p50 \(Fmt.ns(merged.setHist.percentile(0.5))), p99 \(Fmt.ns(merged.setHist.percentile(0.99)))
      staleness:        per write (ack to the last read of the old value, over the \
      \(Fmt.grouped(merged.writeStaleHist.total)) of \(Fmt.grouped(merged.writesLogged)) writes read stale): \
      p50 \(ms(writeStale(0.5))), p99 \(ms(writeStale(0.99))), max \(ms(maxLateness))
      stale reads:      \(Fmt.grouped(c.staleReads)); lateness p50 \(ms(stale(0.5))), p99 \(ms(stale(0.99))), \
      max \(ms(maxLateness))
      violations:       \(c.violations) (stale by more than \(String(format: "%.0f", boundMs)) ms); \
      \(c.unknownLateness) of unknown lateness
      checks:           \(c.corruptReads) corrupt, \(c.wrongValues) back in time, \(c.errors) read errors, \
      \(c.writeErrors) write errors; \(c.lateWriteReads) reads of a version whose SET went unanswered \
      (may have landed late: not judged)
      faults:           \(faults.holderKills) holder kills (\(faults.holderKillsSkipped) skipped: no holder), \
      \(faults.blackholes) black holes of \(Int(o.blackholeFor * 1000)) ms, \(faults.redisKills) redis-server kills, \
      \(faults.reshards) slot moves (\(faults.reshardsFailed) failed), \(faults.failovers) failovers \
      (\(faults.failoversFailed) failed)
      tracking conns:   \(tracking.min().map(String.init) ?? "?")-\(tracking.max().map(String.init) ?? "?") \
      (\(o.hosts) hosts; sampled \(tracking.count) times)

      """
    for (h, (a, b)) in zip(after, before).enumerated() {
      s += """
        host \(h):           invalidations \(a.invalidationsReceived - b.invalidationsReceived) received, \
        \(a.invalidationsApplied - b.invalidationsApplied) applied; remote fetches \(a.remoteFetches - b.remoteFetches); \
        fence misses \(a.fenceMisses - b.fenceMisses); epoch misses \(a.epochMisses - b.epochMisses); \
        reconnects \(a.reconnects - b.reconnects); holder changes \(a.holderChanges - b.holderChanges); \
        oldest heartbeat \(maxHeartbeatAgeMs[h]) ms

        """
    }
    for m in merged.messages.prefix(10) { s += "  \(m)\n" }
    let reasons = failureReasons
    s += reasons.isEmpty ? "PASS\n" : "FAIL: \(reasons.joined(separator: "; "))\n"
    return s
  }

  func json() -> String {
    var j = JSONObject()
    let o = options
    j["mode"] = .string("redis")
    j["hosts"] = .int(o.hosts)
    j["procs"] = .int(o.procs)
    j["threads"] = .int(o.threads)
    j["keys"] = .int(o.keys)
    j["read_pct"] = .int(o.readPct)
    j["duration_s"] = .double(seconds)
    j["seed"] = .string("\(o.seed ?? 0)")
    j["max_staleness_ms"] = .double(o.maxStaleness * 1000)
    jsonReadsAndStaleness(into: &j)
    jsonChecksAndFaults(into: &j)
    return j.rendered
  }

  /// The reads and writes, their latencies and how stale the reads were.
  private func jsonReadsAndStaleness(into j: inout JSONObject) {
    j["reads"] = .int(Int(c.reads))
    j["writes"] = .int(Int(c.writes))
    j["reads_per_s"] = .double((Double(c.reads) / seconds).rounded())
    j["writes_per_s"] = .double((Double(c.writes) / seconds).rounded())
    j["hit_ratio"] = .double((hitRatio * 1e6).rounded() / 1e6)
    j["absent_reads"] = .int(Int(c.absent))
    j["get_p50_ns"] = .int(Int(merged.getHist.percentile(0.5)))
    j["get_p99_ns"] = .int(Int(merged.getHist.percentile(0.99)))
    j["set_p50_ns"] = .int(Int(merged.setHist.percentile(0.5)))
    j["set_p99_ns"] = .int(Int(merged.setHist.percentile(0.99)))
    // Per write: from its acknowledgement to the last read (on any host) of the value it
    // replaced, over the writes some read saw stale.
    j["writes_read_stale"] = .int(Int(merged.writeStaleHist.total))
    j["writes_logged"] = .int(Int(merged.writesLogged))
    j["staleness_p50_us"] = .double(Double(writeStale(0.5)) / 1000)
    j["staleness_p99_us"] = .double(Double(writeStale(0.99)) / 1000)
    j["staleness_max_us"] = .double(Double(maxLateness) / 1000)
    j["writes_past_bound"] = .int(Int(merged.writesPastBound))
    // Per stale read: how long after the overwrite's acknowledgement it began.
    j["stale_reads"] = .int(Int(c.staleReads))
    j["stale_read_p50_us"] = .double(Double(stale(0.5)) / 1000)
    j["stale_read_p99_us"] = .double(Double(stale(0.99)) / 1000)
    j["violations"] = .int(Int(c.violations))
    j["violation_bound_ms"] = .double(boundMs)
    j["unknown_lateness"] = .int(Int(c.unknownLateness))
  }

  /// The checks' findings, the faults made, the hosts' figures, and whether it passed.
  private func jsonChecksAndFaults(into j: inout JSONObject) {
    j["corrupt_reads"] = .int(Int(c.corruptReads))
    j["wrong_values"] = .int(Int(c.wrongValues))
    j["errors"] = .int(Int(c.errors))
    j["write_errors"] = .int(Int(c.writeErrors))
    j["late_write_reads"] = .int(Int(c.lateWriteReads))
    j["holder_kills"] = .int(faults.holderKills)
    j["blackholes"] = .int(faults.blackholes)
    j["redis_kills"] = .int(faults.redisKills)
    j["reshards"] = .int(faults.reshards)
    j["reshards_failed"] = .int(faults.reshardsFailed)
    j["failovers"] = .int(faults.failovers)
    j["failovers_failed"] = .int(faults.failoversFailed)
    j["tracking_connections_min"] = tracking.min().map { .int($0) } ?? .null
    j["tracking_connections_max"] = tracking.max().map { .int($0) } ?? .null
    j["invalidations_received"] = .int(Int(sum(\.invalidationsReceived)))
    j["invalidations_applied"] = .int(Int(sum(\.invalidationsApplied)))
    j["remote_fetches"] = .int(Int(sum(\.remoteFetches)))
    j["fence_misses"] = .int(Int(sum(\.fenceMisses)))
    j["epoch_misses"] = .int(Int(sum(\.epochMisses)))
    j["reconnects"] = .int(Int(sum(\.reconnects)))
    j["holder_changes"] = .int(Int(sum(\.holderChanges)))
    j["max_heartbeat_age_ms"] = .int(Int(maxHeartbeatAgeMs.max() ?? 0))
    j["messages"] = .strings(merged.messages)
    j["pass"] = .bool(failureReasons.isEmpty)
  }
}
