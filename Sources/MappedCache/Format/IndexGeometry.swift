/// Where a key lives: its partition, its two places in the partition's index and its
/// tag, all from its hash. Pure arithmetic (DESIGN.md, section 2).
///
/// Bits of `KeyHash.key` (bit 0 is always set, so unused):
///
///     1..21   the partition: `address(·, partitionCount)`
///     22..23  the bucket of the first place, in its group
///     24..45  the group of the first place: `address(·, groups)`
///     46..61  the tag (0 becomes 1: a tag of 0 marks an empty slot)
///
/// The second place takes its bucket and group the same way from `KeyHash.second`.
enum IndexGeometry {
  /// Linear hashing: with `n` buckets (groups, partitions) and `2^L ≤ n < 2^(L+1)`,
  /// `x mod 2^(L+1)`, or `x mod 2^L` when that is `n` or more. Going from `n` to `n + 1`
  /// changes the address only of keys at `n − 2^L`, half of which move to `n`.
  /// Precondition: `n ≥ 1`.
  @inline(__always)
  static func address(_ x: UInt64, count n: Int) -> Int {
    // Safe: 1 ≤ n ≤ Int.max, so `level` is in 0...62 and neither shift reaches 64
    // (`&<<`: no over-shift check).
    let level = UInt64(Int.bitWidth &- 1 &- n.leadingZeroBitCount)
    let high = x & ((2 &<< level) &- 1)
    return high < UInt64(n) ? Int(truncatingIfNeeded: high) : Int(truncatingIfNeeded: x & ((1 &<< level) &- 1))
  }

  /// The group that `split` divides when a partition goes from `n` groups to `n + 1`
  /// (its entries can move only to group `n`). Precondition: `n ≥ 1`.
  @inline(__always)
  static func splitSource(groups n: Int) -> Int { n - prevPowerOfTwo(n) }

  /// A key's partition among `count`.
  @inline(__always)
  static func partition(_ hash: UInt64, count: Int) -> Int {
    address((hash >> 1) & ((1 << 21) - 1), count: count)
  }

  /// The tag of a key's entries (never 0).
  @inline(__always)
  static func tag(_ hash: UInt64) -> UInt16 {
    let t = UInt16(truncatingIfNeeded: hash >> 46)
    return t == 0 ? 1 : t
  }

  /// The tag a ghost line remembers a key by (never 0).
  @inline(__always)
  static func ghostTag(_ hash: UInt64) -> UInt16 { tag(hash) }
}

/// A partition count and its linear-hashing mask in one word, as a handle routes keys:
/// `partition(_:)` is `IndexGeometry.partition(_:count:)` without finding the count's
/// level (a `bsr` and four shifts a read) on every read. One word, so that no thread
/// sees a count with another count's mask; a handle keeps it beside its count, raised
/// to each count it adopts (`Routing.raiseRoute`).
struct PartitionRoute: Equatable {
  /// `count | mask << 32`: `mask` is `2^(L+1) - 1` for `2^L <= count < 2^(L+1)`.
  var raw: UInt64

  @inline(__always) init(raw: UInt64) { self.raw = raw }

  /// Precondition: `1 <= count <= Format.maxPartitions` (so the mask fits its 32 bits
  /// and covers no more than the routing's 21 bits of the hash).
  init(count: Int) {
    precondition(count >= 1 && count <= Format.maxPartitions, "partition count out of range")
    let level = Int.bitWidth - 1 - count.leadingZeroBitCount
    raw = UInt64(count) | UInt64((2 << level) - 1) << 32
  }

  @inline(__always) var count: Int { Int(truncatingIfNeeded: raw & 0xFFFF_FFFF) }

  /// A key's partition: `address` of hash bits 1-21 over `count`, from the stored mask
  /// (its low half is the mask of the level below).
  @inline(__always)
  func partition(_ hash: UInt64) -> Int {
    let high = (hash >> 1) & (raw >> 32)
    return Int(truncatingIfNeeded: high < raw & 0xFFFF_FFFF ? high : high & (raw >> 33))
  }
}

/// One of a key's two places: a bucket of a group.
struct Place: Equatable, Hashable {
  var group: Int
  var bucket: Int
  /// The bucket's number in its partition (group × 4 + bucket).
  @inline(__always) var number: Int { group &* Format.bucketsPerGroup &+ bucket }
}

/// A key's two places and its tag, for a partition of `groups` groups.
struct Placement: Equatable {
  var first: Place
  var second: Place
  var tag: UInt16

  @_transparent
  init(hash: UInt64, groups: Int) {
    first = Self.first(hash: hash, groups: groups)
    second = Self.second(hash: hash, groups: groups)
    tag = IndexGeometry.tag(hash)
  }

  /// The first place alone (a writer's prefetch before the lock).
  @_transparent
  static func first(hash: UInt64, groups: Int) -> Place {
    Place(group: IndexGeometry.address(hash >> 24, count: groups), bucket: Int(truncatingIfNeeded: (hash >> 22) & 3))
  }

  /// The second place alone (a writer's look before the lock, when the first bucket has
  /// no slot with the key's tag).
  @_transparent
  static func second(hash: UInt64, groups: Int) -> Place {
    let h2 = KeyHash.second(hash)
    return Place(group: IndexGeometry.address(h2 >> 2, count: groups), bucket: Int(truncatingIfNeeded: h2 & 3))
  }

  /// Whether `place` is one of the two.
  @inline(__always) func contains(_ place: Place) -> Bool { place == first || place == second }
}

/// A partition's geometry word (line 0): `generation << 32 | groups`. Every split and
/// merge stores a new one with the next generation; readers compare the word before and
/// after a read (read steps R1 and R5).
struct Geometry: Equatable {
  var raw: UInt64

  @inline(__always) init(raw: UInt64) { self.raw = raw }
  @inline(__always) init(generation: UInt32, groups: Int) {
    raw = UInt64(generation) << 32 | UInt64(UInt32(truncatingIfNeeded: groups))
  }
  @inline(__always) var groups: Int { Int(truncatingIfNeeded: raw & 0xFFFF_FFFF) }
  @inline(__always) var generation: UInt32 { UInt32(truncatingIfNeeded: raw >> 32) }
  /// The same group count, the next generation (a repair's: readers read again).
  @inline(__always) var advanced: Geometry { Geometry(generation: generation &+ 1, groups: groups) }
  /// The next generation with `groups` groups.
  @inline(__always) func with(groups n: Int) -> Geometry { Geometry(generation: generation &+ 1, groups: n) }
}
