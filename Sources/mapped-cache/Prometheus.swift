import Foundation
import MappedCache
import MappedCacheRedis

/// The Prometheus text exposition format (version 0.0.4), for a node exporter's
/// textfile collector: `mapped-cache stats P --prometheus > dir/mappedcache.prom.$$ &&
/// mv dir/mappedcache.prom.$$ dir/mappedcache.prom`. Every series has a `path` label.
enum Prometheus {
  static func exposition(_ s: StatsCommand.Snapshot) -> String {
    var e = Exposition(label: "{path=\"\(escape(s.path))\"}")
    fileMetrics(s, into: &e)
    if let n = s.near {
      nearMetrics(n, into: &e)
      if !n.heartbeatNodes.isEmpty { clusterMetrics(n, path: s.path, into: &e) }
      leaseMetrics(n, into: &e)
    }
    return e.out
  }

  /// The text of one exposition: each series with its HELP and TYPE lines, and the label.
  struct Exposition {
    let label: String
    var out = ""

    mutating func metric(_ name: String, _ type: String, _ help: String, _ value: String) {
      out += "# HELP mappedcache_\(name) \(help)\n# TYPE mappedcache_\(name) \(type)\n"
      out += "mappedcache_\(name)\(label) \(value)\n"
    }
    mutating func gauge(_ name: String, _ help: String, _ v: Int) { metric(name, "gauge", help, "\(v)") }
    mutating func gauge(_ name: String, _ help: String, _ v: Double) {
      metric(name, "gauge", help, v.isFinite ? "\(v)" : "NaN")
    }
    mutating func counter(_ name: String, _ help: String, _ v: Int) { metric(name + "_total", "counter", help, "\(v)") }
  }

  /// The file's figures.
  private static func fileMetrics(_ s: StatsCommand.Snapshot, into e: inout Exposition) {
    let st = s.stats
    let t = s.table
    e.gauge("entries", "Entries present (some may have expired and not yet been reclaimed).", st.entries)
    e.gauge("max_entries", "Entries allowed before inserts evict.", st.maxEntries)
    e.gauge("live_bytes", "Key and value bytes of the entries present.", st.liveBytes)
    e.gauge("capacity_bytes", "Size of the cache file.", st.capacity)
    e.gauge("fill_ratio", "Live bytes divided by capacity.", st.fill)
    e.gauge("log_bytes", "Bytes of the two record logs.", st.logBytes)
    e.gauge("log_used_bytes", "Bytes of the logs holding records (live or not yet reclaimed).", st.logBytesUsed)
    e.counter("hits", "Reads that found a live entry, summed over all processes.", st.hits)
    e.counter("misses", "Reads that found nothing, summed over all processes.", st.misses)
    e.counter(
      "busy_misses", "Misses that gave up on a slot left mid-write (writer descheduled, stopped or dead).",
      st.busyMisses)
    e.gauge("hit_ratio", "Hits divided by hits plus misses (0 before any read).", st.hitRatio)
    e.counter("sets", "Entries stored.", st.sets)
    e.counter("removals", "Entries removed by request.", st.removals)
    e.counter("evictions", "Entries removed to make room.", st.evictions)
    e.counter("expirations", "Expired entries reclaimed.", st.expirations)
    e.counter("promotions", "Entries moved from the small log to the main log.", st.promotions)
    e.counter("reinsertions", "Second chances given at the clock hand.", st.reinsertions)
    e.counter("recoveries", "Repairs after a writer died mid-change.", st.recoveries)
    e.counter("lock_takeovers", "Write locks taken over from dead holders.", st.lockTakeovers)
    e.counter("inserts", "New keys stored (not overwrites).", st.inserts)
    e.counter(
      "ghost_hits", "New keys evicted recently and stored again (misses a larger cache would have served).",
      st.ghostHits)
    e.counter("growths", "Growths of the file (mapped-cache grow, SharedCache.grow or the growth policy).", st.growths)
    e.gauge("slots", "Slots of the hash index.", t.slotCount)
    e.gauge("occupied_slots", "Occupied slots of the hash index.", t.occupiedSlots)
    e.gauge("second_place_share", "Share of the entries in their key's second bucket.", t.meanProbe)
    e.gauge("index_bytes", "Bytes of the indexes (they grow and shrink with the entries).", st.indexBytes)
    e.gauge("partitions", "Partitions (a write lock, an index and two logs each).", st.partitionCount)
    e.gauge("clock_hand_bytes", "Position of the clock hand (main log tail).", st.sweepHand)
    e.gauge("sweeper_slot", "Next slot of the background expiry sweeper.", s.sweeperSlot)
    e.gauge("count_limit", "Entry count limit (0 = none).", st.countLimit)
    e.gauge("cost_limit_bytes", "Key+value byte limit (0 = none).", st.costLimit)
    e.gauge("processes", "Processes with the file open for writing.", s.processes.count)
    e.gauge(
      "write_lock_holder_pid", "Pid of the live process in the write lock at the scrape (0 = free).",
      s.lockHolder?.pid ?? 0)
  }

  /// A near-cache file's figures.
  private static func nearMetrics(_ n: NearCacheStatistics, into e: inout Exposition) {
    e.gauge("near_holder_pid", "Pid of the Redis near cache's invalidation holder (0 = none).", Int(n.holderPID ?? 0))
    e.gauge("near_holder_alive", "1 when the holder process is alive.", n.holderAlive ? 1 : 0)
    e.gauge(
      "near_heartbeat_age_ms", "Milliseconds since the holder's last confirmed heartbeat (node 0; -1 = never).",
      n.heartbeatAgeMilliseconds.first.flatMap { $0 }.map { Int($0) } ?? -1)
    e.gauge(
      "near_fence_fresh", "1 when reads trust the file (heartbeat younger than the staleness bound).",
      n.fenceFresh ? 1 : 0)
    e.counter("near_invalidations_received", "Keys named by Redis invalidations.", Int(n.invalidationsReceived))
    e.counter("near_invalidations_applied", "Invalidated keys that were in the file.", Int(n.invalidationsApplied))
    e.counter("near_flushes", "Null invalidations (FLUSHALL): every entry dropped by epoch.", Int(n.flushes))
    e.counter("near_reconnects", "Tracking sessions started after a holder's first.", Int(n.reconnects))
    e.counter("near_holder_changes", "Times a process took the holder role.", Int(n.holderChanges))
    e.counter("near_stale_serves", "Reads served past the fence (serveStale).", Int(n.staleServes))
    e.counter("near_fence_misses", "Reads sent to Redis because the fence was too old.", Int(n.fenceMisses))
    e.counter("near_epoch_misses", "Entries found from an earlier tracking session.", Int(n.epochMisses))
    e.counter("near_remote_fetches", "Fetches from Redis.", Int(n.remoteFetches))
    e.gauge(
      "near_remote_fetch_mean_us", "Mean latency of a fetch from Redis, microseconds.", n.remoteFetchMeanMicroseconds)
  }

  /// In front of a cluster: one heartbeat age per primary (label `node`), and redirects.
  private static func clusterMetrics(_ n: NearCacheStatistics, path: String, into e: inout Exposition) {
    // One series per cluster primary (label `node`).
    let name = "mappedcache_near_node_heartbeat_age_ms"
    e.out += "# HELP \(name) Milliseconds since a cluster primary's last confirmed heartbeat (-1 = never).\n"
    e.out += "# TYPE \(name) gauge\n"
    for (node, age) in zip(n.heartbeatNodes, n.heartbeatAgeMilliseconds) {
      e.out += "\(name){path=\"\(escape(path))\",node=\"\(escape(node))\"} \(age.map { Int($0) } ?? -1)\n"
    }
    e.counter("near_moved_redirects", "Cluster MOVED redirects followed.", Int(n.movedRedirects))
    e.counter("near_ask_redirects", "Cluster ASK redirects followed.", Int(n.askRedirects))
    e.counter("near_slot_map_refreshes", "Cluster slot maps read by the holder.", Int(n.slotMapRefreshes))
    e.counter(
      "near_slot_buckets_dropped", "Slot buckets whose entries were dropped after a slot moved.",
      Int(n.slotBucketsDropped))
  }

  /// Fleet-wide computes (`ComputeOptions.fleetWide`).
  private static func leaseMetrics(_ n: NearCacheStatistics, into e: inout Exposition) {
    e.counter("near_lease_wins", "Fleet-wide computes that won the lease at once.", Int(n.leaseWins))
    e.counter("near_lease_waits", "Fleet-wide computes that waited for another owner's value.", Int(n.leaseWaits))
    e.counter("near_lease_takeovers", "Leases taken after another owner's expired.", Int(n.leaseTakeovers))
    e.counter("near_leases_lost", "Computed values not stored: the lease was lost.", Int(n.leasesLost))
    e.counter(
      "near_lease_stale_serves", "Fleet-wide computes that returned the stale copy while another owner computed.",
      Int(n.leaseStaleServes))
  }

  /// Label values escape backslash, double quote and newline.
  static func escape(_ s: String) -> String {
    s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
      .replacingOccurrences(of: "\n", with: "\\n")
  }
}
