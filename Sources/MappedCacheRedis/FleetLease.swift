import MappedCache
import SystemCalls

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
    let host = SystemCall.hostName() ?? "?"
    return Array("\(host):\(SystemCall.processID()):\(String(UInt64.random(in: 1...UInt64.max), radix: 16))".utf8)
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
