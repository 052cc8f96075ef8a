/// A snapshot of a cache's counters. Counters are summed over every process that has
/// used the file since it was created.
public struct CacheStatistics: Sendable, Equatable, Codable {
  /// Entries present (some may have expired and not yet been reclaimed).
  public var entries: Int
  /// Key and value bytes of those entries.
  public var liveBytes: Int
  /// The file's size.
  public var capacity: Int
  /// Reads that found a live entry.
  public var hits: Int
  /// Reads that found nothing (or only an expired entry).
  public var misses: Int
  /// Those of the misses that answered "miss" only because the entry's slot stayed
  /// mid-write past the readers' bounded wait (its writer descheduled, stopped, or
  /// killed mid-write): the entry may well be there. Nonzero under heavy CPU
  /// oversubscription or with a stopped or dead writer; see DESIGN.md, section 3.
  public var busyMisses: Int
  /// Entries stored (sets, adds, replaces, updates).
  public var sets: Int
  /// Entries removed to make room.
  public var evictions: Int
  /// Expired entries reclaimed.
  public var expirations: Int
  /// Repairs after a writer died mid-change.
  public var recoveries: Int
  /// Entries removed by request.
  public var removals: Int
  /// New entries that earned a place in the main log.
  public var promotions: Int
  /// Referenced main-log entries given a second chance by the clock hand.
  public var reinsertions: Int
  /// Times a writer took the lock over from a dead holder.
  public var lockTakeovers: Int
  /// Slots of the index now, in every partition (each index grows and shrinks with the
  /// entries: see `indexSplits` and `indexMerges`).
  public var slotCount: Int
  /// Entries the index holds now before it grows (95 % of the slots).
  public var maxEntries: Int
  /// Bytes of the record logs now, in every partition (the index takes the rest).
  public var logBytes: Int
  /// Bytes of the logs holding records, live or not yet reclaimed.
  public var logBytesUsed: Int
  /// The clock hand: partition 0's main log tail position.
  public var sweepHand: Int
  /// The entry count limit stored in the file (0: none).
  public var countLimit: Int
  /// The key-plus-value byte limit stored in the file (0: none).
  public var costLimit: Int
  /// Partitions of the file: each has its own write lock, index, logs and eviction.
  public var partitionCount: Int = 1
  /// Bytes of the indexes now, in every partition.
  public var indexBytes: Int = 0
  /// Times an index grew by one group (320 bytes, 40 slots), taking log space.
  public var indexSplits: Int = 0
  /// Times an index gave a group back to its logs.
  public var indexMerges: Int = 0
  /// New keys stored (not overwrites).
  public var inserts: Int = 0
  /// New keys whose ghost was remembered: evicted recently and stored again, misses a
  /// larger cache would have served (`GrowthPolicy`'s signal).
  public var ghostHits: Int = 0
  /// Growths of the file since it was created (by hand or by `GrowthPolicy`).
  public var growths: Int = 0
  /// The last few growths, oldest first.
  public var growthHistory: [GrowthRecord] = []
  /// The growth policy stored in the file, nil for none.
  public var growthPolicy: GrowthPolicy? = nil

  /// hits / (hits + misses), or 0 before any read.
  public var hitRatio: Double { hits + misses == 0 ? 0 : Double(hits) / Double(hits + misses) }
  /// Share of the file's bytes holding live keys and values.
  public var fill: Double { capacity == 0 ? 0 : Double(liveBytes) / Double(capacity) }
}

/// One partition's counters (`CacheFile.partitionStatistics`), read without its lock.
public struct PartitionStatistics: Sendable, Equatable, Codable {
  /// The partition's number, from 0.
  public var partition: Int
  /// Entries present (some may have expired and not yet been reclaimed).
  public var entries: Int
  /// Key and value bytes of those entries.
  public var liveBytes: Int
  /// Entries stored.
  public var sets: Int
  /// Entries removed to make room.
  public var evictions: Int
  /// Expired entries reclaimed.
  public var expirations: Int
  /// Repairs after a writer died mid-change.
  public var recoveries: Int
  /// Entries removed by request.
  public var removals: Int
  /// New entries that earned a place in the main log.
  public var promotions: Int
  /// Referenced main-log entries given a second chance by the clock hand.
  public var reinsertions: Int
  /// Times the index grew by one group.
  public var splits: Int
  /// Times the index gave a group back.
  public var merges: Int
  /// New keys stored (not overwrites).
  public var inserts: Int = 0
  /// New keys whose ghost the partition remembered (evicted recently, stored again).
  public var ghostHits: Int = 0
  /// Slots of the index now.
  public var slots: Int
  /// Bytes of the index now.
  public var indexBytes: Int
  /// Bytes of the two logs now.
  public var logBytes: Int
  /// Bytes of the logs holding records, live or not yet reclaimed.
  public var logBytesUsed: Int
  /// The main log's tail (the clock hand), as an offset in the partition.
  public var clockHand: Int
  /// The process holding the partition's write lock, when a live other one does.
  public var writeLockHolderPid: Int?

  /// Occupied share of the index's slots.
  public var load: Double { slots == 0 ? 0 : Double(entries) / Double(slots) }
}
