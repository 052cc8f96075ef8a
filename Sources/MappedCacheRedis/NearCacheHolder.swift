import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import Synchronization
import SystemCalls

/// The invalidation holder of one cache file: one process per host holds the tracking
/// connection and applies Redis's invalidations to the shared file.
///
/// Election: every process that opens the near cache runs one candidate thread, which
/// tries `flock(LOCK_EX | LOCK_NB)` on `PATH.holder` every `electionInterval`. The kernel
/// holds that lock for the open file description of the one process that got it, and
/// drops it when that process dies, SIGKILL included; the next poll of another candidate
/// takes it. (flock locks belong to the open file description, so two near caches of one
/// process exclude each other as two processes do.)
///
/// A holder's session, repeated until it resigns:
///  1. connect (HELLO 3: invalidations arrive as pushes on the same connection), then
///     `CLIENT TRACKING ON BCAST PREFIX <prefix>`;
///  2. bump the epoch: entries filled before this session (or during an outage, whose
///     invalidations may be lost) become misses, lazily, without a wipe;
///  3. every `heartbeatInterval`: send PING at t0; apply every push read before the PONG;
///     then store t0 as the fence. Between PINGs, pushes are applied as they arrive.
///  4. on any error: close, back off (jittered, capped), go to 1. The fence stops
///     advancing meanwhile, so readers stop trusting the file after `maxStaleness`.
///
/// BCAST PREFIX rather than default tracking: default mode remembers every key each
/// connection read, so every process's reads would have to go through the holder's one
/// connection (or each process keep its own tracking connection: one per worker, what
/// the issue rules out), and the server's tracking table grows with the keys read.
/// BCAST needs no registration per key: one connection per host, nothing per read; the
/// cost is an invalidation for every write under the prefix, read or not, which the
/// holder applies in batches (a removal of an absent key costs a hash probe).
final class NearCacheHolder: @unchecked Sendable {
  let local: SharedCache<[UInt8]>
  let endpoint: RedisEndpoint
  let redisOptions: RedisOptions
  let prefix: [UInt8]
  let options: NearCacheOptions
  /// A cluster client (`redis-cluster://`): then the holder tracks every primary
  /// (`NearCacheClusterHolder.swift`).
  let cluster: RedisClient?
  private let lockPath: String
  let stopped = Atomic<Bool>(false)
  private let holding = Atomic<Bool>(false)
  private let done = DispatchSemaphore(value: 0)
  private var thread: Thread?

  init(
    local: SharedCache<[UInt8]>, endpoint: RedisEndpoint, redisOptions: RedisOptions, prefix: String,
    options: NearCacheOptions, cluster: RedisClient? = nil
  ) {
    self.cluster = cluster
    self.local = local
    self.endpoint = endpoint
    self.redisOptions = redisOptions
    self.prefix = Array(prefix.utf8)
    self.options = options
    self.lockPath = local.path + ".holder"
  }

  /// Whether this process holds the role now.
  var isHolding: Bool { holding.load(ordering: .acquiring) }

  func start() {
    let t = Thread { [self] in run() }
    t.name = "mc-near-holder"
    thread = t
    t.start()
  }

  /// Stops the candidate thread (resigning the role, if held) and waits for it.
  func stop() {
    guard thread != nil, !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
    done.wait()
  }

  private func run() {
    defer { done.signal() }
    guard let fd = try? SystemCall.open(lockPath, flags: O_RDWR | O_CREAT, mode: 0o600) else { return }
    defer { SystemCall.close(fd) }
    let pollNs = UInt64(max(0.001, options.electionInterval) * 1e9)
    while !stopped.load(ordering: .acquiring) {
      if (try? SystemCall.tryFlock(fd, LOCK_EX)) == true {
        hold()
        try? SystemCall.flock(fd, LOCK_UN)
      } else {
        Clock.sleep(nanoseconds: pollNs)
      }
    }
  }

  /// Holds the role until stopped: sessions with backoff between them.
  private func hold() {
    let pid = UInt64(SystemCall.processID())
    try? local.storeTierWord(NearLayout.holder, pid)
    NearLayout.add(local, NearLayout.holders, 1)
    holding.store(true, ordering: .releasing)
    defer {
      holding.store(false, ordering: .releasing)
      _ = try? local.compareExchangeTierWord(NearLayout.holder, expected: pid, desired: 0)
    }
    var failures = 0
    var rng = SystemRandomNumberGenerator()
    while !stopped.load(ordering: .acquiring) {
      do {
        if let cluster {
          try clusterSession(cluster)
        } else {
          try session()
        }
        failures = 0
      } catch {
        failures += 1
      }
      guard !stopped.load(ordering: .acquiring) else { break }
      // Capped full-jitter backoff; the first retry is quick, a failover is short.
      let cap = min(options.reconnectBackoffCap, 0.002 * Double(1 << min(failures, 16)))
      let pause = Double.random(in: 0...max(cap, 0.001), using: &rng)
      var slept = 0.0
      while slept < pause && !stopped.load(ordering: .acquiring) {
        Clock.sleep(nanoseconds: 5_000_000)
        slept += 0.005
      }
    }
  }

  /// One tracking session; returns when stopped, throws when the connection fails.
  private func session() throws {
    try track(
      endpoint,
      started: {
        self.bumpEpoch()
        NearLayout.add(self.local, NearLayout.sessions, 1)
      },
      confirmed: { NearLayout.storeFence(self.local, $0) },
      flushed: {
        self.bumpEpoch()
        NearLayout.add(self.local, NearLayout.flushes, 1)
      },
      until: { self.stopped.load(ordering: .acquiring) })
  }

  /// A tracking session on one server: `started` once tracking is on (before any fence),
  /// `confirmed(ms)` after each heartbeat whose reply was read (every push before it
  /// applied), `flushed` for a null invalidation. Returns when `until()` is true, throws
  /// when the connection fails.
  func track(
    _ endpoint: RedisEndpoint, started: () -> Void, confirmed: (UInt64) -> Void, flushed: () -> Void,
    until: () -> Bool
  ) throws {
    var pushes: [RESPValue] = []
    var ro = redisOptions
    ro.useRESP3 = true
    ro.clientName = ro.clientName ?? "mc-near-holder-\(SystemCall.processID())"
    let c = try RedisConnection.open(endpoint, ro, pushHandler: { pushes.append($0) })
    defer { c.close() }
    guard c.resp3 else {
      throw CacheError.remoteError(
        endpoint: endpoint.description,
        message: "the server does not speak RESP3, which tracking needs")
    }
    var tracking: [[UInt8]] = ["CLIENT", "TRACKING", "ON", "BCAST"].map { Array($0.utf8) }
    if !prefix.isEmpty { tracking += [Array("PREFIX".utf8), prefix] }
    let r = try c.roundTrip([tracking])[0]
    if let m = r.errorMessage { throw CacheError.remoteError(endpoint: endpoint.description, message: m) }
    // From here on every write under the prefix reaches us: entries of earlier sessions
    // may have missed theirs.
    started()
    let ping = RESPEncoder.command("PING")
    let intervalNs = UInt64(max(0.001, options.heartbeatInterval) * 1e9)
    let commandNs = UInt64(max(0.001, ro.commandTimeout) * 1e9)
    while !until() {
      let t0 = Clock.nanoseconds()
      try c.send(ping)
      let reply = try c.readReply(deadline: t0 &+ commandNs)
      guard reply.errorMessage == nil else {
        throw CacheError.remoteError(endpoint: endpoint.description, message: reply.errorMessage ?? "")
      }
      apply(&pushes, flushed)
      // Every invalidation the server sent before it answered this PING is applied.
      confirmed(t0 / 1_000_000)
      while !until() {
        let now = Clock.nanoseconds()
        guard now < t0 &+ intervalNs else { break }
        try c.waitForPushes(timeout: Double(t0 &+ intervalNs - now) / 1e9)
        apply(&pushes, flushed)
      }
    }
  }

  /// Applies invalidation pushes: their keys removed under one write-lock hold; a null
  /// payload (FLUSHALL, FLUSHDB) bumps the epoch.
  private func apply(_ pushes: inout [RESPValue], _ flushed: () -> Void) {
    guard !pushes.isEmpty else { return }
    var keys: [String] = []
    var flush = false
    for p in pushes {
      guard let items = p.elements, items.count >= 2, items[0].string == "invalidate" else { continue }
      if case .null = items[1] {
        flush = true
        continue
      }
      for k in items[1].elements ?? [] {
        guard let b = k.bytes, b.count > prefix.count, b.starts(with: prefix) else { continue }
        keys.append(String(decoding: b[prefix.count...], as: UTF8.self))
      }
    }
    pushes.removeAll(keepingCapacity: true)
    if flush { flushed() }
    guard !keys.isEmpty else { return }
    // Keys the file cannot hold are not in it; the rest go in one batch (one by one if
    // the batch is refused, so that one bad key cannot keep the others).
    let maxKey = local.maxKeySize
    keys.removeAll { $0.isEmpty || $0.utf8.count > maxKey }
    var removed = 0
    do { removed = try local.removeObjects(forKeys: keys) } catch {
      for k in keys where (try? local.removeObject(forKey: k)) == true { removed += 1 }
    }
    // Counted once applied, so that a reader who sees the count sees the removals.
    NearLayout.add(local, NearLayout.received, UInt64(keys.count))
    NearLayout.add(local, NearLayout.applied, UInt64(removed))
  }

  private func bumpEpoch() { NearLayout.bumpEpoch(local) }
}
