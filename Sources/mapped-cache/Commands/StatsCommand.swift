import Foundation
import MappedCache
import MappedCacheRedis
import SystemCalls

/// `mapped-cache stats PATH [--json] [--watch SECONDS] [--prometheus] [--serve ADDRESS]`
enum StatsCommand {
  /// Everything `stats` prints, read at one moment (no lock: counters are atomic words).
  struct Snapshot {
    var at: Date
    var stats: CacheStatistics
    var table: CacheFile.TableFigures
    var sweeperSlot: Int
    var processes: [CacheFile.AttachedProcess]
    /// The live process in the write lock at that moment (a stopped one holds up every writer).
    var lockHolder: CacheFile.AttachedProcess?
    var path: String
    /// The Redis near cache's figures, when the file is one.
    var near: NearCacheStatistics?

    init(_ file: CacheFile) {
      at = Date()
      stats = file.statistics
      table = file.tableFigures
      sweeperSlot = file.sweeperSlot
      processes = file.attachedProcesses
      lockHolder = file.writeLockHolder
      path = file.path
      near = NearCacheStatistics.read(path: file.path)
    }
  }

  /// Counters shown with a rate under --watch: (label, JSON/Prometheus name, value).
  static func counters(_ s: CacheStatistics) -> [(label: String, name: String, value: Int)] {
    [
      ("hits", "hits", s.hits), ("misses", "misses", s.misses), ("busy misses", "busy_misses", s.busyMisses),
      ("sets", "sets", s.sets),
      ("removals", "removals", s.removals), ("evictions", "evictions", s.evictions),
      ("expirations", "expirations", s.expirations), ("promotions", "promotions", s.promotions),
      ("reinsertions", "reinsertions", s.reinsertions), ("recoveries", "recoveries", s.recoveries),
      ("lock takeovers", "lock_takeovers", s.lockTakeovers), ("inserts", "inserts", s.inserts),
      ("ghost hits", "ghost_hits", s.ghostHits),
    ]
  }

  static func run(_ inv: Invocation) throws -> Int32 {
    let json = inv.flag("--json")
    let prometheus = inv.flag("--prometheus")
    if json && prometheus { throw inv.usageError("--json and --prometheus cannot be combined") }
    let watch = try inv.seconds("--watch", allowZero: false)
    let count = try inv.integer("--count", in: 1...Int.max)
    if count != nil && watch == nil { throw inv.usageError("--count needs --watch") }
    if let w = watch, w < 0.05 { throw inv.usageError("--watch must be at least 0.05 seconds") }
    if let addressText = inv.value("--serve") {
      if json || prometheus || watch != nil || count != nil {
        throw inv.usageError("--serve cannot be combined with --json, --prometheus, --watch or --count")
      }
      let address: ListenAddress
      switch ListenAddress.parse(addressText) {
      case .success(let a): address = a
      case .failure(let m): throw inv.usageError("--serve \(addressText): \(m.text)")
      }
      return try serve(Opening.forReading(inv), at: address)
    }
    let file = try Opening.forReading(inv)

    guard let interval = watch else {
      let s = Snapshot(file)
      if json {
        Output.line(JSON.string(jsonObject(s, previous: nil)))
      } else if prometheus {
        Output.out(Prometheus.exposition(s))
      } else {
        Output.out(human(s, previous: nil))
      }
      return ExitCode.ok
    }

    // Watch: refresh until interrupted (SIGINT/SIGTERM end it cleanly, exit 0) or
    // until --count refreshes. On a terminal the screen is redrawn; otherwise each
    // refresh is appended (JSON: one object per line).
    Signals.installInterruptHandler()
    let redraw = !json && !prometheus && SystemCall.isTerminal(1)
    var previous: Snapshot? = nil
    var shown = 0
    while true {
      let s = Snapshot(file)
      if json {
        Output.line(JSON.string(jsonObject(s, previous: previous, watching: true), pretty: false))
      } else if prometheus {
        Output.out(Prometheus.exposition(s) + "\n")
      } else {
        if redraw { Output.out("\u{1B}[H\u{1B}[2J") } else if shown > 0 { Output.line() }
        Output.line("\(Units.date(s.at))  every \(Units.seconds(interval))  (Ctrl-C to stop)")
        Output.out(human(s, previous: previous))
      }
      Output.flush()
      shown += 1
      previous = s
      if let count, shown >= count { break }
      if !Signals.sleep(interval) { break }
    }
    return ExitCode.ok
  }

  // MARK: Human

  static func human(_ s: Snapshot, previous: Snapshot?) -> String {
    var text = "cache \(s.path)\n" + fileTable(s, previous: previous).render()
    if let n = s.near { text += "\n" + nearTable(n).render() }
    return text
  }

  /// The growth rows of the table: the growths so far and the policy.
  private static func growthRows(_ st: CacheStatistics) -> [(String, String, String)] {
    let history = st.growthHistory.map { g in
      "\(Units.date(g.date)) to \(Units.bytes(g.capacity))"
        + (g.ghostHitRate.map { " (ghost hits \(Units.percent($0)) of new keys)" } ?? " (by hand)")
    }
    let policy =
      st.growthPolicy.map { p in
        (
          "growth policy", "grow ×\(p.factor) when ghost hits reach \(Units.percent(p.ghostHitRate)) of new keys",
          "at most every \(Int(p.minimumInterval)) s, after \(Units.count(p.minimumInserts)) new keys"
        )
      } ?? ("growth policy", "none", "mapped-cache grow grows it by hand")
    return [("growths", Units.count(st.growths), history.joined(separator: "; ")), policy]
  }

  /// The file's figures (with the rate of each counter since `previous`, when given).
  private static func fileTable(_ s: Snapshot, previous: Snapshot?) -> TextTable {
    let st = s.stats
    let t = s.table
    let elapsed = previous.map { s.at.timeIntervalSince($0.at) } ?? 0
    var rates: [String: Double] = [:]
    if let p = previous, elapsed > 0 {
      for (c, old) in zip(counters(st), counters(p.stats)) { rates[c.name] = Double(c.value - old.value) / elapsed }
    }
    var table = TextTable(
      header: previous == nil ? ["FIGURE", "VALUE", "NOTE"] : ["FIGURE", "VALUE", "RATE", "NOTE"],
      align: previous == nil ? [.left, .right, .left] : [.left, .right, .right, .left])
    func add(_ label: String, _ value: String, _ note: String = "", rate: String? = nil) {
      table.add(previous == nil ? [label, value, note] : [label, value, rate ?? "", note])
    }
    add(
      "entries", Units.count(st.entries),
      "the index holds \(Units.count(st.maxEntries)) before it grows")
    add("live bytes", Units.bytes(st.liveBytes), "keys and values")
    add("capacity", Units.bytes(st.capacity))
    add("fill", Units.percent(st.fill), "live bytes / capacity")
    add(
      "log used", Units.bytes(st.logBytesUsed),
      "\(Units.percent(Double(st.logBytesUsed) / Double(max(1, st.logBytes)))) of \(Units.bytes(st.logBytes))")
    for c in counters(st) {
      add(c.label, Units.count(c.value), note(for: c.name), rate: rates[c.name].map(Units.rate))
      if c.name == "misses" {
        add(
          "hit ratio", Units.percent(st.hitRatio), st.hits + st.misses == 0 ? "no reads yet" : "hits / (hits + misses)")
      }
    }
    add("table load", Units.percent(t.load), "\(Units.count(t.occupiedSlots)) of \(Units.count(t.slotCount)) slots")
    add("second place", Units.percent(t.meanProbe), "entries in their key's second bucket")
    add(
      "index", "\(Units.count(t.groups)) groups",
      "\(Units.bytes(st.indexBytes)), \(st.indexSplits) splits, \(st.indexMerges) merges")
    add("partitions", Units.count(st.partitionCount), "a write lock, an index and two logs each")
    for row in growthRows(st) { add(row.0, row.1, row.2) }
    add("clock hand", Units.bytes(st.sweepHand), "main log tail position (eviction)")
    add("sweeper hand", Units.count(s.sweeperSlot), "next slot of the expiry sweeper")
    add("count limit", st.countLimit == 0 ? "none" : Units.count(st.countLimit))
    add("cost limit", st.costLimit == 0 ? "none" : Units.bytes(st.costLimit))
    add(
      "processes", Units.count(s.processes.count),
      s.processes.isEmpty
        ? "with the file open for writing" : "pids " + s.processes.map { "\($0.pid)" }.joined(separator: ", "))
    add(
      "write lock", s.lockHolder.map { "pid \($0.pid)" } ?? "free",
      s.lockHolder == nil ? "" : "held at this moment (a stopped holder holds up every writer)")
    return table
  }

  /// A near-cache file's figures (`NearCacheStatistics`).
  private static func nearTable(_ n: NearCacheStatistics) -> TextTable {
    var t = TextTable(header: ["NEAR CACHE", "VALUE", "NOTE"], align: [.left, .right, .left])
    func add(_ label: String, _ value: UInt64, _ note: String) { t.add([label, Units.count(Int(value)), note]) }
    t.add(["holder", n.holderPID.map { "\($0)" } ?? "none", n.holderPID == nil ? "" : n.holderAlive ? "alive" : "dead"])
    for (i, age) in n.heartbeatAgeMilliseconds.enumerated() {
      t.add([
        "heartbeat age", age.map { "\($0) ms" } ?? "never",
        "node \(i < n.heartbeatNodes.count ? n.heartbeatNodes[i] : "\(i)")\(n.fenceFresh ? "" : ", fenced: reads go to Redis")",
      ])
    }
    if !n.heartbeatNodes.isEmpty {
      add("MOVED", n.movedRedirects, "cluster redirects followed")
      add("ASK", n.askRedirects, "redirects during slot migrations")
      add("slot maps", n.slotMapRefreshes, "read by the holder")
      add("slot buckets dropped", n.slotBucketsDropped, "a slot of theirs moved")
    }
    if n.leaseWins + n.leaseWaits + n.leaseTakeovers + n.leasesLost + n.leaseStaleServes > 0 {
      add("leases won", n.leaseWins, "fleet-wide computes")
      add("lease waits", n.leaseWaits, "for another owner's value")
      add("lease takeovers", n.leaseTakeovers, "after an owner's lease expired")
      add("leases lost", n.leasesLost, "values not stored")
      add("lease stale serves", n.leaseStaleServes, "stale copies while another computed")
    }
    t.add(["epoch", "\(n.epoch)", "tracking sessions and flushes"])
    add("invalidations", n.invalidationsReceived, "keys received")
    add("applied", n.invalidationsApplied, "keys that were in the file")
    add("flushes", n.flushes, "null invalidations")
    add("reconnects", n.reconnects, "tracking sessions after a holder's first")
    add("holder changes", n.holderChanges, "times a process took the role")
    add("stale serves", n.staleServes, "served past the fence (serveStale)")
    add("fence misses", n.fenceMisses, "went to Redis: fence too old")
    add("epoch misses", n.epochMisses, "entries of an earlier session")
    t.add([
      "remote fetches", Units.count(Int(n.remoteFetches)),
      String(format: "mean %.1f µs", n.remoteFetchMeanMicroseconds),
    ])
    return t
  }

  private static func note(for name: String) -> String {
    switch name {
    case "evictions": return "removed to make room"
    case "expirations": return "expired entries reclaimed"
    case "promotions": return "small log to main log"
    case "reinsertions": return "second chances at the clock hand"
    case "recoveries": return "repairs after a writer died mid-change"
    case "lock_takeovers": return "locks taken from dead holders"
    default: return ""
    }
  }

  // MARK: JSON

  static func jsonObject(_ s: Snapshot, previous: Snapshot?, watching: Bool = false) -> [String: Any] {
    let st = s.stats
    let t = s.table
    var o: [String: Any] = [
      "path": s.path, "entries": st.entries, "max_entries": st.maxEntries, "live_bytes": st.liveBytes,
      "capacity_bytes": st.capacity, "fill": JSON.number(st.fill), "log_bytes": st.logBytes,
      "log_used_bytes": st.logBytesUsed, "hit_ratio": JSON.number(st.hitRatio),
      "clock_hand": st.sweepHand, "sweeper_slot": s.sweeperSlot,
      "count_limit": st.countLimit, "cost_limit_bytes": st.costLimit,
      "table": [
        "slots": t.slotCount, "occupied_slots": t.occupiedSlots, "load": JSON.number(t.load),
        "second_place_share": JSON.number(t.meanProbe), "groups": t.groups,
        "index_bytes": st.indexBytes, "index_splits": st.indexSplits, "index_merges": st.indexMerges,
        "partitions": st.partitionCount,
      ] as [String: Any],
      "growths": st.growths,
      "growth_history": st.growthHistory.map { g in
        [
          "date": Units.date(g.date), "capacity_bytes": g.capacity,
          "ghost_hit_rate": g.ghostHitRate.map { JSON.number($0) as Any } ?? NSNull(),
        ] as [String: Any]
      },
      "growth_policy": st.growthPolicy.map { p in
        [
          "ghost_hit_rate": JSON.number(p.ghostHitRate), "factor": JSON.number(p.factor),
          "minimum_interval_s": JSON.number(p.minimumInterval), "minimum_inserts": p.minimumInserts,
        ] as [String: Any]
      } ?? NSNull(),
      "processes": s.processes.map { ["pid": $0.pid, "opened": Units.date($0.opened)] as [String: Any] },
      "write_lock_holder_pid": s.lockHolder.map { $0.pid as Any } ?? NSNull(),
    ]
    for c in counters(st) { o[c.name] = c.value }
    if let p = previous {
      let elapsed = s.at.timeIntervalSince(p.at)
      var rates: [String: Any] = [:]
      for (c, old) in zip(counters(st), counters(p.stats)) {
        rates[c.name] = JSON.number(elapsed > 0 ? Double(c.value - old.value) / elapsed : 0, digits: 3)
      }
      o["rates_per_second"] = rates
      o["interval_seconds"] = JSON.number(elapsed, digits: 3)
    }
    if watching { o["time"] = Units.date(s.at) }
    if let n = s.near { o["near_cache"] = nearObject(n) }
    return o
  }

  static func nearObject(_ n: NearCacheStatistics) -> [String: Any] {
    [
      "holder_pid": n.holderPID.map { Int($0) } as Any? ?? NSNull(), "holder_alive": n.holderAlive,
      "heartbeat_age_ms": n.heartbeatAgeMilliseconds.map { $0.map { Int($0) } as Any? ?? NSNull() },
      "fence_fresh": n.fenceFresh, "epoch": Int(n.epoch),
      "invalidations_received": Int(n.invalidationsReceived), "invalidations_applied": Int(n.invalidationsApplied),
      "flushes": Int(n.flushes), "reconnects": Int(n.reconnects), "holder_changes": Int(n.holderChanges),
      "stale_serves": Int(n.staleServes), "fence_misses": Int(n.fenceMisses), "epoch_misses": Int(n.epochMisses),
      "remote_fetches": Int(n.remoteFetches), "remote_fetch_mean_us": JSON.number(n.remoteFetchMeanMicroseconds),
      "heartbeat_nodes": n.heartbeatNodes, "moved_redirects": Int(n.movedRedirects),
      "ask_redirects": Int(n.askRedirects), "slot_map_refreshes": Int(n.slotMapRefreshes),
      "slot_buckets_dropped": Int(n.slotBucketsDropped), "lease_wins": Int(n.leaseWins),
      "lease_waits": Int(n.leaseWaits), "lease_takeovers": Int(n.leaseTakeovers), "leases_lost": Int(n.leasesLost),
      "lease_stale_serves": Int(n.leaseStaleServes),
    ]
  }
}
