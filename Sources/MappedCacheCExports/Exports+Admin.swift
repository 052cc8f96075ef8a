import CMappedCacheABI
import MappedCache

// mappedcache.h: mc_stats_get, mc_verify, mc_grow, mc_set_growth_policy, mc_foreach.

@_cdecl("mc_stats_get")
public func mcStatsGet(_ cache: OpaquePointer?, _ stats: UnsafeMutablePointer<mc_stats>?) -> Int32 {
  Handles.withStore(cache) { store in
    let out = try Arguments.output(stats, "the stats pointer")
    let s = store.statistics
    var c = mc_stats()
    c.struct_size = MemoryLayout<mc_stats>.size
    c.entries = Int64(s.entries)
    c.live_bytes = Int64(s.liveBytes)
    c.capacity = Int64(s.capacity)
    c.hits = Int64(s.hits)
    c.misses = Int64(s.misses)
    c.busy_misses = Int64(s.busyMisses)
    c.sets = Int64(s.sets)
    c.evictions = Int64(s.evictions)
    c.expirations = Int64(s.expirations)
    c.recoveries = Int64(s.recoveries)
    c.removals = Int64(s.removals)
    c.lock_takeovers = Int64(s.lockTakeovers)
    c.slot_count = Int64(s.slotCount)
    c.max_entries = Int64(s.maxEntries)
    c.partition_count = Int64(s.partitionCount)
    c.index_splits = Int64(s.indexSplits)
    c.index_merges = Int64(s.indexMerges)
    c.count_limit = Int64(s.countLimit)
    c.cost_limit = Int64(s.costLimit)
    try ABIStructs.copy(c, to: out, name: "stats")
    return MC_OK
  }
}

@_cdecl("mc_verify")
public func mcVerify(_ cache: OpaquePointer?, _ repair: Int32, _ problems: UnsafeMutablePointer<Int>?) -> Int32 {
  Handles.withStore(cache) { store in
    let found = try store.verify(repair: repair != 0)
    problems?.pointee = found.problems.count
    // After a repair, what is left is what a fresh check finds.
    let left = repair != 0 && !found.ok ? try store.verify(repair: false) : found
    guard left.ok else {
      let first = left.problems.prefix(3).joined(separator: "; ")
      throw CacheError.corrupted(path: "the cache", reason: "\(left.problems.count) problems: \(first)")
    }
    return MC_OK
  }
}

@_cdecl("mc_grow")
public func mcGrow(_ cache: OpaquePointer?, _ capacity: Int64, _ grown: UnsafeMutablePointer<Int64>?) -> Int32 {
  Handles.withStore(cache) { store in
    guard capacity > 0 else { throw CacheError.invalidArgument("capacity \(capacity) must be positive") }
    let now = try store.grow(toCapacity: Int(capacity))
    grown?.pointee = Int64(now)
    return MC_OK
  }
}

@_cdecl("mc_set_growth_policy")
public func mcSetGrowthPolicy(
  _ cache: OpaquePointer?, _ rate: Double, _ factor: Double, _ interval: Double, _ inserts: Int64
) -> Int32 {
  Handles.withStore(cache) { store in
    guard rate != 0 else {
      try store.setGrowthPolicy(nil)
      return MC_OK
    }
    guard rate.isFinite, factor.isFinite, interval.isFinite else {
      throw CacheError.invalidArgument("growth policy values must be finite numbers")
    }
    try store.setGrowthPolicy(
      GrowthPolicy(ghostHitRate: rate, factor: factor, minimumInterval: interval, minimumInserts: Int(inserts)))
    return MC_OK
  }
}

@_cdecl("mc_foreach")
public func mcForeach(
  _ cache: OpaquePointer?, _ flags: UInt32, _ visit: mc_visit_fn?, _ context: UnsafeMutableRawPointer?
) -> Int32 {
  Handles.withStore(cache) { store in
    guard let visit else { throw ABIError.invalidArgument("the visit function is NULL") }
    guard flags & ~MC_FOREACH_KEYS_ONLY == 0 else {
      throw ABIError.invalidArgument("unknown flags 0x\(String(flags & ~MC_FOREACH_KEYS_ONLY, radix: 16))")
    }
    try store.forEach(keysOnly: flags & MC_FOREACH_KEYS_ONLY != 0) { key, value, expires in
      guard let left = secondsLeft(expires) else { return true }
      var k = key
      return k.withUTF8 { kb in
        visit(context, kb.baseAddress, kb.count, value?.baseAddress, value?.count ?? 0, left) == 0
      }
    }
    return MC_OK
  }
}
