import SystemCalls

/// Whether and how much a `SharedCache` keeps decoded values in its own process
/// (`OpenPolicy.decodedValues`), so that reading a hot key again costs a probe of the
/// file and a version compare instead of a decode.
///
/// Every read still asks the file: the decoded copy is returned only while the key's
/// entry is the very write it was decoded from (its version, length and checksum), and
/// not expired. A value another process has since overwritten or removed is never
/// returned. The memory is bounded by `countLimit` values and `byteLimit` encoded bytes.
///
/// `automatic` (the default) keeps decoded values for types stored through the binary
/// `Codable` coder, whose decode costs far more than the probe, and not for the types
/// stored as their raw bytes (`[UInt8]`, `Data`, `String`, integers, ...), nor for class
/// types. Callers share a kept value: a value that holds a reference to a mutable object
/// (a class instance) hands every caller the same object, so turn it off for such types.
public struct DecodedValueCaching: Sendable, Equatable {
  /// Which value types keep decoded values.
  public enum Mode: Sendable, Equatable {
    /// On for value types stored through the binary `Codable` coder; off otherwise.
    case automatic
    /// On for any value type.
    case on
    /// Off: every read decodes.
    case off
  }

  /// Which value types keep decoded values (`automatic`: those of the binary coder).
  public var mode: Mode
  /// Most values kept (per handle). Default 4,096.
  public var countLimit: Int
  /// Most encoded value bytes kept, each value counted as its length plus 64 (per
  /// handle). A value larger than a 32nd of it is not kept. Default 4 MiB.
  public var byteLimit: Int

  /// A setting with these limits; see each property.
  public init(mode: Mode = .automatic, countLimit: Int = 4096, byteLimit: Int = 4 << 20) {
    self.mode = mode
    self.countLimit = countLimit
    self.byteLimit = byteLimit
  }

  /// The default: on for types decoded by the binary `Codable` coder.
  public static var automatic: DecodedValueCaching { DecodedValueCaching() }
  /// Off: every read decodes.
  public static var off: DecodedValueCaching { DecodedValueCaching(mode: .off) }
  /// On, with these limits.
  public static func on(countLimit: Int = 4096, byteLimit: Int = 4 << 20) -> DecodedValueCaching {
    DecodedValueCaching(mode: .on, countLimit: countLimit, byteLimit: byteLimit)
  }
}

/// A process-local, bounded, thread-safe table of decoded values, each with the stamp
/// (`EntryStamp`: version, length, checksum) of the write it was decoded from. It never
/// answers a read by itself: `SharedCache.object(forKey:)` first reads the stamp of the
/// key's live entry from the file (`CacheEngine.entryStamp`, one seqlock read of the
/// slot, nothing copied), and takes a kept value only if it carries that stamp.
///
/// Layout: `stripes` stripes (by the hash's top bits), each behind its own `Mutex` so
/// threads reading different keys rarely meet; in a stripe, sets of `ways` entries (by
/// the hash), each entry one key's hash, stamp, value and a reference bit. Eviction is
/// CLOCK: a new key takes an empty way of its set, else the first unreferenced one
/// (clearing bits as it looks); and while the stripe is at its count or byte limit, a
/// hand sweeping the whole stripe evicts the first unreferenced entry. Keys are told
/// apart by their 64-bit hash: two keys sharing one only evict each other, since the
/// file's probe compares the key itself and the stamp names one write of one key.
@usableFromInline
final class DecodedValueCache<Value>: @unchecked Sendable {
  @usableFromInline static var ways: Int { 8 }

  @usableFromInline
  struct Entry {
    @usableFromInline var stamp: EntryStamp
    @usableFromInline var cost: Int
    @usableFromInline var referenced: Bool
    @usableFromInline var value: Value?
  }

  /// One stripe's table, allocated on first use.
  @usableFromInline
  struct Table {
    /// 0: an empty way. Apart from `entries`, so a set's hashes share one cache line.
    @usableFromInline var hashes: [UInt64] = []
    @usableFromInline var entries: [Entry] = []
    @usableFromInline var count = 0
    @usableFromInline var bytes = 0
    @usableFromInline var hand = 0
  }

  /// A value handed into or out of a stripe's lock (`Mutex` wants what crosses it to be
  /// `Sendable`): each side gets its own copy, and a value type's storage is shared
  /// copy-on-write with atomic reference counts.
  @usableFromInline
  struct Handoff: @unchecked Sendable {
    @usableFromInline var stamp: EntryStamp
    @usableFromInline var value: Value
    @usableFromInline init(stamp: EntryStamp, value: Value) {
      self.stamp = stamp
      self.value = value
    }
  }

  /// One stripe: its table behind its lock, and its share of the limits. Stored in
  /// `stripes`, an allocation of `stripeCount` of them each on lines of its own, and
  /// reached through the pointer, so a read retains and releases no stripe (as a class
  /// in an array, the two atomic counts were about a tenth of a hot read's time).
  @usableFromInline
  struct Stripe: ~Copyable {
    @usableFromInline let table = SeenMutex(Table())
    @usableFromInline let sets: Int
    @usableFromInline let countLimit: Int
    @usableFromInline let byteLimit: Int
    init(sets: Int, countLimit: Int, byteLimit: Int) {
      self.sets = sets
      self.countLimit = countLimit
      self.byteLimit = byteLimit
    }
  }

  /// Bytes from one stripe to the next: two lines, so neighbouring lock words never
  /// share one. A stripe's layout does not depend on `Value` (its table holds arrays);
  /// `init` checks that it fits.
  @inlinable static var stride: Int { 128 }

  /// The stripes, `stride` bytes apart; owned by this object (freed in `deinit`).
  @usableFromInline let stripes: UnsafeMutableRawPointer
  /// The stripe count minus one (a power of two minus one).
  @usableFromInline let stripeMask: Int
  var stripeCount: Int { stripeMask + 1 }
  /// Values of more encoded bytes than this are not kept.
  @usableFromInline let largestValue: Int

  /// Per-entry bytes counted on top of the encoded length.
  static var overhead: Int { 64 }

  init(countLimit: Int, byteLimit: Int) {
    let count = max(1, countLimit)
    var s = 1
    while s < 8 && s * 2 * Self.ways <= count { s *= 2 }
    stripeMask = s - 1
    let bytes = max(Self.overhead * 8, byteLimit)
    // A quarter of a stripe's bytes: one value never fills a stripe alone.
    largestValue = bytes / s / 4 - Self.overhead
    precondition(MemoryLayout<Stripe>.stride <= Self.stride, "a stripe outgrew its two lines")
    stripes = UnsafeMutableRawPointer.allocate(byteCount: Self.stride * s, alignment: 128)
    for k in 0..<s {
      // The limits split exactly: stripe k gets its share, the first ones the remainder.
      let c = count / s + (k < count % s ? 1 : 0)
      let b = bytes / s + (k < bytes % s ? 1 : 0)
      (stripes + k * Self.stride).bindMemory(to: Stripe.self, capacity: 1)
        .initialize(to: Stripe(sets: (c + Self.ways - 1) / Self.ways, countLimit: c, byteLimit: b))
    }
  }

  deinit {
    for k in 0..<stripeCount { stripe(at: k).deinitialize(count: 1) }
    stripes.deallocate()
  }

  /// Stripe `k` (0 ..< `stripeCount`).
  @inlinable @inline(__always)
  func stripe(at k: Int) -> UnsafeMutablePointer<Stripe> {
    (stripes + k &* Self.stride).assumingMemoryBound(to: Stripe.self)
  }

  /// The cache `caching` asks for, for values coded by `codec`; nil when it is off.
  static func make(_ caching: DecodedValueCaching, codec: ValueCodec<Value>) -> DecodedValueCache? {
    switch caching.mode {
    case .off: return nil
    case .on: break
    case .automatic: if codec.isRaw || Value.self is AnyObject.Type { return nil }
    }
    guard caching.countLimit > 0, caching.byteLimit > 0 else { return nil }
    return DecodedValueCache(countLimit: caching.countLimit, byteLimit: caching.byteLimit)
  }

  @inlinable @inline(__always)
  func stripe(_ hash: UInt64) -> UnsafeMutablePointer<Stripe> {
    stripe(at: Int(truncatingIfNeeded: hash >> 61) & stripeMask)
  }

  /// The first way of `hash`'s set in a stripe of `sets` sets.
  @inlinable @inline(__always)
  static func setStart(_ hash: UInt64, sets: Int) -> Int {
    Int(truncatingIfNeeded: (((hash >> 1) & 0xFFFF_FFFF) &* UInt64(sets)) >> 32) &* ways
  }

  /// The value kept for `hash` if it was decoded from the write `stamp` names (the
  /// file's live entry, just read), marking it referenced. Inlined by force: called,
  /// its lock's closure was not inlined into it, and the value crossed three frames,
  /// each copy of it loading what the last had just stored in pieces (a store-forwarding
  /// stall each), and a hot read was slower than inlined.
  @inlinable @inline(__always)
  func value(_ hash: UInt64, stamp: EntryStamp) -> Value? {
    let s = stripe(hash)
    let b = Self.setStart(hash, sets: s.pointee.sets)
    return s.pointee.table.withLock { t -> Handoff? in
      guard !t.hashes.isEmpty else { return nil }
      for w in b..<b &+ Self.ways where t.hashes[w] == hash {
        guard t.entries[w].stamp == stamp, let v = t.entries[w].value else { return nil }
        if !t.entries[w].referenced { t.entries[w].referenced = true }
        return Handoff(stamp: stamp, value: v)
      }
      return nil
    }?.value
  }

  /// Keeps `value`, decoded from the write `stamp` names, for `hash`. An entry already
  /// kept from a later write of the key stays (versions only grow, so it is the likelier
  /// to be current; either is checked on every read).
  @usableFromInline
  func insert(_ hash: UInt64, stamp: EntryStamp, value: Value) {
    let cost = Int(stamp.count) &+ Self.overhead
    guard stamp.version != 0, Int(stamp.count) <= largestValue else { return }
    let s = stripe(hash)
    let (sets, limits) = (s.pointee.sets, (count: s.pointee.countLimit, bytes: s.pointee.byteLimit))
    // Handed into the lock as a Sendable box: the table takes it over (see `Handoff`).
    let boxed = Handoff(stamp: stamp, value: value)
    s.pointee.table.withLock { t in
      if t.hashes.isEmpty {
        t.hashes = Array(repeating: 0, count: sets * Self.ways)
        t.entries = Array(
          repeating: Entry(stamp: .none, cost: 0, referenced: false, value: nil), count: sets * Self.ways)
      }
      let b = Self.setStart(hash, sets: sets)
      for w in b..<b + Self.ways where t.hashes[w] == hash {
        if t.entries[w].stamp.version > stamp.version { return }
        t.bytes += cost - t.entries[w].cost
        t.entries[w] = Entry(stamp: stamp, cost: cost, referenced: false, value: boxed.value)
        Self.sweep(&t, limits, sparing: w)
        return
      }
      // A new key: an empty way of its set, else CLOCK within the set.
      var way = -1
      for w in b..<b + Self.ways where t.hashes[w] == 0 {
        way = w
        break
      }
      if way < 0 {
        for w in b..<b + Self.ways {
          if !t.entries[w].referenced {
            way = w
            break
          }
          t.entries[w].referenced = false
        }
        if way < 0 { way = b }
        Self.evict(&t, at: way)
      }
      t.hashes[way] = hash
      t.entries[way] = Entry(stamp: stamp, cost: cost, referenced: false, value: boxed.value)
      t.count += 1
      t.bytes += cost
      Self.sweep(&t, limits, sparing: way)
    }
  }

  /// Values kept and their counted bytes, summed over the stripes (for tests and tools).
  var usage: (count: Int, bytes: Int) {
    var c = 0
    var b = 0
    for k in 0..<stripeCount {
      stripe(at: k).pointee.table.withLock { t in
        c += t.count
        b += t.bytes
      }
    }
    return (c, b)
  }

  /// The limits as split over the stripes (for tests).
  var limits: (count: Int, bytes: Int) {
    (0..<stripeCount).reduce((0, 0)) {
      ($0.0 + stripe(at: $1).pointee.countLimit, $0.1 + stripe(at: $1).pointee.byteLimit)
    }
  }

  private static func evict(_ t: inout Table, at w: Int) {
    guard t.hashes[w] != 0 else { return }
    t.hashes[w] = 0
    t.count -= 1
    t.bytes -= t.entries[w].cost
    t.entries[w] = Entry(stamp: .none, cost: 0, referenced: false, value: nil)
  }

  /// While the stripe is over a limit, the CLOCK hand evicts the first entry not
  /// referenced since it last passed (clearing bits on its way), never `sparing`.
  /// Bounded: two turns clear every bit and pass every entry.
  private static func sweep(_ t: inout Table, _ limits: (count: Int, bytes: Int), sparing: Int = -1) {
    let n = t.hashes.count
    var steps = 0
    while (t.count > limits.count || t.bytes > limits.bytes) && steps < 2 * n + 1 {
      steps += 1
      let w = t.hand
      t.hand = w + 1 == n ? 0 : w + 1
      guard t.hashes[w] != 0, w != sparing else { continue }
      if t.entries[w].referenced {
        t.entries[w].referenced = false
      } else {
        evict(&t, at: w)
      }
    }
  }
}
