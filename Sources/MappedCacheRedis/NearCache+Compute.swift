@_spi(Tiers) import MappedCache
import SystemCalls

/// Get-or-compute: a miss that Redis cannot fill either is computed once per host (the
/// fill's placeholder makes the other processes wait for its owner), or once in the fleet
/// (`ComputeOptions.fleetWide`, `NearCache+FleetLease.swift`).
extension NearCache {
  /// The value for `key`; when neither the file nor Redis has it, computes it (once per
  /// host: other processes wait for the placeholder's owner; with
  /// `computeOptions.fleetWide`, once in the fleet under a lease in Redis, see
  /// `FleetLease`), stores it in Redis with `expires` and returns it. `fromCache` is false
  /// only when computed here. When Redis is unreachable, the value is computed and
  /// returned without being stored.
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
      case .found(nil): return try await computeCachedMiss(key, expires: expires, computeOptions, compute)
      case .again: continue
      case .wait:
        try await Task.sleep(nanoseconds: pause)
        pause = min(pause * 2, UInt64(max(0.001, computeOptions.maxPollInterval) * 1e9))
      case .owned(let claim): return try await computeOwned(key, claim, expires: expires, computeOptions, compute)
      }
    }
    return (try await compute(), false)
  }

  /// The file's fresh entry for `key`, if any (no remote call).
  public func object(forKeyLocally key: String) throws -> Value? {
    var result: Value? = nil
    return try local.withBytes(forKey: key) { try judge($0, key, &result) } == 1 ? result : nil
  }

  /// The file remembers that Redis had no value (`cacheMisses`): Redis is asked once
  /// more, and the value computed when it still has none (no placeholder of ours stands).
  private func computeCachedMiss(
    _ key: String, expires: CacheExpiry?, _ computeOptions: ComputeOptions, _ compute: () async throws -> Value
  ) async throws -> (value: Value, fromCache: Bool) {
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
  }

  /// Our placeholder stands: Redis is asked first, then the value computed (under a
  /// fleet lease when asked), stored in Redis and left on the placeholder for this host's
  /// waiters. Every way out that stores nothing removes the placeholder.
  private func computeOwned(
    _ key: String, _ claim: Claim, expires: CacheExpiry?, _ computeOptions: ComputeOptions,
    _ compute: () async throws -> Value
  ) async throws -> (value: Value, fromCache: Bool) {
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
    try leaveOnPlaceholder(codec.encode(v), key, claim, expires: expires)
    return (v, false)
  }

  /// Stores a computed value's bytes in place of our placeholder, if it still stands
  /// (else removes what is left of it): this host's waiters take the value from there.
  func leaveOnPlaceholder(_ bytes: [UInt8], _ key: String, _ claim: Claim, expires: CacheExpiry?) {
    let frame = bytes.withUnsafeBytes {
      NearLayout.frame(tag: NearLayout.tagValue, epoch: claim.epoch, word: claim.word, payload: $0)
    }
    if (try? local.setObject(frame, forKey: key, ifVersion: claim.version, expires: expires)) != true {
      release(key, claim)
    }
  }
}
