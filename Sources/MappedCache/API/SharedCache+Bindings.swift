/// What a binding for another language needs beyond the public API (libmappedcache's C
/// ABI, and through it the Python package): get-or-compute as separate steps, claim then
/// publish or abandon, for callers that cannot hand a Swift closure to
/// `object(forKey:expires:options:orCompute:)`. The claim is the very one that method
/// takes, so one caller computes a key across Swift and other languages alike. Not for
/// applications.
@_spi(Bindings)
public final class ComputeClaimLock: @unchecked Sendable {
  private let claim: ComputeClaim

  init(_ claim: ComputeClaim) { self.claim = claim }

  /// Takes the claim if no process (or thread) holds it, without waiting; true when this
  /// lock now holds it.
  public func tryAcquire() throws -> Bool { try claim.tryAcquire() }

  /// Whether this lock holds the claim.
  public var isHeld: Bool { claim.held }

  /// Gives the claim up: a waiter in any process may take it next.
  public func release() { claim.release() }

  // Dropping the lock without `release` closes its descriptor, which ends the claim only
  // when no other process shares that open file description: a child of fork() shares
  // its parent's, so a child drops a lock it inherited and never releases it.
}

@_spi(Bindings)
extension SharedCache where Value: Codable & SendableMetatype {
  /// A lock on `key`'s claim, not yet held. Opens the file once more (the claim is a lock
  /// of its own open file description, dropped by the kernel when its holder dies).
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a
  ///   bad key; ``CacheError/fileReplaced(path:)`` when the path names another file now.
  public func computeClaimLock(forKey key: String) throws -> ComputeClaimLock {
    try withKey(key) { k in
      try engine.checkKey(k)
      return ComputeClaimLock(try ComputeClaim(engine: engine, key: k))
    }
  }

  /// Throws ``CacheError/computeFailed(key:reason:)`` while a failure of `key`'s compute
  /// is cached (`ComputeOptions.cacheFailuresFor`), as get-or-compute does.
  public func throwIfComputeFailureCached(forKey key: String) throws { try throwIfFailureCached(key) }
}

/// `copyBytes(forKey:into:)` without its type: the same read, the same for every value
/// type, for a binding that checks keys itself (the C ABI's `mc_get`, whose caches are of
/// four value types and whose every call checks its key's length first). One read is
/// then one call of the engine, with no dispatch over the value type before it.
@_spi(Bindings)
public struct CacheByteReader: @unchecked Sendable {
  @usableFromInline let engine: CacheEngine

  init(_ engine: CacheEngine) { self.engine = engine }

  /// The value of `key` copied into `buffer`, as `copyBytes(forKey:into:)` copies it:
  /// its length (the bytes copied only when it fits), or -1 when it is missing.
  /// Precondition: `key` has 1 to `SharedCache.maxKeySize` bytes.
  @inlinable @inline(__always)
  public func copyBytes(forCheckedKey key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    engine.copyValue(key, into: buffer)
  }
}

@_spi(Bindings)
extension SharedCache {
  /// The read of `copyBytes(forKey:into:)`, without the type (`CacheByteReader`).
  public var byteReader: CacheByteReader { CacheByteReader(engine) }
}
