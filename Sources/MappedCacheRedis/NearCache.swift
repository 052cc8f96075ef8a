import Foundation
@_spi(Tiers) import MappedCache
import Synchronization
import SystemCalls

// The near cache, by concern: this file (the type, opening, the hit path, writes,
// figures), `NearCache+Fill.swift` (a miss's fill through a placeholder),
// `NearCache+Compute.swift` (get-or-compute), `NearCache+FleetLease.swift` (the fleet's
// single flight), `NearFence.swift` (the fence check), `NearLayout.swift` (tier words
// and frames), `NearCacheHolder.swift` (the invalidation role).

/// Every process of a host reads shared data from one memory-mapped file, in front of
/// Redis: reads hit the file first (no lock, no system call); a miss reads Redis and
/// back-fills the file for every process; writes and removals go to Redis first, then
/// remove the key locally. One process per host holds a tracking connection
/// (`NearCacheHolder`) whose invalidations remove keys overwritten anywhere.
///
/// ```swift
/// let redis = try RedisCache<User>(url: "redis://127.0.0.1:6379/0", keyPrefix: "users:")
/// let users = try NearCache<User>(path: "/dev/shm/users.mcache", remote: redis, maxStaleness: .milliseconds(500))
/// try users.setObject(ada, forKey: "1", expires: .seconds(300))
/// let u = try users.object(forKey: "1")
/// let (r, fromCache) = try await users.object(forKey: "2", expires: .seconds(60)) { try await db.load(2) }
/// ```
///
/// Guarantees:
/// - **No read/invalidate race.** A fill writes a placeholder before its GET and swaps in
///   the value by compare-and-swap after; an invalidation that arrives meanwhile removes
///   the placeholder, so the late value is not stored (it is still returned to that
///   caller, whose read happened before the write).
/// - **Staleness bound.** An entry is served only while the holder's last confirmed
///   heartbeat is younger than `maxStaleness` (plus one clock tick): every invalidation of
///   a write made before that heartbeat was applied. Otherwise reads go to Redis
///   (`serveStale`: served and counted).
/// - **After a reconnect** only entries that could have missed invalidations, those of
///   earlier sessions, are misses (an epoch in each entry, no wipe); the refill is one
///   fetch per key per host (waiters wait for the placeholder's owner).
///
/// The file holds framed bytes (see `NearLayout`), so open it only through `NearCache`.
public final class NearCache<Value: Codable>: @unchecked Sendable {
  /// The file (its entries are frames; read them through the near cache).
  public let local: SharedCache<[UInt8]>
  /// The Redis tier behind it.
  public let remote: RedisCache<Value>
  /// How long after the last confirmed heartbeat the file is still trusted.
  public let maxStaleness: Duration
  /// How the file and the role are run.
  public let options: NearCacheOptions
  /// The value codec `SharedCache<Value>` uses, shared by every tier (`TierCodec`).
  @usableFromInline let codec = TierCodec<Value>()
  @usableFromInline let maxStalenessMs: UInt64
  /// The file's key limit (read once).
  @usableFromInline let maxKeySize: Int
  let holder: NearCacheHolder?
  /// This process's longest fetch (figures).
  let fetchMaxNs = Atomic<UInt64>(0)
  /// In front of a cluster: entries are stamped by their slot's bucket word.
  let clustered: Bool
  let prefixBytes: [UInt8]
  /// The cluster client's redirect counts already added to the file's.
  let seenMoved = Atomic<Int>(0)
  let seenAsk = Atomic<Int>(0)

  /// Test hooks: called by a fill after its remote fetch, before it stores the value; and
  /// whether fills use placeholders (off only to show the race they close).
  var afterFetch: (@Sendable (String) -> Void)?
  var usePlaceholders = true

  /// Opens (or creates) the file at `path` in front of `remote`; with
  /// `options.standsForHolder` this process stands for the invalidation role. Throws
  /// `.typeMismatch` when the file belongs to another value type or key prefix, and
  /// `.invalidArgument` when `maxStaleness` is under two heartbeats.
  public init(
    path: String, remote: RedisCache<Value>, maxStaleness: Duration = .milliseconds(500),
    options: NearCacheOptions = NearCacheOptions(), policy: OpenPolicy = OpenPolicy()
  ) throws {
    let (s, atto) = maxStaleness.components
    let ms = Double(s) * 1000 + Double(atto) / 1e15
    guard ms >= options.heartbeatInterval * 2000 else {
      throw CacheError.invalidArgument(
        "maxStaleness (\(ms) ms) must be at least twice the heartbeat interval (\(options.heartbeatInterval * 1000) ms)"
      )
    }
    self.remote = remote
    self.maxStaleness = maxStaleness
    self.options = options
    self.maxStalenessMs = UInt64(ms)
    clustered = remote.client.isCluster
    prefixBytes = Array(remote.keyPrefix.utf8)
    local = try SharedCache<[UInt8]>(path: path, capacity: options.capacity, policy: policy)
    maxKeySize = local.maxKeySize
    // One file, one value type and one prefix.
    try NearLayout.claim(
      local, NearLayout.identity, NearLayout.fingerprint(codec.typeName),
      expected: "a near cache of \(codec.typeName)", other: "a near cache of another value type")
    try NearLayout.claim(
      local, NearLayout.prefixIdentity, NearLayout.fingerprint(remote.keyPrefix),
      expected: "a near cache of keys under \"\(remote.keyPrefix)\"",
      other: "a near cache of another key prefix")
    if options.standsForHolder && local.isWritable {
      let h = NearCacheHolder(
        local: local, endpoint: remote.client.endpoint, redisOptions: remote.client.options,
        prefix: remote.keyPrefix, options: options, cluster: clustered ? remote.client : nil)
      holder = h
      h.start()
    } else {
      holder = nil
    }
  }

  deinit { holder?.stop() }

  /// Stops standing for the invalidation role (resigning it if held) and waits for the
  /// candidate thread to end: at most a connect or command timeout when it is in the
  /// middle of one. Reads and writes still work; another process takes the role.
  /// `deinit` does the same.
  public func close() { holder?.stop() }

  // MARK: Freshness

  /// The tier word that stamps `key`'s entries: the session word, or (in front of a
  /// cluster) the bucket of the slot of the key's Redis key.
  func word(for key: String) -> Int {
    guard clustered else { return NearLayout.epoch }
    return NearLayout.bucketWord(slot: ClusterSlots.slot(prefixBytes + Array(key.utf8)))
  }

  /// Whether the fence of `word` is recent enough to trust the file's entries it stamps.
  func fenceFresh(_ word: Int) -> Bool { NearFence.isFresh(session: NearFence.session(local, word), maxStalenessMs) }

  // MARK: Reading

  /// The value for `key`: from the file when it holds a fresh entry, otherwise from
  /// Redis (back-filling the file); nil when Redis has none.
  ///
  /// Inlinable, so that the hit path is specialized for `Value` in the caller as
  /// `SharedCache.object(forKey:)` is: one copy from the file to the stack, one load of
  /// the session word (one call) and a coarse clock read to check the entry's epoch and
  /// the fence, the decode.
  @inlinable
  public func object(forKey key: String) throws -> Value? {
    // A key the file cannot hold is read from Redis every time.
    if key.utf8.count > maxKeySize { return try remoteOnly(key) }
    var result: Value? = nil
    // 1: hit, 2: absent (a cached miss), 0: not servable, n > 256: a larger entry.
    let look = try withUnsafeTemporaryAllocation(byteCount: 256, alignment: 16) { buffer -> Int in
      guard let n = try local.copyBytes(forKey: key, into: buffer) else { return 0 }
      if n > 256 { return n }
      return try judge(UnsafeRawBufferPointer(start: buffer.baseAddress, count: n), key, &result)
    }
    switch look {
    case 1: return result
    case 2: return nil
    case 0: return try fill(key)
    default:
      switch try local.withBytes(forKey: key, { try judge($0, key, &result) }) ?? 0 {
      case 1: return result
      case 2: return nil
      default: return try fill(key)
      }
    }
  }

  /// Whether a stored frame can be served (1, decoding it into `result`; 2 for a cached
  /// miss; 0 otherwise).
  @inlinable @inline(__always)
  func judge(_ b: UnsafeRawBufferPointer, _ key: String, _ result: inout Value?) throws -> Int {
    guard b.count >= 8 else { return 0 }
    let header = UInt64(littleEndian: b.loadUnaligned(as: UInt64.self))
    let tag = header & 0xff
    guard tag == 1 || tag == 3 else { return 0 }
    // The entry's epoch is its word's (the session word, or its slot bucket's), and that
    // word's fence is fresh (or serveStale, counted).
    let session = NearFence.session(local, Int(truncatingIfNeeded: header >> 40) &+ 1)
    guard (header >> 8) & 0xffff_ffff == session >> 32 else { return 0 }
    if !NearFence.isFresh(session: session, maxStalenessMs) {
      guard options.serveStale else { return 0 }
      countStaleServe()
    }
    if tag == 3 { return 2 }
    result = try codec.decode(UnsafeRawBufferPointer(rebasing: b[8...]), forKey: key)
    return 1
  }

  /// The value for `key` and when it expires (the file's entry when fresh, else Redis's).
  public func objectAndExpiry(forKey key: String) throws -> (value: Value, expires: CacheExpiry)? {
    if let v = try object(forKey: key) {
      if let e = try local.expiry(forKey: key) { return (v, e) }
      return try remote.objectAndExpiry(forKey: key) ?? (v, .never)
    }
    return nil
  }

  // MARK: Writing

  /// Stores `value` in Redis (`SET prefix+key … PX`), then removes the key from the file:
  /// the next read on this host fetches the new value; other hosts drop theirs when the
  /// invalidation reaches their holder.
  public func setObject(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) throws {
    defer { noteRedirects() }
    try remote.setObject(value, forKey: key, expires: expires)
    try removeLocally(key)
  }

  /// Removes `key` from the file (a key too long for it cannot be there).
  private func removeLocally(_ key: String) throws {
    do { _ = try local.removeObject(forKey: key) } catch CacheError.keyTooLarge {}
  }

  /// Removes `key` from Redis, then from the file; false when Redis had no such key.
  @discardableResult
  public func removeObject(forKey key: String) throws -> Bool {
    defer { noteRedirects() }
    let had = try remote.removeObject(forKey: key)
    try removeLocally(key)
    return had
  }

  /// Removes every key of the prefix from Redis (SCAN + UNLINK, never FLUSHALL), then
  /// drops every entry of the file by moving the epoch on (no wipe).
  public func removeAllObjects() throws {
    try remote.removeAllObjects()
    NearLayout.bumpAllEpochs(local)
  }

  // MARK: Figures

  /// The figures of the file and of this process, read now without a lock.
  public var statistics: NearCacheStatistics {
    NearCacheStatistics(
      local, maxStalenessMs: maxStalenessMs, isHolder: holder?.isHolding ?? false,
      fetchMaxNs: fetchMaxNs.load(ordering: .relaxed))
  }
}

extension NearCache: Cache {}
