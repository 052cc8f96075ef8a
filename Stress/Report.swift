import Foundation
import MappedCache

/// The outcome of one run: printed as a table, or as one JSON object with `--json`.
struct RunReport {
  var options: StressOptions
  var merged: MergedResults
  /// Failures of the run itself (a worker that died unasked, left no result, ...).
  var toolErrors: UInt64
  var kills: Int
  /// Workers SIGKILLed at least once (their later incarnations may start too late to run).
  var killedWorkers: Set<Int> = []
  /// Cache statistics just before the workers started and after they stopped.
  var before: CacheStatistics
  var after: CacheStatistics
  var verifyOK: Bool
  var verifyProblems: [String]
  var prefillSeconds: Double
  /// The file, when the user chose it (ours is removed).
  var path: String?
  var killEvents: [KillEvent] = []
  /// Per worker, its last incarnation (0: never killed).
  var incarnations: [Int] = []
  /// `--grow-every`: each growth of the cache.
  var growthEvents: [GrowthEvent] = []

  /// Per growth: the worst [get p99, get max, set p99, set max] (ns) of the seconds it
  /// covered; and the same over the seconds no growth touched (the baseline).
  var growthLatency: (perGrowth: [[UInt64]], baseline: [UInt64]) {
    let tl = merged.timeline
    var touched = Set<Int>()
    var per: [[UInt64]] = []
    for g in growthEvents {
      let first = tl.bucket(atSeconds: g.seconds)
      let last = tl.bucket(atSeconds: g.seconds + g.took)
      per.append(tl.worstLatency(buckets: first..<(last + 1)))
      for b in first...last { touched.insert(b) }
    }
    var base: [UInt64] = [0, 0, 0, 0]
    for b in tl.buckets.indices where !touched.contains(b) {
      let w = tl.worstLatency(buckets: b..<(b + 1))
      for j in 0..<4 { base[j] = max(base[j], w[j]) }
    }
    return (per, base)
  }

  var ops: UInt64 { merged.getOps + merged.setOps }
  var opsPerSecond: Double { Double(ops) / options.duration }
  var hitRatio: Double { merged.getOps == 0 ? 0 : Double(merged.hits) / Double(merged.getOps) }
  var errors: UInt64 { merged.errors + toolErrors }
  /// The fewest operations any thread of any worker completed (over its incarnations);
  /// 0 when one made none: every thread must make progress.
  var minThreadOps: UInt64 { minThreadOps(of: 0..<options.procs) }
  /// The same over the workers never killed: on a starved machine a victim's next
  /// incarnation may be ready only after the end, and the victim flush nothing first.
  var minThreadOpsUnkilled: UInt64 { minThreadOps(of: (0..<options.procs).filter { !killedWorkers.contains($0) }) }

  func minThreadOps<S: Sequence>(of workers: S) -> UInt64 where S.Element == Int {
    var m = UInt64.max
    for w in workers {
      let t = merged.threadOps[w] ?? []
      for i in 0..<options.threads { m = min(m, i < t.count ? t[i] : 0) }
    }
    return m == .max ? 0 : m
  }
  var threadsWithoutOps: Int {
    (0..<options.procs).reduce(0) { n, w in
      let t = merged.threadOps[w] ?? []
      return n + (0..<options.threads).filter { $0 >= t.count || t[$0] == 0 }.count
    }
  }

  /// Why the run failed; empty when it passed.
  var failureReasons: [String] {
    var r: [String] = []
    if merged.corruptReads > 0 { r.append("corrupt_reads=\(merged.corruptReads)") }
    if merged.wrongValues > 0 { r.append("wrong_values=\(merged.wrongValues)") }
    if errors > 0 { r.append("errors=\(errors)") }
    if !verifyOK { r.append("verify failed (\(verifyProblems.prefix(3).joined(separator: "; ")))") }
    for g in growthEvents { if let e = g.error { r.append("growth failed: \(e)") } }
    return r
  }

  private func delta(_ a: Int, _ b: Int) -> Int { max(0, a - b) }

  func json() -> String {
    var j = JSONObject()
    jsonOperations(into: &j)
    jsonOutcome(into: &j)
    jsonParameters(into: &j)
    if !growthEvents.isEmpty { jsonGrowths(into: &j) }
    return j.rendered
  }

  /// `--grow-every`: each growth, with the latency of the seconds it covered.
  private func jsonGrowths(into j: inout JSONObject) {
    let (per, base) = growthLatency
    let names = ["get_p99_ns", "get_max_ns", "set_p99_ns", "set_max_ns"]
    j["growths"] = .raw(
      "["
        + zip(growthEvents, per).map { g, l in
          var o = JSONObject()
          o["at_s"] = .double(g.seconds)
          o["took_s"] = .double(g.took)
          o["from_bytes"] = .int(g.fromCapacity)
          o["to_bytes"] = .int(g.toCapacity)
          o["moved_entries"] = .int(g.movedEntries)
          o["longest_step_s"] = .double(g.longestStep)
          if let e = g.error { o["error"] = .string(e) }
          if g.killed { o["killed"] = .bool(true) }
          for (k, n) in zip(names, l) { o[k] = .int(Int(n)) }
          return o.rendered
        }.joined(separator: ",") + "]")
    var b = JSONObject()
    for (k, n) in zip(names, base) { b[k] = .int(Int(n)) }
    j["growth_baseline"] = .raw(b.rendered)
  }

  /// The operations, their latencies and the cache's own counts.
  private func jsonOperations(into j: inout JSONObject) {
    let o = options
    j["procs"] = .int(o.procs)
    j["threads"] = .int(o.threads)
    j["duration_s"] = .double(o.duration)
    j["ops"] = .int(Int(ops))
    j["ops_per_s"] = .double(opsPerSecond.rounded())
    j["entries"] = .int(after.entries)
    j["get_ops"] = .int(Int(merged.getOps))
    j["set_ops"] = .int(Int(merged.setOps))
    j["hits"] = .int(Int(merged.hits))
    j["misses"] = .int(Int(merged.misses))
    // Reads (of any process) that answered "miss" only because a slot stayed mid-write
    // past the readers' bounded wait: a descheduled, stopped or killed writer.
    j["busy_misses"] = .int(delta(after.busyMisses, before.busyMisses))
    j["hit_ratio"] = .double((hitRatio * 1e6).rounded() / 1e6)
    j["get_p50_ns"] = .int(Int(merged.getHist.percentile(0.50)))
    j["get_p99_ns"] = .int(Int(merged.getHist.percentile(0.99)))
    j["get_p999_ns"] = .int(Int(merged.getHist.percentile(0.999)))
    j["set_p50_ns"] = .int(Int(merged.setHist.percentile(0.50)))
    j["set_p99_ns"] = .int(Int(merged.setHist.percentile(0.99)))
    j["set_p999_ns"] = .int(Int(merged.setHist.percentile(0.999)))
    j["get_samples"] = .int(Int(merged.getHist.total))
    j["set_samples"] = .int(Int(merged.setHist.total))
    j["evictions"] = .int(delta(after.evictions, before.evictions))
    j["expirations"] = .int(delta(after.expirations, before.expirations))
    j["recoveries"] = .int(delta(after.recoveries, before.recoveries))
    j["lock_takeovers"] = .int(delta(after.lockTakeovers, before.lockTakeovers))
  }

  /// Kills, progress, the checks' findings, the file after the run.
  private func jsonOutcome(into j: inout JSONObject) {
    j["kills"] = .int(kills)
    j["min_thread_ops"] = .int(Int(minThreadOps))
    j["min_thread_ops_unkilled"] = .int(Int(minThreadOpsUnkilled))
    j["killed_workers"] = .int(killedWorkers.count)
    j["threads_without_ops"] = .int(threadsWithoutOps)
    j["corrupt_reads"] = .int(Int(merged.corruptReads))
    j["wrong_values"] = .int(Int(merged.wrongValues))
    j["errors"] = .int(Int(errors))
    j["verify_ok"] = .bool(verifyOK)
    j["verify_problems"] = .strings(Array(verifyProblems.prefix(10)))
    j["capacity_bytes"] = .int(after.capacity)
    j["live_bytes"] = .int(after.liveBytes)
    j["promotions"] = .int(delta(after.promotions, before.promotions))
    j["reinsertions"] = .int(delta(after.reinsertions, before.reinsertions))
    j["max_entries"] = .int(after.maxEntries)
    j["log_bytes"] = .int(after.logBytes)
    j["log_bytes_used"] = .int(after.logBytesUsed)
  }

  /// The run's parameters, and whether it passed.
  private func jsonParameters(into j: inout JSONObject) {
    let o = options
    j["lock_mode"] = .string(o.lock.rawValue)
    j["track_every"] = .int(o.trackEvery)
    j["check_every"] = .int(o.checkEvery)
    j["mget"] = .int(o.mget)
    j["mset"] = .int(o.mset)
    j["keys"] = .int(o.keys)
    j["key_size"] = .int(o.keySize)
    j["value_size"] = .string(o.valueSizeText)
    j["read_pct"] = .int(o.readPct)
    j["dist"] = .string(o.dist.rawValue)
    j["zipf_theta"] = .double(o.zipfTheta)
    j["ttl_s"] = o.ttl.map { .double($0) } ?? .null
    j["read_through"] = .bool(o.readThrough)
    j["prefill"] = .bool(o.prefill)
    j["prefill_s"] = .double((prefillSeconds * 1000).rounded() / 1000)
    j["seed"] = .string(String(o.seed ?? 0))
    j["path"] = path.map { .string($0) } ?? .null
    j["messages"] = .strings(Array(merged.messages.prefix(10)))
    j["passed"] = .bool(failureReasons.isEmpty)
  }

  /// `--grow-every`: a row per growth, then the seconds no growth touched.
  private func growthRows() -> [(String, String)] {
    guard !growthEvents.isEmpty else { return [] }
    let (per, base) = growthLatency
    func lat(_ l: [UInt64]) -> String {
      "get p99 \(Fmt.ns(l[0])) max \(Fmt.ns(l[1])), set p99 \(Fmt.ns(l[2])) max \(Fmt.ns(l[3]))"
    }
    var rows = zip(growthEvents, per).map { g, l in
      (
        "growth",
        String(
          format: "at %.1f s: %@ → %@ in %.3f s (%@), %d entries moved; its seconds: %@",
          g.seconds, Fmt.bytes(g.fromCapacity), Fmt.bytes(g.toCapacity), g.took,
          g.killed ? GrowthEvent.killedNote : String(format: "longest step %.1f ms", g.longestStep * 1000),
          g.movedEntries, lat(l))
      )
    }
    rows.append(("", "seconds without growth: \(lat(base))"))
    return rows
  }

  func table() -> String {
    let o = options
    let dist = o.dist == .zipf ? "zipf(\(o.zipfTheta))" : "uniform"
    var s = "cache-stress: \(o.procs) procs × \(o.threads) thread\(o.threads == 1 ? "" : "s"), "
    s += String(format: "%.1f s, ", o.duration)
    s += "\(o.keys) keys (\(dist)), \(o.keySize) B keys, \(o.valueSizeText) B values, \(o.readPct)% gets"
    s += o.mget > 1 ? " (up to \(o.mget) per batch read)" : ""
    s += o.mset > 1 ? " (up to \(o.mset) sets per batch write)" : ""
    s += o.readThrough ? ", read-through" : ""
    s += o.ttl.map { ", ttl \($0) s" } ?? ""
    s += ", lock \(o.lock.rawValue), seed \(o.seed ?? 0)\n"
    func row(_ label: String, _ text: String) {
      s += "  " + label.padding(toLength: 14, withPad: " ", startingAt: 0) + text + "\n"
    }
    row("ops", "\(ops)  (\(Fmt.count(opsPerSecond)) ops/s)")
    let busy = delta(after.busyMisses, before.busyMisses)
    row(
      "gets",
      "\(merged.getOps)  hits \(merged.hits), misses \(merged.misses)\(busy > 0 ? " (\(busy) on a busy slot)" : ""), hit ratio \(String(format: "%.2f%%", hitRatio * 100))"
    )
    row("sets", "\(merged.setOps)")
    let g = merged.getHist
    let t = merged.setHist
    row(
      "get latency",
      "p50 \(Fmt.ns(g.percentile(0.5)))  p99 \(Fmt.ns(g.percentile(0.99)))  p99.9 \(Fmt.ns(g.percentile(0.999)))  (\(g.total) samples)"
    )
    row(
      "set latency",
      "p50 \(Fmt.ns(t.percentile(0.5)))  p99 \(Fmt.ns(t.percentile(0.99)))  p99.9 \(Fmt.ns(t.percentile(0.999)))  (\(t.total) samples)"
    )
    row("cache", "\(after.entries) entries, \(Fmt.bytes(after.liveBytes)) live of \(Fmt.bytes(after.capacity))")
    row(
      "during run",
      "evictions \(delta(after.evictions, before.evictions)), expirations \(delta(after.expirations, before.expirations)), recoveries \(delta(after.recoveries, before.recoveries)), lock takeovers \(delta(after.lockTakeovers, before.lockTakeovers))"
    )
    if o.chaosKills > 0 { row("chaos", "\(kills) of \(o.chaosKills) kills done, workers restarted") }
    for (label, text) in growthRows() { row(label, text) }
    row(
      "progress",
      "every thread: at least \(minThreadOps) ops" + (threadsWithoutOps > 0 ? " (\(threadsWithoutOps) made none)" : ""))
    row(
      "checks",
      "corrupt_reads \(merged.corruptReads), wrong_values \(merged.wrongValues)"
        + (o.trackEvery > 1 ? " (1 key in \(o.trackEvery) tracked)" : "")
        + (o.checkEvery > 1 ? " (whole value on 1 read in \(o.checkEvery))" : "")
        + (o.valueMin < ValueFormat.trackedMinimumSize
          ? " (values under \(ValueFormat.trackedMinimumSize) B carry no sequence number: freshness untracked for them)"
          : "")
        + ", errors \(errors), verify \(verifyOK ? "ok" : "FAILED")")
    for p in verifyProblems.prefix(5) { row("", "verify: \(p)") }
    for m in merged.messages.prefix(5) { row("", m) }
    let reasons = failureReasons
    s += reasons.isEmpty ? "result: PASS\n" : "result: FAIL (\(reasons.joined(separator: ", ")))\n"
    return s
  }
}

/// A JSON object with its keys in insertion order (so reports diff well).
struct JSONObject {
  enum Value {
    case int(Int)
    case double(Double)
    case bool(Bool)
    case string(String)
    case strings([String])
    /// Already rendered JSON (a nested object or array).
    case raw(String)
    case null
  }
  private var items: [(String, Value)] = []

  subscript(key: String) -> Value? {
    get { items.first { $0.0 == key }?.1 }
    set {
      items.removeAll { $0.0 == key }
      if let newValue { items.append((key, newValue)) }
    }
  }

  var rendered: String {
    "{" + items.map { "\(Self.quote($0.0)): \(Self.render($0.1))" }.joined(separator: ", ") + "}"
  }

  private static func render(_ v: Value) -> String {
    switch v {
    case .int(let i): return String(i)
    case .double(let d): return d.isFinite ? (d == d.rounded() && abs(d) < 1e15 ? String(Int64(d)) : String(d)) : "null"
    case .bool(let b): return b ? "true" : "false"
    case .string(let s): return quote(s)
    case .strings(let a): return "[" + a.map(quote).joined(separator: ", ") + "]"
    case .raw(let r): return r
    case .null: return "null"
    }
  }

  static func quote(_ s: String) -> String {
    var out = "\""
    for u in s.unicodeScalars {
      switch u {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\t": out += "\\t"
      case "\r": out += "\\r"
      default:
        if u.value < 0x20 { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
      }
    }
    return out + "\""
  }
}

/// Human-readable numbers for the table and the progress line.
enum Fmt {
  static func count(_ v: Double) -> String {
    if v >= 1e9 { return String(format: "%.2fG", v / 1e9) }
    if v >= 1e6 { return String(format: "%.2fM", v / 1e6) }
    if v >= 1e3 { return String(format: "%.1fk", v / 1e3) }
    return String(format: "%.0f", v)
  }

  /// 1234567 → "1,234,567".
  static func grouped(_ n: UInt64) -> String {
    let digits = String(n)
    var out = ""
    for (i, c) in digits.enumerated() {
      if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
      out.append(c)
    }
    return out
  }

  static func ns(_ v: UInt64) -> String {
    if v >= 1_000_000_000 { return String(format: "%.2fs", Double(v) / 1e9) }
    if v >= 1_000_000 { return String(format: "%.2fms", Double(v) / 1e6) }
    if v >= 10_000 { return String(format: "%.1fµs", Double(v) / 1e3) }
    return "\(v)ns"
  }

  static func bytes(_ v: Int) -> String {
    let d = Double(v)
    if d >= Double(1 << 30) { return String(format: "%.2f GiB", d / Double(1 << 30)) }
    if d >= Double(1 << 20) { return String(format: "%.2f MiB", d / Double(1 << 20)) }
    if d >= Double(1 << 10) { return String(format: "%.1f KiB", d / Double(1 << 10)) }
    return "\(v) B"
  }
}
