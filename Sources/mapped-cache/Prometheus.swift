import Foundation
import MappedCache

/// The Prometheus text exposition format (version 0.0.4), for a node exporter's
/// textfile collector: `mapped-cache stats P --prometheus > dir/mappedcache.prom.$$ &&
/// mv dir/mappedcache.prom.$$ dir/mappedcache.prom`. Every series has a `path` label.
enum Prometheus {
  static func exposition(_ s: StatsCommand.Snapshot) -> String {
    let st = s.stats
    let t = s.table
    let label = "{path=\"\(escape(s.path))\"}"
    var out = ""
    func metric(_ name: String, _ type: String, _ help: String, _ value: String) {
      out += "# HELP mappedcache_\(name) \(help)\n# TYPE mappedcache_\(name) \(type)\n"
      out += "mappedcache_\(name)\(label) \(value)\n"
    }
    func gauge(_ name: String, _ help: String, _ v: Int) { metric(name, "gauge", help, "\(v)") }
    func gauge(_ name: String, _ help: String, _ v: Double) { metric(name, "gauge", help, v.isFinite ? "\(v)" : "NaN") }
    func counter(_ name: String, _ help: String, _ v: Int) { metric(name + "_total", "counter", help, "\(v)") }

    gauge("entries", "Entries present (some may have expired and not yet been reclaimed).", st.entries)
    gauge("max_entries", "Entries allowed before inserts evict.", st.maxEntries)
    gauge("live_bytes", "Key and value bytes of the entries present.", st.liveBytes)
    gauge("capacity_bytes", "Size of the cache file.", st.capacity)
    gauge("fill_ratio", "Live bytes divided by capacity.", st.fill)
    gauge("log_bytes", "Bytes of the two record logs.", st.logBytes)
    gauge("log_used_bytes", "Bytes of the logs holding records (live or not yet reclaimed).", st.logBytesUsed)
    counter("hits", "Reads that found a live entry, summed over all processes.", st.hits)
    counter("misses", "Reads that found nothing, summed over all processes.", st.misses)
    counter(
      "busy_misses", "Misses that gave up on a slot left mid-write (writer descheduled, stopped or dead).",
      st.busyMisses)
    gauge("hit_ratio", "Hits divided by hits plus misses (0 before any read).", st.hitRatio)
    counter("sets", "Entries stored.", st.sets)
    counter("removals", "Entries removed by request.", st.removals)
    counter("evictions", "Entries removed to make room.", st.evictions)
    counter("expirations", "Expired entries reclaimed.", st.expirations)
    counter("promotions", "Entries moved from the small log to the main log.", st.promotions)
    counter("reinsertions", "Second chances given at the clock hand.", st.reinsertions)
    counter("recoveries", "Repairs after a writer died mid-change.", st.recoveries)
    counter("lock_takeovers", "Write locks taken over from dead holders.", st.lockTakeovers)
    gauge("slots", "Slots of the hash index.", t.slotCount)
    gauge("occupied_slots", "Occupied slots of the hash index.", t.occupiedSlots)
    gauge("second_place_share", "Share of the entries in their key's second bucket.", t.meanProbe)
    gauge("index_bytes", "Bytes of the indexes (they grow and shrink with the entries).", st.indexBytes)
    gauge("partitions", "Partitions (a write lock, an index and two logs each).", st.partitionCount)
    gauge("clock_hand_bytes", "Position of the clock hand (main log tail).", st.sweepHand)
    gauge("sweeper_slot", "Next slot of the background expiry sweeper.", s.sweeperSlot)
    gauge("count_limit", "Entry count limit (0 = none).", st.countLimit)
    gauge("cost_limit_bytes", "Key+value byte limit (0 = none).", st.costLimit)
    gauge("processes", "Processes with the file open for writing.", s.processes.count)
    gauge(
      "write_lock_holder_pid", "Pid of the live process in the write lock at the scrape (0 = free).",
      s.lockHolder?.pid ?? 0)
    if let n = s.near {
      gauge("near_holder_pid", "Pid of the Redis near cache's invalidation holder (0 = none).", Int(n.holderPID ?? 0))
      gauge("near_holder_alive", "1 when the holder process is alive.", n.holderAlive ? 1 : 0)
      gauge(
        "near_heartbeat_age_ms", "Milliseconds since the holder's last confirmed heartbeat (node 0; -1 = never).",
        n.heartbeatAgeMilliseconds.first.flatMap { $0 }.map { Int($0) } ?? -1)
      gauge(
        "near_fence_fresh", "1 when reads trust the file (heartbeat younger than the staleness bound).",
        n.fenceFresh ? 1 : 0)
      counter("near_invalidations_received", "Keys named by Redis invalidations.", Int(n.invalidationsReceived))
      counter("near_invalidations_applied", "Invalidated keys that were in the file.", Int(n.invalidationsApplied))
      counter("near_flushes", "Null invalidations (FLUSHALL): every entry dropped by epoch.", Int(n.flushes))
      counter("near_reconnects", "Tracking sessions started after a holder's first.", Int(n.reconnects))
      counter("near_holder_changes", "Times a process took the holder role.", Int(n.holderChanges))
      counter("near_stale_serves", "Reads served past the fence (serveStale).", Int(n.staleServes))
      counter("near_fence_misses", "Reads sent to Redis because the fence was too old.", Int(n.fenceMisses))
      counter("near_epoch_misses", "Entries found from an earlier tracking session.", Int(n.epochMisses))
      counter("near_remote_fetches", "Fetches from Redis.", Int(n.remoteFetches))
      gauge(
        "near_remote_fetch_mean_us", "Mean latency of a fetch from Redis, microseconds.", n.remoteFetchMeanMicroseconds)
      if !n.heartbeatNodes.isEmpty {
        // One series per cluster primary (label `node`).
        let name = "mappedcache_near_node_heartbeat_age_ms"
        out += "# HELP \(name) Milliseconds since a cluster primary's last confirmed heartbeat (-1 = never).\n"
        out += "# TYPE \(name) gauge\n"
        for (node, age) in zip(n.heartbeatNodes, n.heartbeatAgeMilliseconds) {
          out += "\(name){path=\"\(escape(s.path))\",node=\"\(escape(node))\"} \(age.map { Int($0) } ?? -1)\n"
        }
        counter("near_moved_redirects", "Cluster MOVED redirects followed.", Int(n.movedRedirects))
        counter("near_ask_redirects", "Cluster ASK redirects followed.", Int(n.askRedirects))
        counter("near_slot_map_refreshes", "Cluster slot maps read by the holder.", Int(n.slotMapRefreshes))
        counter(
          "near_slot_buckets_dropped", "Slot buckets whose entries were dropped after a slot moved.",
          Int(n.slotBucketsDropped))
      }
      counter("near_lease_wins", "Fleet-wide computes that won the lease at once.", Int(n.leaseWins))
      counter("near_lease_waits", "Fleet-wide computes that waited for another owner's value.", Int(n.leaseWaits))
      counter("near_lease_takeovers", "Leases taken after another owner's expired.", Int(n.leaseTakeovers))
      counter("near_leases_lost", "Computed values not stored: the lease was lost.", Int(n.leasesLost))
      counter(
        "near_lease_stale_serves", "Fleet-wide computes that returned the stale copy while another owner computed.",
        Int(n.leaseStaleServes))
    }
    return out
  }

  /// Label values escape backslash, double quote and newline.
  static func escape(_ s: String) -> String {
    s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
      .replacingOccurrences(of: "\n", with: "\\n")
  }
}
