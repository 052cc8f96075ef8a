@_spi(Tiers) import MappedCache

/// The tier words of a near cache in front of a Redis Cluster (see `NearLayout`).
///
/// Slots are grouped in 256 buckets of 64 consecutive slots, one tier word each, laid out
/// as the session word (epoch << 32 | fence mod 2^32 ms). Each entry's frame names its
/// bucket's word, so a hit still loads one word. Why buckets and not one epoch per slot:
/// the file's tier area is 400 words inside the header page (16384 epochs would need a
/// 64 KiB area of their own, a change of the file format), and a hit's fence has to sit
/// in the same word as its epoch to cost one load. The price: when a slot moves, the
/// entries of the other 63 slots of its bucket are dropped too (lazily refilled, one
/// fetch per key per host). Reshards move ranges of consecutive slots, which fill whole
/// buckets, and `redis-cli --cluster create` splits the slots in 3 ranges, so only the 2
/// buckets across a boundary are shared by two primaries.
extension NearLayout {
  /// Bumped by a process that followed a redirect: the holder reads the slot map now.
  static let topology = 15
  /// Per-node fences (figures): port << 48 | ms of the last confirmed heartbeat.
  static let nodeFences = 16, nodeFenceCount = 16
  /// Counters of the cluster tier and of fleet-wide leases.
  enum Cluster {
    static let moved = 32, ask = 33, slotMapRefreshes = 34, bucketsDropped = 35
    static let leaseWins = 36, leaseWaits = 37, leaseTakeovers = 38, leaseLost = 39, leaseStaleServes = 40
  }
  static let bucketBase = 64, bucketCount = 256, slotsPerBucket = 64

  /// The tier word of the bucket of `slot`.
  @inline(__always)
  static func bucketWord(slot: Int) -> Int { bucketBase + slot / slotsPerBucket }

  /// The buckets (as tier words) holding any of `slots`.
  static func bucketWords<S: Sequence>(of slots: S) -> Set<Int> where S.Element == Int {
    Set(slots.map { bucketWord(slot: $0) })
  }

  /// Moves every epoch on: the session word's and every bucket's (a removeAll, a flush).
  static func bumpAllEpochs(_ cache: SharedCache<[UInt8]>) {
    bumpEpoch(cache, epoch)
    for b in 0..<bucketCount { bumpEpoch(cache, bucketBase + b) }
  }

  /// Whether the file has been used in front of a cluster (a per-node fence was stored).
  static func isClustered(_ cache: SharedCache<[UInt8]>) -> Bool {
    (0..<nodeFenceCount).contains { ((try? cache.tierWord(nodeFences + $0)) ?? 0) != 0 }
  }

  /// The per-node fences stored: (port, ms).
  static func nodeFenceList(_ cache: SharedCache<[UInt8]>) -> [(port: UInt16, ms: UInt64)] {
    (0..<nodeFenceCount).compactMap {
      let w = (try? cache.tierWord(nodeFences + $0)) ?? 0
      return w == 0 ? nil : (UInt16(truncatingIfNeeded: w >> 48), w & ((1 << 48) - 1))
    }
  }
}
