import Foundation
import SystemCalls

/// An in-process cache (the first tier in front of a `SharedCache`): thread-safe, with
/// per-entry expiry, a count limit and a cost limit like NSCache's `countLimit` and
/// `totalCostLimit`. When a limit is passed, the least recently used entries go first
/// (expired ones are dropped whenever they are found).
///
/// ```swift
/// let memory = MemoryCache<String>(countLimit: 1000)
/// try memory.setObject("v", forKey: "k", expires: .seconds(30))
/// ```
public final class MemoryCache<Value>: Cache, @unchecked Sendable {
  /// Entries in a doubly linked recency list threaded through an array (indices, no
  /// per-entry objects). Invariants: `index[key] == i` iff `nodes[i].key == key` for a
  /// used node; `head` is the most recent, `tail` the least; free nodes are on `free`;
  /// `totalCost` is the sum of used nodes' costs.
  struct Node {
    var key: String
    var value: Value?
    var expiry: UInt64  // absolute ms, 0 = never
    var cost: Int
    var prev = -1
    var next = -1
  }

  struct State {
    var index: [String: Int] = [:]
    var nodes: [Node] = []
    var free: [Int] = []
    var head = -1
    var tail = -1
    var totalCost = 0
    var countLimit: Int
    var costLimit: Int
    var defaultExpiry: CacheExpiry

    mutating func unlink(_ i: Int) {
      let p = nodes[i].prev
      let n = nodes[i].next
      if p >= 0 { nodes[p].next = n } else { head = n }
      if n >= 0 { nodes[n].prev = p } else { tail = p }
      nodes[i].prev = -1
      nodes[i].next = -1
    }

    mutating func pushFront(_ i: Int) {
      nodes[i].prev = -1
      nodes[i].next = head
      if head >= 0 { nodes[head].prev = i }
      head = i
      if tail < 0 { tail = i }
    }

    mutating func remove(_ i: Int) {
      unlink(i)
      index[nodes[i].key] = nil
      totalCost -= nodes[i].cost
      nodes[i].value = nil
      nodes[i].key = ""
      free.append(i)
    }

    mutating func trim() {
      while tail >= 0 && ((countLimit > 0 && index.count > countLimit) || (costLimit > 0 && totalCost > costLimit)) {
        remove(tail)
      }
    }

    /// The live node for `key` (dropping it when expired).
    mutating func live(_ key: String, now: UInt64) -> Int? {
      guard let i = index[key] else { return nil }
      let e = nodes[i].expiry
      if e != 0 && e <= now {
        remove(i)
        return nil
      }
      return i
    }
  }

  /// Guarded by `lock` (values need not be Sendable, so not a `Mutex`).
  private var stateStorage: State
  private let lock = NSLock()
  private let costOf: (@Sendable (Value) -> Int)?

  private func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
    lock.lock()
    defer { lock.unlock() }
    return try body(&stateStorage)
  }

  /// - Parameters:
  ///   - countLimit: most entries kept (0 = no limit).
  ///   - totalCostLimit: most total cost kept (0 = no limit).
  ///   - defaultExpiry: used by `setObject` when given no expiry.
  ///   - cost: an entry's cost when `setObject` is given none (default 0; for example
  ///     `{ $0.count }` for byte arrays).
  public init(
    countLimit: Int = 0, totalCostLimit: Int = 0, defaultExpiry: CacheExpiry = .never,
    cost: (@Sendable (Value) -> Int)? = nil
  ) {
    stateStorage =
      (State(countLimit: max(0, countLimit), costLimit: max(0, totalCostLimit), defaultExpiry: defaultExpiry))
    costOf = cost
  }

  /// Most entries kept (0 = no limit); lowering it evicts the least recently used at once.
  public var countLimit: Int {
    get { withLock { $0.countLimit } }
    set { setLimit(\.countLimit, newValue) }
  }

  /// Most total cost kept (0 = no limit); lowering it evicts the least recently used at once.
  public var totalCostLimit: Int {
    get { withLock { $0.costLimit } }
    set { setLimit(\.costLimit, newValue) }
  }

  /// Stores a limit (negative: none) and evicts down to it at once.
  private func setLimit(_ limit: WritableKeyPath<State, Int>, _ value: Int) {
    withLock {
      $0[keyPath: limit] = max(0, value)
      $0.trim()
    }
  }

  /// The expiry `setObject` uses when it is given none.
  public var defaultExpiry: CacheExpiry {
    get { withLock { $0.defaultExpiry } }
    set { withLock { $0.defaultExpiry = newValue } }
  }

  /// Entries held (some may have expired and not yet been dropped).
  public var count: Int { withLock { $0.index.count } }
  /// Sum of the held entries' costs.
  public var totalCost: Int { withLock { $0.totalCost } }

  public func object(forKey key: String) throws -> Value? {
    try objectAndExpiry(forKey: key)?.value
  }

  public func objectAndExpiry(forKey key: String) throws -> (value: Value, expires: CacheExpiry)? {
    let now = SystemCall.wallClockMilliseconds()
    return withLock { s -> (value: Value, expires: CacheExpiry)? in
      guard let i = s.live(key, now: now), let v = s.nodes[i].value else { return nil }
      s.unlink(i)
      s.pushFront(i)
      return (v, CacheExpiry.from(milliseconds: s.nodes[i].expiry))
    }
  }

  public func setObject(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) throws {
    try setObject(value, forKey: key, expires: expires, cost: costOf?(value) ?? 0)
  }

  /// Stores `value` with an explicit cost (NSCache's `setObject(_:forKey:cost:)`).
  public func setObject(_ value: Value, forKey key: String, expires: CacheExpiry? = nil, cost: Int) throws {
    guard cost >= 0 else { throw CacheError.invalidArgument("cost \(cost) must not be negative") }
    let now = SystemCall.wallClockMilliseconds()
    withLock { s in
      let expiry = (expires ?? s.defaultExpiry).milliseconds(now: now)
      if let i = s.index[key] {
        s.totalCost += cost - s.nodes[i].cost
        s.nodes[i].value = value
        s.nodes[i].expiry = expiry
        s.nodes[i].cost = cost
        s.unlink(i)
        s.pushFront(i)
      } else {
        let node = Node(key: key, value: value, expiry: expiry, cost: cost)
        let i: Int
        if let f = s.free.popLast() {
          s.nodes[f] = node
          i = f
        } else {
          s.nodes.append(node)
          i = s.nodes.count - 1
        }
        s.index[key] = i
        s.totalCost += cost
        s.pushFront(i)
      }
      s.trim()
    }
  }

  @discardableResult
  public func removeObject(forKey key: String) throws -> Bool {
    withLock { s in
      guard let i = s.index[key] else { return false }
      s.remove(i)
      return true
    }
  }

  public func removeAllObjects() throws {
    withLock { s in
      s.index = [:]
      s.nodes = []
      s.free = []
      s.head = -1
      s.tail = -1
      s.totalCost = 0
    }
  }

  /// Drops every expired entry now; returns how many.
  @discardableResult
  public func removeExpiredObjects() -> Int {
    let now = SystemCall.wallClockMilliseconds()
    return withLock { s in
      let expired = s.index.values.filter { s.nodes[$0].expiry != 0 && s.nodes[$0].expiry <= now }
      for i in expired { s.remove(i) }
      return expired.count
    }
  }

  /// Gets or sets like a dictionary.
  public subscript(key: String) -> Value? {
    get { try? object(forKey: key) }
    set {
      if let newValue { try? setObject(newValue, forKey: key) } else { _ = try? removeObject(forKey: key) }
    }
  }
}
