import Foundation
import Glibc
import SystemCalls

/// How `object(forKey:expires:options:orCompute:)` and `setObject(forKey:cacheBlock:completion:)`
/// behave when the key is missing.
public struct ComputeOptions: Sendable, Equatable {
  /// How long to wait for another process (or thread) computing the same key before
  /// computing here as well. Default 30 seconds.
  public var waitTimeout: TimeInterval
  /// While another process recomputes an expired entry that is still present, return
  /// that stale value at once (`fromCache` true) instead of waiting (nginx's
  /// `proxy_cache_use_stale updating`).
  public var serveStale: Bool
  /// Negative caching: when the compute fails, remember the failure for this many
  /// seconds; callers in every process then get `CacheError.computeFailed` without
  /// computing. nil (the default): failures are not cached.
  public var cacheFailuresFor: TimeInterval?
  /// Longest pause between two looks while waiting (backoff starts at 1 ms).
  public var maxPollInterval: TimeInterval
  /// Single flight across the fleet, for tiers that have one (the Redis near cache):
  /// one process in the whole fleet computes a missing key under a lease of
  /// `leaseDuration` seconds, the others wait for its value. `SharedCache` itself, one
  /// host, ignores it.
  public var fleetWide: Bool
  /// How long a fleet-wide computer's lease lasts without renewal (it is renewed every
  /// third of that while the computation runs): the longest a dead or stalled computer
  /// holds the others up before one of them takes over.
  public var leaseDuration: TimeInterval
  /// Fleet-wide with `serveStale`: how long past its own expiry (or removal) the last
  /// value computed under a lease may still be served to callers that find another
  /// owner's lease, while that owner recomputes. The computer stores it as a stale copy
  /// beside the value (in the same slot), living this much longer.
  public var staleFor: TimeInterval

  /// Options for get-or-compute; see each property.
  public init(
    waitTimeout: TimeInterval = 30, serveStale: Bool = false, cacheFailuresFor: TimeInterval? = nil,
    maxPollInterval: TimeInterval = 0.02, fleetWide: Bool = false, leaseDuration: TimeInterval = 10,
    staleFor: TimeInterval = 60
  ) {
    self.staleFor = staleFor
    self.waitTimeout = waitTimeout
    self.serveStale = serveStale
    self.cacheFailuresFor = cacheFailuresFor
    self.maxPollInterval = maxPollInterval
    self.fleetWide = fleetWide
    self.leaseDuration = leaseDuration
  }
}

/// A claim to compute one key: an exclusive OFD lock on one byte of the cache file, at
/// `base + (hash of key mod span)`, beyond the file's end (locks need no data there; the
/// range is disjoint from the process witnesses at `WriteLock.witnessBase`).
///
/// Each claim opens the cache file again for its own open file description, so claims
/// exclude each other between threads of one process as between processes. The kernel
/// drops the lock when the descriptor closes, that is on `release`, on `deinit`, or when
/// the process dies (even by SIGKILL): a dead claimer never blocks anyone. Two keys whose
/// hashes meet in the 2^40-byte span share a claim (a waiter then waits for the other
/// key's compute, bounded by its timeout): a chance of 2^-40 per pair of keys in flight.
final class ComputeClaim {
  static let base: Int64 = 1 << 41
  static let span: UInt64 = 1 << 40

  private let fd: Int32
  let offset: Int64
  private(set) var held = false

  init(engine: CacheEngine, key: UnsafeRawBufferPointer) throws {
    offset = ComputeClaim.offset(key)
    do {
      fd = try SystemCall.open(engine.path, flags: O_RDWR, mode: 0)
    } catch {
      throw CacheError.system(error)
    }
    let st: stat
    do { st = try SystemCall.fstat(fd) } catch {
      SystemCall.close(fd)
      throw CacheError.system(error)
    }
    // The path must still name the file the engine has mapped: a lock on another
    // inode would exclude nobody.
    guard UInt64(st.st_dev) == engine.file.device, UInt64(st.st_ino) == engine.file.inode else {
      SystemCall.close(fd)
      throw CacheError.fileReplaced(path: engine.path)
    }
  }

  static func offset(_ key: UnsafeRawBufferPointer) -> Int64 {
    base + Int64(truncatingIfNeeded: KeyHash.key(key) & (span - 1))
  }

  /// Takes the claim if nobody holds it; true when this claim now holds it.
  func tryAcquire() throws -> Bool {
    if held { return true }
    do { held = try SystemCall.lockByteExclusive(fd, at: offset) } catch { throw CacheError.system(error) }
    return held
  }

  func release() {
    if held { SystemCall.unlockByte(fd, at: offset) }
    held = false
  }

  deinit { SystemCall.close(fd) }  // closing drops the lock as well
}

extension SharedCache where Value: Codable & SendableMetatype {
  // MARK: Get-or-compute

  /// The value for `key`; when it is missing, computes it once across every process
  /// sharing the file, stores it (expiring as `expires`, or by `defaultExpiry`) and
  /// returns it. `fromCache` tells whether the value was read rather than computed here.
  ///
  /// When several processes or threads miss the same key at once, one of them claims it
  /// and computes; the others wait for its result (polling with backoff), for at most
  /// `options.waitTimeout`, then compute themselves. A claimer that dies releases its
  /// claim at once. A failed compute is thrown to its caller and not cached, unless
  /// `options.cacheFailuresFor` asks for negative caching. A read-only handle computes
  /// without claiming and stores nothing.
  ///
  /// A hit costs what `object(forKey:)` costs; a miss opens the file once more for the
  /// claim (its own lock, dropped by the kernel if this process dies).
  ///
  /// - Throws: whatever `compute` throws; ``CacheError/computeFailed(key:reason:)`` while
  ///   a cached failure lasts; ``CacheError/fileReplaced(path:)`` when the path now names
  ///   another file (a claim there would exclude nobody); the errors of `object(forKey:)`
  ///   and `setObject(_:forKey:expires:)`.
  public func object(
    forKey key: String, expires: CacheExpiry? = nil, options: ComputeOptions = ComputeOptions(),
    orCompute compute: () async throws -> Value
  ) async throws -> (value: Value, fromCache: Bool) {
    if let v = try object(forKey: key) { return (v, true) }
    try throwIfFailureCached(key)
    guard engine.writable else { return (try await compute(), false) }
    let claim = try withKey(key) { try ComputeClaim(engine: engine, key: $0) }
    let deadline = SystemCall.monotonicNanoseconds() &+ ComputeWait.nanoseconds(options.waitTimeout)
    var wait = ComputeWait(max: options.maxPollInterval)
    while true {
      switch try step(key, claim, options, deadline) {
      case .cached(let v):
        return (v, true)
      case .claimed:
        defer { claim.release() }
        return (try await computeAndStore(key, expires, options, compute), false)
      case .timedOut:
        claim.release()
        return (try await computeAndStore(key, expires, options, compute), false)
      case .wait:
        try await Task.sleep(nanoseconds: wait.next())
      }
    }
  }

  /// AwesomeCache's get-or-compute. When `key` has a live value, `completion(value, true,
  /// nil)` runs at once on the calling thread. Otherwise `cacheBlock` is called with two
  /// closures; call `success(value, expiry)` to store and return the value, or
  /// `failure(error)` to report an error (cached only with `options.cacheFailuresFor`);
  /// either may be called later from any thread. `completion(value, false, nil)` or
  /// `completion(nil, false, error)` follows. As with `object(forKey:orCompute:)`, only
  /// one process computes a key at a time; a caller that has to wait for another does
  /// so on a background queue and gets its completion there.
  public func setObject(
    forKey key: String, options: ComputeOptions = ComputeOptions(),
    cacheBlock:
      @escaping @Sendable (
        _ success: @escaping @Sendable (Value, CacheExpiry) -> Void,
        _ failure: @escaping @Sendable (Error?) -> Void
      ) -> Void,
    completion: @escaping @Sendable (_ value: Value?, _ isLoadedFromCache: Bool, _ error: Error?) -> Void
  ) {
    let claim: ComputeClaim?
    do {
      if let v = try object(forKey: key) { return completion(v, true, nil) }
      try throwIfFailureCached(key)
      claim = engine.writable ? try withKey(key) { try ComputeClaim(engine: engine, key: $0) } : nil
    } catch {
      return completion(nil, false, error)
    }
    guard let claim else { return runBlock(key, nil, options, cacheBlock, completion) }
    let deadline = SystemCall.monotonicNanoseconds() &+ ComputeWait.nanoseconds(options.waitTimeout)
    let box = ClaimBox(claim)
    // One look on the caller's thread; waiting moves to a background queue.
    @Sendable func look() -> Bool {
      do {
        switch try step(key, box.claim, options, deadline) {
        case .cached(let v): completion(v, true, nil)
        case .claimed: runBlock(key, box, options, cacheBlock, completion)
        case .timedOut:
          box.claim.release()
          runBlock(key, nil, options, cacheBlock, completion)
        case .wait: return false
        }
      } catch {
        completion(nil, false, error)
      }
      return true
    }
    if look() { return }
    // Waiting sleeps between looks: a thread of its own, so Dispatch's shared pool is
    // never held by a blocked wait.
    Thread.detachNewThread {
      var wait = ComputeWait(max: options.maxPollInterval)
      while true {
        SystemCall.sleep(microseconds: UInt32(min(wait.next() / 1000, UInt64(UInt32.max))))
        if look() { return }
      }
    }
  }

  /// Whether some process (or thread) is computing `key` now through the get-or-compute API.
  public func isComputing(forKey key: String) throws -> Bool {
    try withKey(key) { k in
      try engine.checkKey(k)
      return SystemCall.byteIsLocked(engine.file.fd, at: ComputeClaim.offset(k))
    }
  }

  /// Forgets a cached failure for `key` (negative caching); false when there was none.
  @discardableResult
  public func removeCachedFailure(forKey key: String) throws -> Bool {
    try failureKey(key) { try engine.remove($0) }
  }

  // MARK: Internals

  enum ComputeStep {
    case cached(Value)
    case claimed
    case timedOut
    case wait
  }

  /// One look while missing: the value (fresh, or stale when allowed while another
  /// computes), a claim taken, the wait over, or keep waiting.
  func step(_ key: String, _ claim: ComputeClaim, _ options: ComputeOptions, _ deadline: UInt64) throws -> ComputeStep {
    if let v = try peek(key, allowingExpired: false) { return .cached(v) }
    try throwIfFailureCached(key)
    if try claim.tryAcquire() {
      // The previous claimer may have stored the value just before releasing.
      do {
        if let v = try peek(key, allowingExpired: false) {
          claim.release()
          return .cached(v)
        }
        try throwIfFailureCached(key)
      } catch {
        claim.release()
        throw error
      }
      return .claimed
    }
    if options.serveStale, let v = try peek(key, allowingExpired: true) { return .cached(v) }
    return SystemCall.monotonicNanoseconds() >= deadline ? .timedOut : .wait
  }

  /// A read that does not count towards hits and misses (waiting polls).
  private func peek(_ key: String, allowingExpired: Bool) throws -> Value? {
    try withKey(key) { k in
      try engine.withValue(forKey: k, allowExpired: allowingExpired, countStats: false) { bytes, _ in
        try decode(bytes, key: key)
      }
    }
  }

  private func computeAndStore(
    _ key: String, _ expires: CacheExpiry?, _ options: ComputeOptions,
    _ compute: () async throws -> Value
  ) async throws -> Value {
    let value: Value
    do { value = try await compute() } catch {
      rememberFailure(key, error, options)
      throw error
    }
    try setObject(value, forKey: key, expires: expires)
    return value
  }

  private func runBlock(
    _ key: String, _ box: ClaimBox?, _ options: ComputeOptions,
    _ cacheBlock:
      @escaping @Sendable (
        _ success: @escaping @Sendable (Value, CacheExpiry) -> Void,
        _ failure: @escaping @Sendable (Error?) -> Void
      ) -> Void,
    _ completion: @escaping @Sendable (Value?, Bool, Error?) -> Void
  ) {
    let once = SeenMutex(false)
    @Sendable func first() -> Bool {
      once.withLock { done in
        defer { done = true }
        return !done
      }
    }
    cacheBlock(
      { value, expiry in
        guard first() else { return }
        defer { box?.claim.release() }
        do {
          try self.setObject(value, forKey: key, expires: expiry)
          completion(value, false, nil)
        } catch {
          completion(nil, false, error)
        }
      },
      { error in
        guard first() else { return }
        defer { box?.claim.release() }
        let e = error ?? CacheError.computeFailed(key: key, reason: "the cache block reported failure")
        self.rememberFailure(key, e, options)
        completion(nil, false, e)
      })
  }

  // MARK: Negative caching

  /// The reserved key for `key`'s cached failure: 0xFF (never in UTF-8, so never a
  /// caller's key), a kind byte, then the key itself, or its two 64-bit hashes when
  /// the key is too long to prefix.
  private func failureKey<R>(_ key: String, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
    let k = Array(key.utf8)
    if k.isEmpty { throw CacheError.emptyKey }
    var reserved: [UInt8]
    if k.count + 2 <= engine.layout.maxKey {
      reserved = [0xFF, 0x01] + k
    } else {
      reserved = [0xFF, 0x02]
      let h1 = k.withUnsafeBytes { KeyHash.key($0) }
      let h2 = k.withUnsafeBytes { KeyHash.bytes(Array($0)) } ^ UInt64(k.count)
      withUnsafeBytes(of: h1.littleEndian) { reserved += $0 }
      withUnsafeBytes(of: h2.littleEndian) { reserved += $0 }
    }
    return try reserved.withUnsafeBytes(body)
  }

  func throwIfFailureCached(_ key: String) throws {
    if key.utf8.count > engine.layout.maxKey { try withKey(key) { try engine.checkKey($0) } }
    let reason = try failureKey(key) { k in
      engine.withValue(forKey: k, countStats: false) { bytes, _ in String(decoding: bytes, as: UTF8.self) }
    }
    if let reason { throw CacheError.computeFailed(key: key, reason: reason) }
  }

  private func rememberFailure(_ key: String, _ error: Error, _ options: ComputeOptions) {
    guard let ttl = options.cacheFailuresFor, ttl > 0, engine.writable else { return }
    let reason = Array(String(describing: error).utf8.prefix(1024))
    let ms = CacheExpiry.seconds(ttl).milliseconds(now: SystemCall.wallClockMilliseconds())
    _ = try? failureKey(key) { k in
      try reason.withUnsafeBytes { try engine.set(k, $0, expiry: ms) }
    }
  }
}

/// Holds a claim for closures that outlive the call (the cache-block API).
final class ClaimBox: @unchecked Sendable {
  let claim: ComputeClaim
  init(_ c: ComputeClaim) { claim = c }
}

/// Exponential backoff for waiters: 1 ms, doubling up to `max`.
struct ComputeWait {
  private var current: UInt64 = 1_000_000
  private let cap: UInt64

  init(max: TimeInterval) { cap = Swift.max(1_000_000, ComputeWait.nanoseconds(max)) }

  mutating func next() -> UInt64 {
    let d = current
    current = Swift.min(current * 2, cap)
    return d
  }

  static func nanoseconds(_ t: TimeInterval) -> UInt64 {
    guard t.isFinite, t > 0 else { return t > 0 ? UInt64.max / 2 : 0 }
    return UInt64(Swift.min(t, 1e9) * 1e9)
  }
}
