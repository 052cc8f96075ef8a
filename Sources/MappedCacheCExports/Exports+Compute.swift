import CMappedCacheABI
@_spi(Bindings) import MappedCache
import SystemCalls

// mappedcache.h: get-or-compute (mc_claim, mc_publish, mc_abandon, mc_is_computing).

/// One `mc_claim` handle: the key a caller computes, and the lock that makes it the only
/// one (nil when it is not: the wait ran out, or the handle is read-only).
final class PendingClaim: @unchecked Sendable {
  let cache: OpenCache
  let key: [UInt8]
  /// The fork generation the claim was taken in: a child of fork shares the lock's open
  /// file description with its parent and must never release it.
  let generation = mc_abi_fork_generation()
  private var lock: ComputeClaimLock?

  init(cache: OpenCache, key: [UInt8], lock: ComputeClaimLock?) {
    self.cache = cache
    self.key = key
    self.lock = lock
  }

  var isInherited: Bool { generation != mc_abi_fork_generation() }

  /// Ends the claim: released in the process that took it, only dropped (its
  /// descriptor closed) in a child of fork.
  func finish() {
    if !isInherited { lock?.release() }
    lock = nil
  }

  /// In a child of fork (tables lock held): closes the inherited descriptor.
  func dropInherited() {
    if isInherited { lock = nil }
  }
}

@_cdecl("mc_get_or_claim")
public func mcGetOrClaim(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ waitSeconds: Double, _ flags: UInt32,
  _ buffer: UnsafeMutableRawPointer?, _ capacity: Int, _ length: UnsafeMutablePointer<Int>?,
  _ claim: UnsafeMutablePointer<OpaquePointer?>?
) -> Int32 {
  claim?.pointee = nil
  guard let opened = Handles.openCache(cache)?.takeUnretainedValue() else {
    return failure(Handles.badHandle(cache, "cache"))
  }
  return guarded {
    let store = try opened.current()
    let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
    let request = ClaimRequest(
      cache: opened, store: store, key: k, buffer: try Arguments.buffer(buffer, capacity),
      length: try Arguments.output(length, "the length pointer"),
      claim: try Arguments.output(claim, "the claim pointer"), name: String(decoding: k, as: UTF8.self))
    guard waitSeconds >= 0 else {
      throw ABIError.invalidArgument("a wait of \(waitSeconds) seconds; give 0 or more")
    }
    guard flags & ~MC_CLAIM_SERVE_STALE == 0 else {
      throw ABIError.invalidArgument("unknown claim flags 0x\(String(flags & ~MC_CLAIM_SERVE_STALE, radix: 16))")
    }
    return try request.run(waitSeconds: waitSeconds, serveStale: flags & MC_CLAIM_SERVE_STALE != 0)
  }
}

/// One `mc_get_or_claim` call, its arguments checked: the value if there is one, else the
/// claim, else (while another process holds the claim) a wait for its value.
private struct ClaimRequest {
  let cache: OpenCache
  let store: ByteStore
  let key: UnsafeRawBufferPointer
  let buffer: UnsafeMutableRawBufferPointer
  let length: UnsafeMutablePointer<Int>
  let claim: UnsafeMutablePointer<OpaquePointer?>
  /// The key as the typed layer names it, made once: the wait asks by it on every turn.
  let name: String

  func run(waitSeconds: Double, serveStale: Bool) throws -> Int32 {
    if let n = try store.get(key, into: buffer) { return copied(n) }
    try store.throwIfComputeFailureCached(name)
    // A read-only handle computes without claiming, as Swift's get-or-compute does.
    guard store.isWritable else { return try issue(nil) }
    let lock = try store.claimLock(name)
    let deadline = ContinuousClock.now + .nanoseconds(Int64(min(waitSeconds, 1e9) * 1e9))
    var pause = Duration.milliseconds(1)
    while true {
      if try lock.tryAcquire() { return try claimed(lock) }
      if serveStale, let status = try stale() { return status }
      let now = ContinuousClock.now
      if now >= deadline {
        // Waited long enough: compute here as well (0 asked not to wait at all).
        return waitSeconds == 0 ? MC_BUSY : try issue(nil)
      }
      let nap = min(pause, deadline - now)
      Clock.sleep(nanoseconds: UInt64(max(1000, nap.components.attoseconds / 1_000_000_000)))
      pause = min(pause * 2, .milliseconds(20))
      if let status = try cached() { return status }
    }
  }

  /// The value's copy status if it is stored; throws the cached failure of a compute.
  private func cached() throws -> Int32? {
    if try store.contains(name), let n = try store.get(key, into: buffer) { return copied(n) }
    try store.throwIfComputeFailureCached(name)
    return nil
  }

  /// The claim is ours: unless the previous claimer stored the value just before
  /// releasing, a claim handle for the caller.
  private func claimed(_ lock: ComputeClaimLock) throws -> Int32 {
    do {
      if let status = try cached() {
        lock.release()
        return status
      }
    } catch {
      lock.release()
      throw error
    }
    return try issue(lock)
  }

  /// An expired value still in the file, for a caller that asked for one while waiting.
  private func stale() throws -> Int32? {
    var status: Int32?
    _ = try store.withValueAllowingExpired(name) { bytes in
      if bytes.count <= buffer.count, bytes.count > 0 {
        buffer.baseAddress!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
      }
      length.pointee = bytes.count
      status = bytes.count <= buffer.count ? MC_STALE : copiedStatus(bytes.count, buffer.count)
    }
    return status
  }

  private func issue(_ lock: ComputeClaimLock?) throws -> Int32 {
    guard let handle = Handles.claims.insert(PendingClaim(cache: cache, key: Array(key), lock: lock)) else {
      lock?.release()
      throw ABIError.noMemory("all 16384 claim handles of this process are pending; publish or abandon some")
    }
    claim.pointee = handle
    return MC_CLAIMED
  }

  private func copied(_ n: Int) -> Int32 {
    length.pointee = n
    return copiedStatus(n, buffer.count)
  }
}

@_cdecl("mc_publish")
public func mcPublish(_ claim: OpaquePointer?, _ value: UnsafeRawPointer?, _ valueLength: Int, _ ttl: Double)
  -> Int32
{
  guard let pending = Handles.claims.remove(claim)?.takeRetainedValue() else {
    return failure(Handles.badHandle(claim, "claim"))
  }
  return guarded {
    defer { pending.finish() }
    guard !pending.isInherited else { throw ABIError.forked(forkedMessage) }
    let store = try pending.cache.current()
    let v = try Arguments.value(value, valueLength, maxValue: store.maxValue)
    let expires = try Arguments.expiry(ttl)
    // A read-only handle stores nothing, as Swift's get-or-compute does.
    guard store.isWritable else { return MC_OK }
    try pending.key.withUnsafeBytes { try store.set($0, v, expires: expires) }
    return MC_OK
  }
}

@_cdecl("mc_abandon")
public func mcAbandon(_ claim: OpaquePointer?) -> Int32 {
  guard let pending = Handles.claims.remove(claim)?.takeRetainedValue() else {
    return failure(Handles.badHandle(claim, "claim"))
  }
  defer { pending.finish() }
  return pending.isInherited ? failure(ABIError.forked(forkedMessage)) : MC_OK
}

private let forkedMessage =
  "this claim was taken by the parent process before fork(); the parent still holds it and the child cannot publish or abandon it: claim the key again in the child"

@_cdecl("mc_is_computing")
public func mcIsComputing(_ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int) -> Int32 {
  Handles.answer(cache, key, keyLength) { try $0.isComputing($1) }
}
