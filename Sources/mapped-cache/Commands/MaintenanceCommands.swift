import CacheTools
import MappedCache

/// `verify`, `sweep` and `clear`.
enum MaintenanceCommands {
  /// `mapped-cache verify PATH [--repair] [--json]`: exit 0 when the file is sound (with
  /// --repair: sound after repairing), 2 when problems remain.
  static func verify(_ inv: Invocation) throws -> Int32 {
    let repair = inv.flag("--repair")
    let file = try Opening.forWriting(inv)
    if repair && !file.isWritable {
      throw CLIFailure.failed("\(file.path) is not writable by this user: cannot repair")
    }
    let first = try file.verify(repair: repair)
    // After a repair, check again: only a clean second pass earns exit 0.
    let after = repair && !first.ok ? try file.verify(repair: false) : nil
    let sound = after?.ok ?? first.ok

    if inv.flag("--json") {
      var o = json(first)
      o["repair"] = repair
      o["sound"] = sound
      if let after { o["after_repair"] = json(after) }
      Output.line(JSON.string(o))
    } else {
      for p in first.problems { Output.line("problem: \(p)") }
      if repair && first.repaired > 0 {
        Output.line("repaired: \(first.repaired) \(first.repaired == 1 ? "fix" : "fixes")")
      }
      if let after { for p in after.problems { Output.line("remaining problem: \(p)") } }
      if !file.isWritable {
        Output.line(
          "note: the file is read-only for this user, so it was checked without the write lock; "
            + "on a busy cache, changes made during the check can show as problems")
      }
      let r = after ?? first
      var t = TextTable(align: [.left, .right])
      t.add(["entries", Units.count(r.entries)])
      t.add(["live bytes", Units.bytes(r.liveBytes)])
      t.add(["slots checked", Units.count(r.slotsChecked)])
      t.add(["records checked", Units.count(r.recordsChecked)])
      t.add(["log bytes", Units.bytes(r.logBytes)])
      t.add(["dead bytes", Units.bytes(r.deadBytes)])
      t.add(["free-listed bytes", Units.bytes(r.freeBytes)])
      t.add(["mean probe", String(format: "%.2f", r.meanProbe)])
      t.add(["max probe", Units.count(r.maxProbe)])
      Output.out(t.render())
      let verdict: String
      if first.ok {
        verdict = "OK: \(file.path) is consistent"
      } else if sound {
        verdict = "REPAIRED: \(file.path) had \(first.problems.count) problem(s) and is now consistent"
      } else if repair {
        verdict = "DAMAGED: \(file.path) still has problems after repair; recreate the cache"
      } else {
        verdict =
          "DAMAGED: \(file.path) has \(first.problems.count) problem(s); run '\(Usage.tool) verify \(file.path) --repair'"
      }
      Output.line(verdict)
    }
    if !sound { throw CLIFailure.invalidCache("") }
    return ExitCode.ok
  }

  static func json(_ r: VerifyReport) -> [String: Any] {
    [
      "ok": r.ok, "problems": r.problems, "repaired": r.repaired, "entries": r.entries,
      "live_bytes": r.liveBytes, "slots_checked": r.slotsChecked, "records_checked": r.recordsChecked,
      "log_bytes": r.logBytes, "dead_bytes": r.deadBytes, "free_bytes": r.freeBytes,
      "max_probe": r.maxProbe, "mean_probe": JSON.number(r.meanProbe),
    ]
  }

  /// `mapped-cache grow PATH [--capacity SIZE] [--policy SPEC|off] [--json]`
  static func grow(_ inv: Invocation) throws -> Int32 {
    let capacity = try inv.size("--capacity")
    let policyText = inv.value("--policy")
    let policy = try policyText.map { text throws(CLIFailure) in try growthPolicy(text, inv) } ?? nil
    guard capacity != nil || policyText != nil else {
      throw inv.usageError("grow needs --capacity SIZE or --policy")
    }
    let file = try writable(inv)
    if policyText != nil { try file.setGrowthPolicy(policy) }
    guard let capacity else {
      Output.line(policy == nil ? "no growth policy for \(file.path)" : "growth policy of \(file.path) set")
      return ExitCode.ok
    }
    let before = file.statistics
    let g = try file.grow(toCapacity: capacity)
    if inv.flag("--json") {
      Output.line(
        JSON.string([
          "capacity_before": before.capacity, "capacity": g.capacity, "partitions_before": before.partitionCount,
          "partitions": g.partitions, "moved_entries": g.movedEntries,
          "longest_step_s": JSON.number(g.longestStepSeconds),
        ]))
    } else {
      Output.line(
        "grew \(file.path) from \(Units.bytes(before.capacity)) to \(Units.bytes(g.capacity)) "
          + "(\(before.partitionCount) to \(g.partitions) partitions, \(Units.count(g.movedEntries)) entries moved; "
          + String(format: "writers of a partition waited at most %.1f ms)", g.longestStepSeconds * 1000))
    }
    return ExitCode.ok
  }

  /// `--policy RATE[:FACTOR[:SECONDS[:INSERTS]]]`, or `off` (nil: no policy).
  static func growthPolicy(_ text: String, _ inv: Invocation) throws(CLIFailure) -> GrowthPolicy? {
    if text == "off" { return nil }
    guard let p = GrowthPolicySpec.parse(text) else {
      throw inv.usageError("--policy wants \(GrowthPolicySpec.syntax) or off, not \(text)")
    }
    return p
  }

  /// `mapped-cache sweep PATH`
  static func sweep(_ inv: Invocation) throws -> Int32 {
    let file = try writable(inv)
    let removed = try file.sweep()
    Output.line("removed \(Units.count(removed)) expired \(removed == 1 ? "entry" : "entries")")
    return ExitCode.ok
  }

  /// `mapped-cache clear PATH`
  static func clear(_ inv: Invocation) throws -> Int32 {
    let file = try writable(inv)
    let before = file.statistics.entries
    try file.clear()
    Output.line("removed every entry (\(Units.count(before)) before)")
    return ExitCode.ok
  }

  private static func writable(_ inv: Invocation) throws -> CacheFile {
    let file = try Opening.forWriting(inv)
    if !file.isWritable { throw CLIFailure.failed("\(file.path) is not writable by this user") }
    return file
  }
}
