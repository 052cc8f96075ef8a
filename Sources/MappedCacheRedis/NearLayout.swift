@_spi(Tiers) import MappedCache

/// What a near cache keeps in its file: the tier words of the header and the frame around
/// every entry's value.
///
/// Tier words (16 × 64 bits in the file's header, shared by every process of the host,
/// 0 in a new file):
///
///     0  identity   fingerprint of the value type (claimed by CAS; agents leave it)
///     1  session    epoch << 32 | fence mod 2^32, the one word a read loads:
///                   epoch: the tracking session the entries belong to, bumped by the
///                   holder on every new session (a reconnect, a takeover) and on a
///                   flush; an entry stamped with another epoch is a miss (dropped
///                   lazily). fence: node 0's CLOCK_MONOTONIC ms at which the holder
///                   sent the last PING whose reply it has read (every push before that
///                   reply applied); compared modulo 2^32 ms (49 days)
///     2  fence      the same fence in full (figures only)
///     3  holder     pid of the process holding the role (0: none, or resigned)
///     4  received   invalidated keys received      5  applied   keys removed by them
///     6  flushes    null invalidations (FLUSHALL)  7  sessions  tracking sessions started
///     8  stale      stale serves (serveStale)      9  fenced    fence misses
///    10  epochMiss  entries dropped for an old epoch
///    11  fetches    remote fetches                12  fetchNs  their total latency
///    13  holders    times a process took the role
///    14  prefix     fingerprint of the key prefix the holder tracks (claimed by CAS)
///    15  topology   bumped by any process that saw a redirect: the holder reads the
///                   cluster's slot map again at once
///    16-31          a cluster's per-node fences: port << 48 | CLOCK_MONOTONIC ms of the
///                   node's last confirmed heartbeat (figures; 0: no node)
///    32-47          cluster and lease counters (`NearLayout.Cluster`)
///    64-319         a cluster's slot buckets: bucket b holds slots 64b ..< 64b+64, its
///                   word is laid out as the session word (epoch << 32 | fence mod 2^32),
///                   its fence the oldest of the fences of the nodes owning its slots and
///                   of the holder's last confirmed slot map (`NearCacheSlots.swift`)
///
/// Frame of an entry (little-endian):
///
///     [ header: UInt64 = word << 40 | epoch << 8 | tag ][ payload ]
///     word: the tier word that stamps the entry, less 1 (0: the session word; with a
///           cluster, the slot bucket of the key): the hit loads that one word
///     tag 1 value:    payload = the value's bytes (as `SharedCache<Value>` stores them)
///     tag 2 pending:  payload = pid (UInt32) + token (UInt64): a fill in flight
///     tag 3 absent:   no payload: Redis has no such key (negative caching, opt-in)
enum NearLayout {
  static let identity = 0, epoch = 1, fence = 2, holder = 3
  static let received = 4, applied = 5, flushes = 6, sessions = 7
  static let staleServes = 8, fenceMisses = 9, epochMisses = 10
  static let fetches = 11, fetchNanoseconds = 12, holders = 13, prefixIdentity = 14

  static let headerSize = 8
  static let tagValue: UInt8 = 1, tagPending: UInt8 = 2, tagAbsent: UInt8 = 3
  static let epochMask: UInt64 = (1 << 32) - 1

  static func header(tag: UInt8, epoch: UInt64, word: Int = epoch) -> UInt64 {
    UInt64(truncatingIfNeeded: word &- 1) << 40 | (epoch & epochMask) << 8 | UInt64(tag)
  }

  static func frame(tag: UInt8, epoch: UInt64, word: Int = epoch, payload: UnsafeRawBufferPointer? = nil) -> [UInt8] {
    var out = [UInt8]()
    out.reserveCapacity(headerSize + (payload?.count ?? 0))
    withUnsafeBytes(of: header(tag: tag, epoch: epoch, word: word).littleEndian) { out.append(contentsOf: $0) }
    if let payload { out.append(contentsOf: payload) }
    return out
  }

  static func pending(epoch: UInt64, word: Int = epoch, pid: Int32, token: UInt64) -> [UInt8] {
    var out = frame(tag: tagPending, epoch: epoch, word: word)
    withUnsafeBytes(of: UInt32(bitPattern: pid).littleEndian) { out.append(contentsOf: $0) }
    withUnsafeBytes(of: token.littleEndian) { out.append(contentsOf: $0) }
    return out
  }

  /// The tag and epoch of a frame; nil when it is too short to be one.
  @inline(__always)
  static func parse(_ b: UnsafeRawBufferPointer) -> (tag: UInt8, epoch: UInt64)? {
    guard b.count >= headerSize else { return nil }
    let h = UInt64(littleEndian: b.loadUnaligned(as: UInt64.self))
    return (UInt8(truncatingIfNeeded: h), (h >> 8) & epochMask)
  }

  /// The pid of a pending frame's filler.
  static func pendingPID(_ b: [UInt8]) -> Int32? {
    guard b.count >= headerSize + 12 else { return nil }
    return b.withUnsafeBytes {
      Int32(bitPattern: UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: headerSize, as: UInt32.self)))
    }
  }

  /// Adds `n` to counter word `i` (a CAS loop; counters are only touched off the hit path).
  static func add(_ cache: SharedCache<[UInt8]>, _ i: Int, _ n: UInt64) {
    guard n > 0, cache.isWritable else { return }
    for _ in 0..<64 {
      guard let w = try? cache.tierWord(i) else { return }
      if (try? cache.compareExchangeTierWord(i, expected: w, desired: w &+ n)) == true { return }
    }
  }

  /// The current epoch of tier word `word` (its high half): the session word's, or a
  /// cluster slot bucket's.
  static func currentEpoch(_ cache: SharedCache<[UInt8]>, _ word: Int = epoch) -> UInt64 {
    ((try? cache.tierWord(word)) ?? 0) >> 32
  }

  /// Moves the epoch of `word` on (never to 0): every entry stamped before becomes a miss.
  static func bumpEpoch(_ cache: SharedCache<[UInt8]>, _ word: Int = epoch) {
    for _ in 0..<1000 {
      guard let w = try? cache.tierWord(word) else { return }
      var next = ((w >> 32) &+ 1) & epochMask
      if next == 0 { next = 1 }
      if (try? cache.compareExchangeTierWord(word, expected: w, desired: next << 32 | (w & 0xffff_ffff))) == true {
        return
      }
    }
  }

  /// Records a confirmed heartbeat sent at `ms` (CLOCK_MONOTONIC) in both fence words.
  static func storeFence(_ cache: SharedCache<[UInt8]>, _ ms: UInt64) {
    try? cache.storeTierWord(fence, ms)
    storeFenceHalf(cache, epoch, ms)
  }

  /// Sets the low half (the fence, mod 2^32 ms) of `word`, keeping its epoch.
  static func storeFenceHalf(_ cache: SharedCache<[UInt8]>, _ word: Int, _ ms: UInt64) {
    for _ in 0..<1000 {
      guard let w = try? cache.tierWord(word) else { return }
      if w & 0xffff_ffff == ms & 0xffff_ffff { return }
      if (try? cache.compareExchangeTierWord(word, expected: w, desired: (w & ~0xffff_ffff) | (ms & 0xffff_ffff)))
        == true
      {
        return
      }
    }
  }

  /// FNV-1a of `text`, never 0 (0 is "unclaimed").
  static func fingerprint(_ text: String) -> UInt64 {
    var h: UInt64 = 0xcbf2_9ce4_8422_2325
    for b in text.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
    return h | 1
  }

  /// Claims tier word `index` for `value` when unclaimed; throws `.typeMismatch` when
  /// another value holds it.
  static func claim(_ cache: SharedCache<[UInt8]>, _ index: Int, _ value: UInt64, expected: String, other: String)
    throws
  {
    if try cache.tierWord(index) == 0 && cache.isWritable {
      _ = try cache.compareExchangeTierWord(index, expected: 0, desired: value)
    }
    guard try cache.tierWord(index) == value else {
      throw CacheError.typeMismatch(path: cache.path, expected: expected, found: other)
    }
  }
}
