import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import Synchronization

/// How a `NearCache` runs its file and its share of the invalidation role.
public struct NearCacheOptions: Sendable, Equatable {
  /// Size of the cache file when it is created.
  public var capacity: Int
  /// How often the holder sends a PING whose reply confirms the fence (seconds).
  public var heartbeatInterval: Double
  /// How often a process that does not hold the role tries to take it (seconds): the
  /// longest gap after a holder dies before another one starts.
  public var electionInterval: Double
  /// Whether this process stands for the role (false: it only reads the file; some
  /// other process, or `mapped-cache agent`, must hold it).
  public var standsForHolder: Bool
  /// Longest pause between the holder's reconnect attempts (seconds).
  public var reconnectBackoffCap: Double
  /// Serve local entries even when the fence is older than `maxStaleness` (each such
  /// read is counted in `staleServes`) instead of reading Redis.
  public var serveStale: Bool
  /// Remember for this many seconds that Redis has no value for a key (nil: do not).
  /// A later write of the key invalidates it like any entry.
  public var cacheMisses: Double?
  /// How long a reader waits for another process's fetch of the same key before
  /// fetching itself (seconds); also the lifetime of a fill's placeholder entry.
  public var fillTimeout: Double
  /// In front of a cluster: how often the holder reads the slot map (seconds). A slot
  /// that moved is noticed within this (or at once after a redirect), and the file's
  /// fences never run ahead of the last map read, so keep it well under `maxStaleness`.
  public var topologyInterval: Double

  /// Options with the defaults described above.
  public init(
    capacity: Int = 64 << 20, heartbeatInterval: Double = 0.02, electionInterval: Double = 0.01,
    standsForHolder: Bool = true, reconnectBackoffCap: Double = 0.5, serveStale: Bool = false,
    cacheMisses: Double? = nil, fillTimeout: Double = 2, topologyInterval: Double = 0.1
  ) {
    self.capacity = capacity
    self.heartbeatInterval = heartbeatInterval
    self.electionInterval = electionInterval
    self.standsForHolder = standsForHolder
    self.reconnectBackoffCap = reconnectBackoffCap
    self.serveStale = serveStale
    self.cacheMisses = cacheMisses
    self.fillTimeout = fillTimeout
    self.topologyInterval = topologyInterval
  }
}

/// The figures of a near cache: the file's (shared by every process of the host) and a
/// few of this process.
public struct NearCacheStatistics: Sendable, Equatable, CustomStringConvertible {
  /// Pid of the process holding the invalidation role (nil: none since it resigned).
  public var holderPID: Int32?
  /// Whether that process is alive.
  public var holderAlive: Bool
  /// Whether this process holds the role.
  public var isHolder: Bool
  /// Milliseconds since the last confirmed heartbeat, per Redis node (nil: never).
  public var heartbeatAgeMilliseconds: [UInt64?]
  /// Whether reads trust the file now (the heartbeat is younger than `maxStaleness`).
  public var fenceFresh: Bool
  /// The file's epoch: tracking sessions started and flushes, counted together.
  public var epoch: UInt64
  /// Keys named by invalidations, and how many of them were in the file and removed.
  public var invalidationsReceived: UInt64
  /// Of those, the keys that were in the file and were removed.
  public var invalidationsApplied: UInt64
  /// Null invalidations (FLUSHALL/FLUSHDB in Redis): each one dropped every entry, lazily.
  public var flushes: UInt64
  /// Tracking sessions started after the first of each holder (reconnects), and times a
  /// process took the role.
  public var reconnects: UInt64
  /// Times a process took the role.
  public var holderChanges: UInt64
  /// Reads served from the file with a stale fence (`serveStale`), and reads that went to
  /// Redis because of it.
  public var staleServes: UInt64
  /// Reads sent to Redis because the fence was older than `maxStaleness`.
  public var fenceMisses: UInt64
  /// Entries found stamped with an earlier epoch (treated as misses).
  public var epochMisses: UInt64
  /// Fetches from Redis (every process) and their mean latency; this process's longest.
  public var remoteFetches: UInt64
  /// Mean latency of a fetch, over every process.
  public var remoteFetchMeanMicroseconds: Double
  /// This process's longest fetch.
  public var remoteFetchMaxMicroseconds: Double
  /// The file's own counters.
  public var local: CacheStatistics
  /// In front of a cluster: the node of each heartbeat age ("port P"; empty for one server).
  public var heartbeatNodes: [String] = []
  /// Cluster redirects followed by the processes of the host: MOVED, and ASK.
  public var movedRedirects: UInt64 = 0
  /// ASK redirects followed.
  public var askRedirects: UInt64 = 0
  /// Slot maps read by the holder.
  public var slotMapRefreshes: UInt64 = 0
  /// Slot buckets whose entries were dropped because a slot of theirs changed owner.
  public var slotBucketsDropped: UInt64 = 0
  /// Fleet-wide computes: leases won at once, waits for another owner's value, leases
  /// taken over after another owner's expired, and stores refused because the lease was lost.
  public var leaseWins: UInt64 = 0
  /// Fleet-wide computes that waited for another owner's value.
  public var leaseWaits: UInt64 = 0
  /// Leases taken after another owner's had expired (it died or ran out of time).
  public var leaseTakeovers: UInt64 = 0
  /// Computed values not stored because the lease was lost meanwhile.
  public var leasesLost: UInt64 = 0
  /// Fleet-wide computes with `serveStale` that found another owner's lease and returned
  /// the stale copy of the last value computed.
  public var leaseStaleServes: UInt64 = 0

  /// The figures as lines of text.
  public var description: String {
    let ages = heartbeatAgeMilliseconds.map { $0.map { "\($0) ms" } ?? "never" }.joined(separator: ", ")
    return """
      holder: \(holderPID.map { "pid \($0)\(holderAlive ? "" : " (dead)")" } ?? "none")\(isHolder ? " (this process)" : "")
      heartbeat age: \(ages)\(fenceFresh ? "" : " (fenced)")
      epoch: \(epoch)
      invalidations: \(invalidationsReceived) received, \(invalidationsApplied) applied; flushes: \(flushes)
      reconnects: \(reconnects); holder changes: \(holderChanges)
      stale serves: \(staleServes); fence misses: \(fenceMisses); epoch misses: \(epochMisses)
      remote fetches: \(remoteFetches), mean \(String(format: "%.1f", remoteFetchMeanMicroseconds)) µs, \
      max here \(String(format: "%.1f", remoteFetchMaxMicroseconds)) µs
      """
        + (heartbeatNodes.isEmpty
          ? ""
          : """

          cluster: nodes \(heartbeatNodes.joined(separator: ", ")); MOVED \(movedRedirects), ASK \(askRedirects); \
          slot maps read \(slotMapRefreshes); slot buckets dropped \(slotBucketsDropped)
          """)
        + (leaseWins + leaseWaits + leaseTakeovers + leasesLost + leaseStaleServes == 0
          ? ""
          : """

          fleet leases: \(leaseWins) won, \(leaseWaits) waits, \(leaseTakeovers) taken over, \(leasesLost) lost, \
          \(leaseStaleServes) served stale
          """)
  }
}

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
  let codec = TierCodec<Value>()
  @usableFromInline let maxStalenessMs: UInt64
  /// The file's key limit (read once).
  @usableFromInline let maxKeySize: Int
  let holder: NearCacheHolder?
  private let fetchMaxNs = Atomic<UInt64>(0)
  /// In front of a cluster: entries are stamped by their slot's bucket word.
  let clustered: Bool
  let prefixBytes: [UInt8]
  /// The cluster client's redirect counts already added to the file's.
  private let seenMoved = Atomic<Int>(0)
  private let seenAsk = Atomic<Int>(0)

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
  func fenceFresh(_ word: Int) -> Bool { nearFenceFresh(session: nearSession(local, word), maxStalenessMs) }

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
    let session = nearSession(local, Int(truncatingIfNeeded: header >> 40) &+ 1)
    guard (header >> 8) & 0xffff_ffff == session >> 32 else { return 0 }
    if !nearFenceFresh(session: session, maxStalenessMs) {
      guard options.serveStale else { return 0 }
      countStaleServe()
    }
    if tag == 3 { return 2 }
    result = try NearValueCodec<Value>.decode(UnsafeRawBufferPointer(rebasing: b[8...]), forKey: key)
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

  // MARK: Filling

  struct Claim {
    let epoch: UInt64
    let word: Int
    let bytes: [UInt8]
    let version: UInt64
  }

  enum Step {
    case found(Value?)
    case owned(Claim)
    case wait
    case again
  }

  /// One look at `key`'s entry on the way to a fill: a usable entry, our placeholder put
  /// in place, or a wait for another process's fill.
  ///
  /// A stale fence makes the entry unusable, not the fill: the value is fetched through a
  /// placeholder all the same and replaces the file's older copy. Storing is as safe as
  /// with a fresh fence (an invalidation in flight removes the placeholder; one that was
  /// lost ends its tracking session, whose successor moves the epoch on before any fence
  /// is fresh again), and it keeps reads monotonic on the host: a reader that got version
  /// n + 1 from Redis while the fence was stale cannot find n in the file once a
  /// heartbeat sent before that write makes the fence fresh again.
  func step(_ key: String, deadline: UInt64, life: Double? = nil) throws -> Step {
    let word = word(for: key)
    let fresh = fenceFresh(word)
    let epoch = NearLayout.currentEpoch(local, word)
    let placeholder = NearLayout.pending(
      epoch: epoch, word: word, pid: getpid(), token: UInt64.random(in: 1...UInt64.max))
    // The placeholder outlives its owner's fetch (or compute) with a margin; a dead
    // owner's expires by itself.
    let life = CacheExpiry.seconds(life ?? options.fillTimeout)
    if let (bytes, version) = try local.objectWithVersion(forKey: key) {
      if let (tag, e) = bytes.withUnsafeBytes({ NearLayout.parse($0) }) {
        if e == epoch {
          switch tag {
          case NearLayout.tagValue where fresh:
            return .found(
              try bytes.withUnsafeBytes {
                try codec.decode(UnsafeRawBufferPointer(rebasing: $0[NearLayout.headerSize...]), forKey: key)
              })
          case NearLayout.tagAbsent where fresh:
            return .found(nil)
          case NearLayout.tagPending:
            if let pid = NearLayout.pendingPID(bytes), Self.isAlive(pid), Clock.nanoseconds() < deadline {
              return .wait
            }
          default: break
          }
        } else if tag == NearLayout.tagValue {
          NearLayout.add(local, NearLayout.epochMisses, 1)
        }
      }
      // Stale, of a dead filler, or not ours to wait for: take it over by CAS.
      guard try local.setObject(placeholder, forKey: key, ifVersion: version, expires: life) else { return .again }
    } else {
      guard try local.add(placeholder, forKey: key, expires: life) else { return .again }
    }
    guard let (now, version) = try local.objectWithVersion(forKey: key), now == placeholder else { return .again }
    // A read that goes to Redis because of the fence (counted once, by the fetcher).
    if !fresh { NearLayout.add(local, NearLayout.fenceMisses, 1) }
    return .owned(Claim(epoch: epoch, word: word, bytes: placeholder, version: version))
  }

  static func isAlive(_ pid: Int32) -> Bool { pid > 0 && (kill(pid, 0) == 0 || errno == EPERM) }

  /// Fetches from Redis, timing it.
  func fetch(_ key: String) throws -> ([UInt8], CacheExpiry)? {
    let t0 = Clock.nanoseconds()
    defer {
      let dt = Clock.nanoseconds() &- t0
      NearLayout.add(local, NearLayout.fetches, 1)
      NearLayout.add(local, NearLayout.fetchNanoseconds, dt)
      var m = fetchMaxNs.load(ordering: .relaxed)
      while dt > m {
        let (ok, now) = fetchMaxNs.compareExchange(expected: m, desired: dt, ordering: .relaxed)
        if ok { break }
        m = now
      }
    }
    defer { noteRedirects() }
    return try remote.fetchBytesAndExpiry(forKey: key)
  }

  /// Adds the cluster client's new redirects to the file's counters and, after a MOVED,
  /// bumps the topology word: the holder reads the slot map at once.
  func noteRedirects() {
    guard let (moved, ask) = remote.client.cluster?.redirectCounts else { return }
    let m0 = seenMoved.exchange(moved, ordering: .relaxed)
    let a0 = seenAsk.exchange(ask, ordering: .relaxed)
    if moved > m0 {
      NearLayout.add(local, NearLayout.Cluster.moved, UInt64(moved - m0))
      NearLayout.add(local, NearLayout.topology, 1)
    }
    if ask > a0 { NearLayout.add(local, NearLayout.Cluster.ask, UInt64(ask - a0)) }
  }

  /// Stores what the fetch found in place of our placeholder, only if it is still there.
  func complete(_ key: String, _ claim: Claim, _ fetched: ([UInt8], CacheExpiry)?) throws -> Value? {
    afterFetch?(key)
    guard let (bytes, expires) = fetched else {
      if let negative = options.cacheMisses {
        let frame = NearLayout.frame(tag: NearLayout.tagAbsent, epoch: claim.epoch, word: claim.word)
        _ = try? local.setObject(frame, forKey: key, ifVersion: claim.version, expires: .seconds(negative))
      } else {
        release(key, claim)
      }
      return nil
    }
    let value: Value
    do { value = try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) } } catch {
      release(key, claim)
      throw error
    }
    let frame = bytes.withUnsafeBytes {
      NearLayout.frame(tag: NearLayout.tagValue, epoch: claim.epoch, word: claim.word, payload: $0)
    }
    // false: an invalidation (or a local write) removed the placeholder meanwhile.
    if (try? local.setObject(frame, forKey: key, ifVersion: claim.version, expires: expires)) != true {
      release(key, claim)
    }
    return value
  }

  /// Removes our placeholder if it is still there (a CAS to an entry already expired).
  func release(_ key: String, _ claim: Claim) {
    _ = try? local.setObject(
      claim.bytes, forKey: key, ifVersion: claim.version, expires: .date(Date(timeIntervalSince1970: 0)))
  }

  @usableFromInline
  func fill(_ key: String) throws -> Value? {
    let deadline = Clock.nanoseconds() &+ UInt64(options.fillTimeout * 1e9)
    var pause: UInt64 = 100_000
    for _ in 0..<10_000 {
      switch try step(key, deadline: deadline) {
      case .found(let v): return v
      case .again: continue
      case .owned where !usePlaceholders:
        // The race the placeholder closes, kept for the test that shows it: fetch, then store.
        let word = word(for: key)
        let epoch = NearLayout.currentEpoch(local, word)
        guard let (bytes, expires) = try fetch(key) else { return nil }
        afterFetch?(key)
        let frame = bytes.withUnsafeBytes {
          NearLayout.frame(tag: NearLayout.tagValue, epoch: epoch, word: word, payload: $0)
        }
        try local.setObject(frame, forKey: key, expires: expires)
        return try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) }
      case .wait:
        Clock.sleep(nanoseconds: pause)
        pause = min(pause * 2, 5_000_000)
      case .owned(let claim):
        let fetched: ([UInt8], CacheExpiry)?
        do { fetched = try fetch(key) } catch {
          release(key, claim)
          throw error
        }
        return try complete(key, claim, fetched)
      }
    }
    return try fetchDecoded(key)
  }

  @usableFromInline
  func remoteOnly(_ key: String) throws -> Value? { try fetchDecoded(key) }

  @usableFromInline
  func countStaleServe() { NearLayout.add(local, NearLayout.staleServes, 1) }

  private func fetchDecoded(_ key: String) throws -> Value? {
    guard let (bytes, _) = try fetch(key) else { return nil }
    return try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) }
  }

  // MARK: Get-or-compute

  /// The value for `key`; when neither the file nor Redis has it, computes it (once per
  /// host: other processes wait for the placeholder's owner; with
  /// `computeOptions.fleetWide`, once in the fleet under a lease in Redis, see
  /// `FleetLease`), stores it in Redis with `expires` and returns it. `fromCache` is false only when computed here. When Redis
  /// is unreachable, the value is computed and returned without being stored.
  public func object(
    forKey key: String, expires: CacheExpiry? = nil, options computeOptions: ComputeOptions = ComputeOptions(),
    orCompute compute: () async throws -> Value
  ) async throws -> (value: Value, fromCache: Bool) {
    if let v = try object(forKeyLocally: key) { return (v, true) }
    let wait = max(options.fillTimeout, computeOptions.waitTimeout)
    let deadline = Clock.nanoseconds() &+ UInt64(wait * 1e9)
    var pause: UInt64 = 100_000
    for _ in 0..<100_000 {
      switch try step(key, deadline: deadline, life: wait) {
      case .found(let v?): return (v, true)
      case .found(nil):
        let fetched: ([UInt8], CacheExpiry)?
        do { fetched = try fetch(key) } catch let e as CacheError {
          guard case .remoteUnavailable = e else { throw e }
          return (try await compute(), false)
        }
        if let (bytes, _) = fetched { return (try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) }, true) }
        if computeOptions.fleetWide {
          do {
            if let r = try await fleetCompute(key, nil, expires: expires, computeOptions, compute) { return r }
          } catch CacheError.remoteUnavailable {
            // Redis went away meanwhile: computed here, not stored (as without a lease).
            return (try await compute(), false)
          }
        }
        let v = try await compute()
        try? remote.setObject(v, forKey: key, expires: expires)
        return (v, false)
      case .again: continue
      case .wait:
        try await Task.sleep(nanoseconds: pause)
        pause = min(pause * 2, UInt64(max(0.001, computeOptions.maxPollInterval) * 1e9))
      case .owned(let claim):
        let fetched: ([UInt8], CacheExpiry)?
        do { fetched = try fetch(key) } catch let e as CacheError {
          release(key, claim)
          guard case .remoteUnavailable = e else { throw e }
          return (try await compute(), false)
        }
        if fetched != nil, let v = try complete(key, claim, fetched) { return (v, true) }
        if computeOptions.fleetWide {
          do {
            if let r = try await fleetCompute(key, claim, expires: expires, computeOptions, compute) { return r }
          } catch CacheError.remoteUnavailable {
            release(key, claim)
            return (try await compute(), false)
          } catch {
            release(key, claim)
            throw error
          }
        }
        let v: Value
        do { v = try await compute() } catch {
          release(key, claim)
          throw error
        }
        do { try remote.setObject(v, forKey: key, expires: expires) } catch {
          release(key, claim)
          return (v, false)
        }
        // Waiters may take it from here; our own SET's invalidation removes it soon after
        // (BCAST tells the holder of every write), and later reads fetch it from Redis.
        let frame = try codec.encode(v).withUnsafeBytes {
          NearLayout.frame(tag: NearLayout.tagValue, epoch: claim.epoch, word: claim.word, payload: $0)
        }
        if (try? local.setObject(frame, forKey: key, ifVersion: claim.version, expires: expires)) != true {
          release(key, claim)
        }
        return (v, false)
      }
    }
    return (try await compute(), false)
  }

  /// The file's fresh entry for `key`, if any (no remote call).
  public func object(forKeyLocally key: String) throws -> Value? {
    var result: Value? = nil
    return try local.withBytes(forKey: key) { try judge($0, key, &result) } == 1 ? result : nil
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
    NearLayout.statistics(
      local, maxStalenessMs: maxStalenessMs, isHolder: holder?.isHolding ?? false,
      fetchMaxNs: fetchMaxNs.load(ordering: .relaxed))
  }
}

extension NearCache: Cache {}

/// Whether a session word's fence is younger than `maxStalenessMs` (modulo 2^32 ms; a
/// fence slightly ahead is fresh: the coarse clock lags the holder's precise one by up to
/// a tick).
@inlinable @inline(__always)
func nearFenceFresh(session w: UInt64, _ maxStalenessMs: UInt64) -> Bool {
  guard w != 0 else { return false }
  let age = UInt32(truncatingIfNeeded: Clock.coarseMilliseconds()) &- UInt32(truncatingIfNeeded: w)
  return UInt64(age) <= maxStalenessMs || age > UInt32.max - 1000
}

/// Tier word `word` of `local` (epoch and fence: the session word, or a cluster slot
/// bucket's): the one tier word a hit loads, through the tier SPI (a call: SPI cannot be
/// used from inlinable code, and the mapping's pointers stay inside MappedCache). A word
/// out of range (a damaged frame) reads as 0: never fresh.
@usableFromInline
func nearSession(_ local: SharedCache<[UInt8]>, _ word: Int) -> UInt64 { (try? local.tierWord(word)) ?? 0 }

/// Whether the fence of `local` is younger than `maxStalenessMs` (every slot bucket's, in
/// front of a cluster).
func nearFenceFresh(_ local: SharedCache<[UInt8]>, _ maxStalenessMs: UInt64) -> Bool {
  guard NearLayout.isClustered(local) else {
    return nearFenceFresh(session: nearSession(local, NearLayout.epoch), maxStalenessMs)
  }
  return (0..<NearLayout.bucketCount).allSatisfy {
    nearFenceFresh(session: nearSession(local, NearLayout.bucketBase + $0), maxStalenessMs)
  }
}

/// The value codec of `SharedCache<Value>` (a `CacheValueEncodable` type's own bytes,
/// else the binary Codable format), inlinable so that it specializes in the caller; the
/// same choice and the same bytes as `TierCodec`, which tests check.
@usableFromInline
enum NearValueCodec<Value: Codable> {
  @inlinable @inline(__always)
  static func decode(_ b: UnsafeRawBufferPointer, forKey key: String) throws -> Value {
    do {
      if Value.self == String.self { return try String(cacheBytes: b) as! Value }
      if Value.self == [UInt8].self { return [UInt8](b) as! Value }
      if let t = Value.self as? any CacheValueEncodable.Type { return try t.init(cacheBytes: b) as! Value }
      return try BinaryCoding.decode(Value.self, from: [UInt8](b))
    } catch {
      throw CacheError.decodingFailed(key: key, reason: "\(error)")
    }
  }
}
