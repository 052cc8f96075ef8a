@_spi(Tiers) import MappedCache
import SystemCalls

/// One process's attempt at a fleet-wide compute: the lease key it asks for, its own
/// owner token (unique to the attempt), and the lease's life.
struct LeaseAttempt {
  let client: RedisClient
  let lease: [UInt8]
  let owner = FleetLease.ownerToken()
  let milliseconds: Int64

  func acquire() throws -> Bool { try FleetLease.acquire(client, lease, owner, milliseconds: milliseconds) }
  func release() { FleetLease.release(client, lease: lease, owner: owner) }
}

/// The near cache's side of `FleetLease` (`ComputeOptions.fleetWide`): win the lease and
/// compute, or wait for the winner's value.
extension NearCache {
  /// Computes `key` once in the fleet under a lease (see `FleetLease`), or waits for the
  /// value of the process that does. `claim` is this host's placeholder, if any. Nil when
  /// the key can have no lease (it is then computed once per host).
  func fleetCompute(
    _ key: String, _ claim: Claim?, expires: CacheExpiry?, _ opts: ComputeOptions,
    _ compute: () async throws -> Value
  ) async throws -> (value: Value, fromCache: Bool)? {
    let dataKey = try remote.redisKey(key)
    guard let lease = FleetLease.leaseKey(for: dataKey) else { return nil }
    let attempt = LeaseAttempt(
      client: remote.client, lease: lease, milliseconds: Int64(max(1, (opts.leaseDuration * 1000).rounded(.up))))
    let deadline = Clock.nanoseconds() &+ UInt64(max(0, opts.waitTimeout) * 1e9)
    let maxPause = UInt64(max(0.001, opts.maxPollInterval) * 1e9)
    var pause: UInt64 = 1_000_000
    var sawOwner = false
    while true {
      if try attempt.acquire() {
        NearLayout.add(local, sawOwner ? NearLayout.Cluster.leaseTakeovers : NearLayout.Cluster.leaseWins, 1)
        return try await computeUnderLease(key, dataKey, attempt, claim, expires: expires, opts, compute)
      }
      // Asked once, on the first sight of another owner: a stale copy is only written
      // beside a value, which the polls below then find.
      if opts.serveStale && !sawOwner, let v = try staleCopy(key, dataKey, claim) { return (v, true) }
      if !sawOwner { NearLayout.add(local, NearLayout.Cluster.leaseWaits, 1) }
      sawOwner = true
      try await waitForOwner(key, claim, nanoseconds: pause)
      pause = min(pause * 2, maxPause)
      if let fetched = try remote.fetchBytesAndExpiry(forKey: key) { return (try stored(key, claim, fetched), true) }
      if Clock.nanoseconds() >= deadline {
        if let claim { release(key, claim) }
        return (try await compute(), false)
      }
    }
  }

  /// This process holds the lease: it reads the key once more (a value stored between
  /// its miss and its lease is returned instead), then computes with the lease renewed,
  /// and stores the value only if the lease is still its own.
  private func computeUnderLease(
    _ key: String, _ dataKey: [UInt8], _ attempt: LeaseAttempt, _ claim: Claim?, expires: CacheExpiry?,
    _ opts: ComputeOptions, _ compute: () async throws -> Value
  ) async throws -> (value: Value, fromCache: Bool) {
    if let fetched = try remote.fetchBytesAndExpiry(forKey: key) {
      attempt.release()
      return (try stored(key, claim, fetched), true)
    }
    // Renewed every third of its life while the computation runs: only an owner that
    // died or stalled for a whole lease loses it.
    let renewer = LeaseRenewer(
      attempt.client, lease: attempt.lease, owner: attempt.owner, milliseconds: attempt.milliseconds)
    let v: Value
    do {
      v = try await compute()
      renewer.cancel()
    } catch {
      renewer.cancel()
      attempt.release()
      if let claim { release(key, claim) }
      throw error
    }
    let bytes = try codec.encode(v)
    // PX of the expiry (0 in the script: none); one already past stores nothing.
    let px = RedisCache<Value>.milliseconds(expires ?? remote.defaultExpiry)
    guard px.map({ $0 > 0 }) ?? true else {
      attempt.release()
      if let claim { release(key, claim) }
      return (v, false)
    }
    // The stale copy outlives the value by `staleFor` (and a value with no expiry by as
    // much after its removal).
    let stalePX = opts.serveStale ? (px ?? 0) + Int64(max(0.001, opts.staleFor) * 1000) : 0
    // A store that fails (Redis gone meanwhile) still returns the value computed.
    let stored = try? FleetLease.store(
      attempt.client, key: dataKey, lease: attempt.lease, owner: attempt.owner, bytes: bytes, px: px ?? 0,
      stalePX: stalePX)
    if stored == false { return try lostLease(key, claim, computed: v) }
    if stored == true, let claim {
      // Waiters of this host take it from the placeholder (the SET's invalidation
      // removes it soon after, as for a per-host compute).
      leaveOnPlaceholder(bytes, key, claim, expires: expires)
    } else if let claim {
      release(key, claim)
    }
    return (v, false)
  }

  /// Another computer took the lease over and stored: every caller gets that one value
  /// (ours, when it cannot be read).
  private func lostLease(_ key: String, _ claim: Claim?, computed v: Value) throws -> (value: Value, fromCache: Bool) {
    NearLayout.add(local, NearLayout.Cluster.leaseLost, 1)
    if let claim { release(key, claim) }
    if let fetched = try? remote.fetchBytesAndExpiry(forKey: key) { return (try stored(key, nil, fetched), true) }
    return (v, false)
  }

  /// The key's stale copy (`ComputeOptions.serveStale`), which another owner's compute
  /// left beside its value: the last value computed under a lease, served at once.
  private func staleCopy(_ key: String, _ dataKey: [UInt8], _ claim: Claim?) throws -> Value? {
    guard let staleKey = FleetLease.staleKey(for: dataKey),
      let bytes = try remote.client.call([Array("GET".utf8), staleKey]).bytes
    else { return nil }
    NearLayout.add(local, NearLayout.Cluster.leaseStaleServes, 1)
    if let claim { release(key, claim) }
    return try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) }
  }

  /// Waits up to `nanoseconds` for the owner's value: woken early when the invalidation
  /// of its SET removes our placeholder.
  private func waitForOwner(_ key: String, _ claim: Claim?, nanoseconds: UInt64) async throws {
    let wake = Clock.nanoseconds() &+ nanoseconds
    while Clock.nanoseconds() < wake {
      if let claim, !placeholderStands(key, claim) { break }
      try await Task.sleep(nanoseconds: 1_000_000)
    }
  }

  /// Whether our placeholder is still the entry of `key`.
  private func placeholderStands(_ key: String, _ claim: Claim) -> Bool {
    guard let (_, version) = try? local.objectWithVersion(forKey: key) else { return false }
    return version == claim.version
  }

  /// A value found in Redis: stored on our placeholder (if it stands) and decoded.
  private func stored(_ key: String, _ claim: Claim?, _ fetched: ([UInt8], CacheExpiry)) throws -> Value {
    if let claim, let v = try complete(key, claim, fetched) { return v }
    return try fetched.0.withUnsafeBytes { try codec.decode($0, forKey: key) }
  }
}
