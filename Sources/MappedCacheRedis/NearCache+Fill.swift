import Foundation
@_spi(Tiers) import MappedCache
import SystemCalls

/// A miss's fill (`object(forKey:)` when the file has no servable entry): one process
/// per host fetches the key from Redis through a placeholder entry, the others wait for
/// it. The protocol, step by step:
///  1. look at the entry (`step`): a fresh value or cached miss is served; another live
///     process's placeholder of this epoch is waited for (`.wait`, with backoff, up to
///     `fillTimeout`); anything else is taken over by compare-and-swap with our own
///     placeholder (`.owned`), whose version is our claim;
///  2. fetch the key from Redis (`fetch`, timed, redirects counted);
///  3. swap the value in for our placeholder by compare-and-swap on the claim's version
///     (`complete`); an invalidation that arrived meanwhile removed the placeholder, so
///     the late value is not stored (it is still returned to this caller);
///  4. on any failure, remove our placeholder (`release`) so that waiters do not wait it out.
extension NearCache {
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
      epoch: epoch, word: word, pid: SystemCall.processID(), token: UInt64.random(in: 1...UInt64.max))
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
            if let pid = NearLayout.pendingPID(bytes), SystemCall.isProcessAlive(pid), Clock.nanoseconds() < deadline {
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
      case .owned where !usePlaceholders: return try fillWithoutPlaceholder(key)
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

  /// The race the placeholder closes, kept for the test that shows it: fetch, then store.
  private func fillWithoutPlaceholder(_ key: String) throws -> Value? {
    let word = word(for: key)
    let epoch = NearLayout.currentEpoch(local, word)
    guard let (bytes, expires) = try fetch(key) else { return nil }
    afterFetch?(key)
    let frame = bytes.withUnsafeBytes {
      NearLayout.frame(tag: NearLayout.tagValue, epoch: epoch, word: word, payload: $0)
    }
    try local.setObject(frame, forKey: key, expires: expires)
    return try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) }
  }

  @usableFromInline
  func remoteOnly(_ key: String) throws -> Value? { try fetchDecoded(key) }

  @usableFromInline
  func countStaleServe() { NearLayout.add(local, NearLayout.staleServes, 1) }

  func fetchDecoded(_ key: String) throws -> Value? {
    guard let (bytes, _) = try fetch(key) else { return nil }
    return try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) }
  }
}
