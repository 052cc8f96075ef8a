import Foundation
import Glibc
@_spi(Tiers) import MappedCache

/// Single flight across the fleet (`ComputeOptions.fleetWide`): a lease in Redis says
/// which one process computes a missing key; the others wait for its value.
///
///  1. `SET lease:<key> <owner> NX PX <leaseDuration>`; owner = host, pid and a random
///     token, so no two attempts share one. OK: this process computes (a *win*, or a
///     *takeover* when it had seen another owner's lease before: that one died or ran
///     out of time). It reads the key once more first (a value stored between its miss
///     and its lease is returned instead).
///  2. While it computes, the lease is renewed every third of its life (a script that
///     extends it only if it still names this owner), so only an owner that dies or
///     stalls for a whole `leaseDuration` loses it. The value is stored by a Lua script
///     that compares the lease's owner and, only if it is still ours, sets the key and
///     deletes the lease, atomically: a computer whose lease expired (and was perhaps
///     taken over) does not overwrite the value of the one that took it over, or any
///     later write (a *lost* lease); it returns the stored value instead of its own.
///  3. Everyone else waits: on its host it holds the fill's placeholder, which the
///     holder removes when the key's invalidation arrives (the computer's SET), and that
///     wakes it at once; otherwise it polls (GET, then SET NX again) with backoff up to
///     `maxPollInterval`. When the owner dies its lease expires and the next SET NX
///     takes over. Past `waitTimeout` the waiter computes for itself without storing.
///     With `serveStale` a waiter first asks for the key's stale copy, which every store
///     under a lease with `serveStale` writes beside the value (`stale:` + key, in its
///     slot, living `staleFor` longer than the value): when there is one it is returned
///     at once (*served stale*), as memcache hands a stale value to a client that did not
///     get the lease. Only computes write it: a value stored by a plain write and expired
///     since is not what a stale copy holds.
///
/// Against Facebook's memcache leases (a token handed out with each miss, a set refused
/// without the current token): the same safety for the store (a lost lease cannot
/// store), but the token is the caller's own and the check runs in Redis, so no server
/// change is needed; like them it bounds a thundering herd to one computation per key
/// per lease period.
///
/// In a cluster the lease key hashes to the data key's slot, so that the script can
/// touch both: `lease:` + key when the key has a hash tag, else `lease:{key}`. A key for
/// which neither works (a `}` in a key without a tag) has no fleet lease: it is computed
/// once per host, as without `fleetWide`.
enum FleetLease {
  /// KEYS: value, lease, stale copy; ARGV: owner, bytes, value PX (0: none), stale copy PX
  /// (0: no stale copy written).
  static let storeScript = """
    if redis.call('GET', KEYS[2]) == ARGV[1] then
      if ARGV[3] == '0' then redis.call('SET', KEYS[1], ARGV[2])
      else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
      if ARGV[4] ~= '0' then redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[4]) end
      redis.call('DEL', KEYS[2])
      return 1
    end
    return 0
    """
  static let renewScript = """
    if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
    return 0
    """
  static let releaseScript = """
    if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
    return 0
    """

  /// The lease key of a Redis key (in its slot); nil when there is none (see above).
  static func leaseKey(for dataKey: [UInt8]) -> [UInt8]? { sibling("lease:", of: dataKey) }

  /// The key of a Redis key's stale copy (`ComputeOptions.serveStale`), in its slot.
  static func staleKey(for dataKey: [UInt8]) -> [UInt8]? { sibling("stale:", of: dataKey) }

  /// `prefix` + key when that hashes to the key's slot, else `prefix{key}`, else nil.
  private static func sibling(_ prefix: String, of dataKey: [UInt8]) -> [UInt8]? {
    let slot = ClusterSlots.slot(dataKey)
    let p = Array(prefix.utf8)
    for candidate in [p + dataKey, p + [UInt8(ascii: "{")] + dataKey + [UInt8(ascii: "}")]]
    where ClusterSlots.slot(candidate) == slot {
      return candidate
    }
    return nil
  }

  /// host:pid:random, unique to one attempt.
  static func ownerToken() -> [UInt8] {
    var name = [UInt8](repeating: 0, count: 256)
    // 255 of 256 bytes: the last stays 0 even where a long name is cut without one.
    let ok = name.withUnsafeMutableBufferPointer { b in
      b.baseAddress!.withMemoryRebound(to: CChar.self, capacity: b.count) { gethostname($0, 255) == 0 }
    }
    let host = ok ? String(decoding: name.prefix { $0 != 0 }, as: UTF8.self) : "?"
    return Array("\(host):\(getpid()):\(String(UInt64.random(in: 1...UInt64.max), radix: 16))".utf8)
  }

  /// `SET lease NX PX ms`: whether this owner now holds the lease.
  static func acquire(_ client: RedisClient, _ lease: [UInt8], _ owner: [UInt8], milliseconds: Int64) throws -> Bool {
    let r = try client.call(
      [Array("SET".utf8), lease, owner, Array("NX".utf8), Array("PX".utf8), Array(String(milliseconds).utf8)],
      idempotent: false)
    return r.errorMessage == nil && r.string == "OK"
  }

  /// Stores `bytes` under `key` (with `px` ms to live, 0: none) if `owner` still holds the
  /// lease, deleting the lease; false when the lease was lost.
  /// With `stalePX` > 0 it also stores the stale copy, living that long.
  static func store(
    _ client: RedisClient, key: [UInt8], lease: [UInt8], owner: [UInt8], bytes: [UInt8], px: Int64,
    stalePX: Int64 = 0
  ) throws -> Bool {
    // Without a key of its slot for the copy, the lease stands in and nothing is copied.
    let stale = staleKey(for: key)
    let r = try client.call(
      [Array("EVAL".utf8), Array(storeScript.utf8), Array("3".utf8), key, lease, stale ?? lease, owner, bytes]
        + [px, stale == nil ? 0 : stalePX].map { Array(String($0).utf8) },
      idempotent: false)
    return r == .integer(1)
  }

  /// Extends the lease by `milliseconds` if `owner` still holds it.
  static func renew(_ client: RedisClient, lease: [UInt8], owner: [UInt8], milliseconds: Int64) {
    _ = try? client.call(
      [Array("EVAL".utf8), Array(renewScript.utf8), Array("1".utf8), lease, owner, Array(String(milliseconds).utf8)],
      idempotent: true)
  }

  /// Gives the lease up if `owner` still holds it (a computation that failed).
  static func release(_ client: RedisClient, lease: [UInt8], owner: [UInt8]) {
    _ = try? client.call(
      [Array("EVAL".utf8), Array(releaseScript.utf8), Array("1".utf8), lease, owner], idempotent: false)
  }
}

extension NearCache {
  /// Computes `key` once in the fleet under a lease (see `FleetLease`), or waits for the
  /// value of the process that does. `claim` is this host's placeholder, if any.
  func fleetCompute(
    _ key: String, _ claim: Claim?, expires: CacheExpiry?, _ opts: ComputeOptions,
    _ compute: () async throws -> Value
  ) async throws -> (value: Value, fromCache: Bool)? {
    let dataKey = try remote.redisKey(key)
    guard let lease = FleetLease.leaseKey(for: dataKey) else { return nil }
    let client = remote.client
    let owner = FleetLease.ownerToken()
    let leaseMs = Int64(max(1, (opts.leaseDuration * 1000).rounded(.up)))
    let deadline = Clock.nanoseconds() &+ UInt64(max(0, opts.waitTimeout) * 1e9)
    let maxPause = UInt64(max(0.001, opts.maxPollInterval) * 1e9)
    var pause: UInt64 = 1_000_000
    var sawOwner = false
    while true {
      if try FleetLease.acquire(client, lease, owner, milliseconds: leaseMs) {
        NearLayout.add(local, sawOwner ? NearLayout.Cluster.leaseTakeovers : NearLayout.Cluster.leaseWins, 1)
        if let fetched = try remote.fetchBytesAndExpiry(forKey: key) {
          FleetLease.release(client, lease: lease, owner: owner)
          return (try stored(key, claim, fetched), true)
        }
        // Renewed every third of its life while the computation runs: only an owner that
        // died or stalled for a whole lease loses it.
        let renewer = LeaseRenewer(client, lease: lease, owner: owner, milliseconds: leaseMs)
        let v: Value
        do {
          v = try await compute()
          renewer.cancel()
        } catch {
          renewer.cancel()
          FleetLease.release(client, lease: lease, owner: owner)
          if let claim { release(key, claim) }
          throw error
        }
        let bytes = try codec.encode(v)
        // PX of the expiry (0 in the script: none); one already past stores nothing.
        let px = RedisCache<Value>.milliseconds(expires ?? remote.defaultExpiry)
        var ok = false
        if px.map({ $0 > 0 }) ?? true {
          // A store that fails (Redis gone meanwhile) still returns the value computed.
          // The stale copy outlives the value by `staleFor` (and a value with no expiry
          // by as much after its removal).
          let stalePX = opts.serveStale ? (px ?? 0) + Int64(max(0.001, opts.staleFor) * 1000) : 0
          if let done = try? FleetLease.store(
            client, key: dataKey, lease: lease, owner: owner, bytes: bytes, px: px ?? 0, stalePX: stalePX)
          {
            ok = done
            if !done {
              // Another computer took over and stored: every caller gets that one value.
              NearLayout.add(local, NearLayout.Cluster.leaseLost, 1)
              if let claim { release(key, claim) }
              if let fetched = try? remote.fetchBytesAndExpiry(forKey: key) {
                return (try stored(key, nil, fetched), true)
              }
              return (v, false)
            }
          }
        } else {
          FleetLease.release(client, lease: lease, owner: owner)
        }
        if ok, let claim {
          // Waiters of this host take it from the placeholder (the SET's invalidation
          // removes it soon after, as for a per-host compute).
          let frame = bytes.withUnsafeBytes {
            NearLayout.frame(tag: NearLayout.tagValue, epoch: claim.epoch, word: claim.word, payload: $0)
          }
          if (try? local.setObject(frame, forKey: key, ifVersion: claim.version, expires: expires)) != true {
            release(key, claim)
          }
        } else if let claim {
          release(key, claim)
        }
        return (v, false)
      }
      // Asked once, on the first sight of another owner: a stale copy is only written
      // beside a value, which the polls below then find.
      if opts.serveStale && !sawOwner, let staleKey = FleetLease.staleKey(for: dataKey),
        let bytes = try client.call([Array("GET".utf8), staleKey]).bytes
      {
        // Another owner recomputes: the last value computed under a lease, at once.
        NearLayout.add(local, NearLayout.Cluster.leaseStaleServes, 1)
        if let claim { release(key, claim) }
        return (try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) }, true)
      }
      if !sawOwner { NearLayout.add(local, NearLayout.Cluster.leaseWaits, 1) }
      sawOwner = true
      // Wait for the owner's value: woken when the invalidation of its SET removes our
      // placeholder, else after the pause.
      let wake = Clock.nanoseconds() &+ pause
      while Clock.nanoseconds() < wake {
        if let claim, !placeholderStands(key, claim) { break }
        try await Task.sleep(nanoseconds: 1_000_000)
      }
      pause = min(pause * 2, maxPause)
      if let fetched = try remote.fetchBytesAndExpiry(forKey: key) { return (try stored(key, claim, fetched), true) }
      if Clock.nanoseconds() >= deadline {
        if let claim { release(key, claim) }
        return (try await compute(), false)
      }
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

/// Renews a lease every third of its life on a thread of its own (not a task: a
/// cooperative pool kept busy by blocking work would starve it) until cancelled.
final class LeaseRenewer: Sendable {
  private let stopped = StopFlag()

  init(_ client: RedisClient, lease: [UInt8], owner: [UInt8], milliseconds: Int64) {
    let period = UInt64(max(1, milliseconds)) * 1_000_000 / 3
    Thread.detachNewThread { [stopped] in
      var next = Clock.nanoseconds() &+ period
      while !stopped.value.load(ordering: .acquiring) {
        let now = Clock.nanoseconds()
        if now < next {
          Clock.sleep(nanoseconds: min(5_000_000, next - now))
          continue
        }
        FleetLease.renew(client, lease: lease, owner: owner, milliseconds: milliseconds)
        next = Clock.nanoseconds() &+ period
      }
    }
  }

  func cancel() { stopped.value.store(true, ordering: .releasing) }
}
