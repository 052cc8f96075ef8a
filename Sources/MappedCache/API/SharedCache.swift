import Foundation
import Synchronization
import SystemCalls

/// A cache shared by every process that opens the same file: a fixed-size,
/// memory-mapped hash table. Reads take no lock and make no system call; writes are
/// serialised across processes and threads and survive any writer being killed.
///
/// ```swift
/// let cache = try SharedCache<String>(name: "demo")
/// try cache.setObject("hello", forKey: "greeting", expires: .seconds(60))
/// let s = try cache.object(forKey: "greeting")
/// ```
///
/// One instance may be shared by any number of threads.
public final class SharedCache<Value>: @unchecked Sendable {
  @usableFromInline let engine: CacheEngine
  @usableFromInline let codec: ValueCodec<Value>
  /// Decoded values kept in this process (`OpenPolicy.decodedValues`), or nil.
  @usableFromInline let decoded: DecodedValueCache<Value>?
  /// `decoded` unretained (kept alive by `decoded`): the hot read passes it down without
  /// a retain and release, two atomic operations and a real share of its time. Stored,
  /// not derived at the read: binding `decoded` there retains it (`scripts/typed-callgrind.sh`
  /// struct-hot counts the difference).
  @usableFromInline let decodedUnretained: Unmanaged<DecodedValueCache<Value>>?
  /// The default expiry, packed for lock-free reads on every write:
  /// 0 = never; tag 1 in the top bits = seconds (low bits: milliseconds);
  /// tag 2 = a date (low bits: milliseconds since 1970).
  @usableFromInline let defaults = Atomic<UInt64>(0)
  private let sweeperLock = NSLock()
  private var sweeperTimer: DispatchSourceTimer?

  /// The file's path.
  public var path: String { engine.path }
  /// Whether this handle can write.
  public var isWritable: Bool { engine.writable }
  /// Longest key, in bytes.
  public var maxKeySize: Int { engine.layout.maxKey }
  /// Largest encoded value, in bytes.
  public var maxValueSize: Int { engine.layout.maxValue }
  /// The file's size in bytes.
  public var capacity: Int { engine.currentFileSize }
  /// Partitions of the file: each has its own write lock, index, logs and eviction, so
  /// writers of different partitions run at once.
  public var partitionCount: Int { engine.currentPartitionCount }
  /// The most the file may grow to (`CacheOptions.maxCapacity`, fixed at creation).
  public var maxCapacity: Int { engine.layout.maxCapacity }

  /// Grows the file to `capacity` bytes (rounded down to whole partitions), while every
  /// other process goes on reading and writing through its open handle: nothing is lost,
  /// no reader waits for a lock, and no process has to reopen. The new partitions are
  /// filled one at a time from the partitions they split; only the writers of the two
  /// partitions of a step wait for it. Growth can be repeated, up to `maxCapacity`. A
  /// grower killed midway leaves a working cache, whose next writer finishes the step.
  /// - Returns: the capacity after growth (unchanged when `capacity` adds no whole
  ///   partition, whose size `mapped-cache info` shows).
  /// - Throws: ``CacheError/diskFull(path:bytes:)`` when the file system has no room
  ///   (the file is left as it was); ``CacheError/invalidArgument(_:)`` for a capacity
  ///   below the current one or past `maxCapacity`;
  ///   ``CacheError/readOnly(path:)``; ``CacheError/timedOut(operation:)`` when another
  ///   process keeps growing the file.
  @discardableResult
  public func grow(toCapacity capacity: Int) throws -> Int {
    try engine.grow(toCapacity: capacity).toCapacity
  }

  /// The growth policy stored in the file (`GrowthPolicy`), nil for none.
  public var growthPolicy: GrowthPolicy? { engine.growthPolicy }

  /// Stores a growth policy in the file (nil: none): every process's writes apply it.
  /// - Throws: ``CacheError/invalidArgument(_:)`` for a policy out of range;
  ///   ``CacheError/readOnly(path:)``.
  public func setGrowthPolicy(_ policy: GrowthPolicy?) throws { try engine.setGrowthPolicy(policy) }

  /// Grows the file now if its growth policy calls for it (as a writer's ghost hit
  /// checks on a thread of its own); returns the capacity after, nil when it did not grow.
  @discardableResult
  public func growIfPolicyCalls() -> Int? { engine.considerGrowth()?.toCapacity }

  /// The expiry `setObject` uses when it is given none. Per handle, not stored in the file.
  public var defaultExpiry: CacheExpiry {
    get {
      let w = defaults.load(ordering: .relaxed)
      let ms = Double(w & Format.expiryMask)
      switch w >> 62 {
      case 1: return .seconds(ms / 1000)
      case 2: return .date(Date(timeIntervalSince1970: ms / 1000))
      default: return .never
      }
    }
    set {
      let packed: UInt64
      switch newValue {
      case .never: packed = 0
      case .seconds(let s): packed = 1 << 62 | UInt64(max(1, min(s * 1000, Double(Format.expiryMask))).rounded(.up))
      case .date(let d): packed = 2 << 62 | max(1, d.milliseconds)
      }
      defaults.store(packed, ordering: .relaxed)
    }
  }

  /// Opens the cache at `path`, creating it with `capacity` bytes (and `options`) if it
  /// does not exist. An existing cache keeps its own capacity and limits.
  ///
  /// Creating reserves the file's blocks at once (a full file system fails here, not
  /// later) and takes a few milliseconds per hundred MiB; opening an existing file
  /// reads and checks its header and maps it. Open one handle per process and share it
  /// between threads.
  ///
  /// - Throws: ``CacheError/typeMismatch(path:expected:found:)`` when the file was made
  ///   for another value type; ``CacheError/notACacheFile(path:)``,
  ///   ``CacheError/incompatibleFormat(path:reason:)`` or
  ///   ``CacheError/corrupted(path:reason:)`` when the file is not a sound cache of this
  ///   format (it is left untouched); ``CacheError/unsafeFile(path:reason:)`` when
  ///   `policy` refuses it (a symlink, another user's file, a file others may write);
  ///   ``CacheError/diskFull(path:bytes:)``; ``CacheError/invalidArgument(_:)`` for
  ///   creation options out of range; ``CacheError/tooManyProcesses(limit:)``;
  ///   ``CacheError/system(_:)`` for any other failed system call.
  public init(
    path: String, capacity: Int = 64 << 20, options: CacheOptions = CacheOptions(),
    policy: OpenPolicy = OpenPolicy(), lockMode: LockMode = .sharedWord
  ) throws where Value: Codable {
    var o = options
    if capacity != 64 << 20 || o.capacity == 64 << 20 { o.capacity = capacity }
    let codec = ValueCodec<Value>.make()
    self.codec = codec
    decoded = DecodedValueCache.make(policy.decodedValues, codec: codec)
    decodedUnretained = decoded.map { Unmanaged.passUnretained($0) }
    engine = try CacheEngine(
      path: path, options: o, policy: policy, lockMode: lockMode,
      typeFingerprint: codec.fingerprint, typeName: codec.typeName)
  }

  /// Opens or creates the cache called `name` at the embedded default location:
  /// `/dev/shm/<name>.mcache`, or the temporary directory where /dev/shm is missing.
  public convenience init(
    name: String, capacity: Int = 64 << 20, options: CacheOptions = CacheOptions(),
    policy: OpenPolicy = OpenPolicy()
  ) throws where Value: Codable {
    try self.init(path: SharedCache.defaultPath(forName: name), capacity: capacity, options: options, policy: policy)
  }

  /// The embedded default location of the cache called `name`.
  public static func defaultPath(forName name: String) throws -> String {
    guard !name.isEmpty, name.count <= 200, !name.contains("/"), name != ".", name != ".." else {
      throw CacheError.invalidArgument("cache name \"\(name)\" must be 1 to 200 characters without '/'")
    }
    var isDir: ObjCBool = false
    let dir =
      FileManager.default.fileExists(atPath: "/dev/shm", isDirectory: &isDir) && isDir.boolValue
      ? "/dev/shm" : NSTemporaryDirectory()
    return (dir as NSString).appendingPathComponent("\(name).mcache")
  }

  deinit {
    sweeperTimer?.cancel()
  }

  // MARK: Keys

  /// The key's UTF-8 bytes (`String.withUTF8Bytes`: in place for a native string).
  @inlinable @inline(__always)
  func withKey<R>(_ key: String, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try key.withUTF8Bytes(body)
  }

  /// Decodes `key`'s stored bytes; a failure is reported as `.decodingFailed`.
  @inlinable @inline(__always)
  func decode(_ bytes: UnsafeRawBufferPointer, key: String) throws -> Value {
    do { return try codec.decodeValue(bytes) } catch { throw CacheError.decodingFailed(key: key, reason: "\(error)") }
  }

  /// `object(forKey:)` for a value larger than the stack buffer (`CacheEngine.stackBufferBytes`), `size` bytes when last seen:
  /// copied into a buffer of its size, which it may outgrow meanwhile (a few tries).
  @inlinable @inline(never)
  func largerObject(forKey key: String, size: Int) throws -> Value? {
    var result: Value? = nil
    try withKey(key) { k in
      var want = size
      for _ in 0..<8 where want > 0 {
        want = try withUnsafeTemporaryAllocation(byteCount: want, alignment: 16) { buffer -> Int in
          let n = engine.copyValue(k, into: buffer)
          if n > buffer.count { return n }
          if n >= 0 { result = try decode(UnsafeRawBufferPointer(start: buffer.baseAddress, count: n), key: key) }
          return 0
        }
      }
    }
    return result
  }

  /// Throws for an empty or oversized key; the check itself is inline, the throw a call.
  @inlinable @inline(__always)
  func checkKeySize(_ key: UnsafeRawBufferPointer) throws {
    if key.count == 0 || key.count > engine.maxKey { try engine.checkKey(key) }
  }

  /// Inlined into every write: `.never`, and no expiry with no default, cost one
  /// compare (as a call, a noticeable share of a small set's instructions).
  @inlinable @inline(__always)
  func expiryMs(_ e: CacheExpiry?) -> UInt64 {
    switch e {
    case .some(.never): return 0
    case .none where defaults.load(ordering: .relaxed) == 0: return 0
    default: return expiryMsComputed(e)
    }
  }

  @usableFromInline
  func expiryMsComputed(_ e: CacheExpiry?) -> UInt64 {
    if let e { return e.milliseconds(now: SystemCall.wallClockMilliseconds()) }
    let w = defaults.load(ordering: .relaxed)
    switch w >> 62 {
    case 0: return 0
    case 1: return min(SystemCall.wallClockMilliseconds() &+ (w & Format.expiryMask), Format.expiryMask)
    default: return w & Format.expiryMask
    }
  }

  // MARK: Reading

  /// The value for `key`, or nil when it is missing or expired.
  ///
  /// Takes no lock and makes no system call: the entry is copied under its slot's
  /// seqlock and decoded (values up to 256 bytes on the stack, without allocating
  /// beyond what decoding `Value` needs).
  ///
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a
  ///   bad key; ``CacheError/decodingFailed(key:reason:)`` when the stored bytes are not
  ///   a `Value` (the entry is left as it is).
  @inlinable
  public func object(forKey key: String) throws -> Value? {
    try object(forKey: key, allowingExpired: false)
  }

  /// The value for `key`; with `allowingExpired`, an expired entry still present is
  /// returned too (serve stale while refreshing).
  /// - Throws: as ``object(forKey:)`` does.
  @inlinable
  public func object(forKey key: String, allowingExpired: Bool) throws -> Value? {
    var result: Value? = nil
    if !allowingExpired {
      if let d = decodedUnretained { return try d._withUnsafeGuaranteedRef { try decodedObject(forKey: key, $0) } }
      // Most values (up to 256 bytes) go from the file straight to the stack by
      // `copyValue`'s fast path and are decoded there. (Written out here rather than
      // shared with `largerObject`: a shared helper costs a typed read about a tenth of
      // its instructions.)
      let n = try withKey(key) { k in
        try checkKeySize(k)
        return try withUnsafeTemporaryAllocation(byteCount: CacheEngine.stackBufferBytes, alignment: 16) {
          buffer -> Int in
          let n = engine.copyValue(k, into: buffer)
          if n >= 0 && n <= CacheEngine.stackBufferBytes {
            result = try decode(UnsafeRawBufferPointer(start: buffer.baseAddress, count: n), key: key)
          }
          return n
        }
      }
      return n <= CacheEngine.stackBufferBytes ? result : try largerObject(forKey: key, size: n)  // n: -1 for a miss
    }
    try withKey(key) { k in
      try engine.checkKey(k)
      _ = try engine.read(k, allowExpired: allowingExpired, countStats: true) { bytes, _ in
        result = try decode(bytes, key: key)
      }
    }
    return result
  }

  /// The value and its version (for `setObject(_:forKey:ifVersion:)`); nil when missing
  /// or expired. Lock-free, like ``object(forKey:)``, and throws as it does.
  public func objectWithVersion(forKey key: String) throws -> (value: Value, version: UInt64)? {
    try withKey(key) { k in
      try engine.checkKey(k)
      return try engine.withValue(forKey: k) { bytes, info in (try decode(bytes, key: key), info.version) }
    }
  }

  /// Hands the stored bytes of `key` to `body` without allocating; nil when missing.
  /// The buffer is a private copy (on the stack), taken whole under the entry's seqlock
  /// before `body` runs: a value some set wrote whole for this key, as of that read. It
  /// never changes while `body` runs, whatever other threads or processes do to the
  /// entry meanwhile (overwrite, remove, evict, repair), and is valid only during `body`.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key, and whatever `body` throws.
  @inlinable
  public func withBytes<R>(forKey key: String, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
    var result: R? = nil
    try withKey(key) { k in
      try engine.checkKey(k)
      _ = try engine.read(k, allowExpired: false, countStats: true) { bytes, _ in result = try body(bytes) }
    }
    return result
  }

  /// Copies the stored bytes of `key` into `buffer`: the fastest read, with no
  /// allocation, no closure and one copy (from the file straight into `buffer`).
  /// Returns the value's length, or nil when missing or expired. When the length is
  /// larger than `buffer.count`, nothing is copied: call again with a buffer that large.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key.
  /// Inlined by force, as the byte-key form is: left to the optimizer, each stayed a call
  /// of its own around the engine's, with its own frame and its own `Optional`.
  @inlinable @inline(__always)
  public func copyBytes(forKey key: String, into buffer: UnsafeMutableRawBufferPointer) throws -> Int? {
    try withKey(key) { try copyBytes(forKey: $0, into: buffer) }
  }

  /// `copyBytes(forKey:into:)` for a key given as its UTF-8 bytes (a key read from a
  /// socket or a table needs no `String`). The same key as the `String` with these bytes.
  @inlinable @inline(__always)
  public func copyBytes(forKey key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) throws -> Int? {
    try checkKeySize(key)
    let n = engine.copyValue(key, into: buffer)
    return n < 0 ? nil : n
  }

  /// When `key` expires: nil when missing, `.never`, or `.date`. Lock-free.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key.
  public func expiry(forKey key: String) throws -> CacheExpiry? {
    try withKey(key) { k in
      try engine.checkKey(k)
      return engine.withValue(forKey: k, countStats: false) { _, info in
        CacheExpiry.from(milliseconds: info.expiryMilliseconds)
      }
    }
  }

  /// Whether a live entry exists for `key`. Lock-free; does not count as a hit or a miss.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key.
  public func containsObject(forKey key: String) throws -> Bool {
    try withKey(key) { k in
      try engine.checkKey(k)
      return engine.withValue(forKey: k, countStats: false) { _, _ in true } ?? false
    }
  }

  // MARK: Writing

  /// Stores `value` under `key`, expiring as given (or by `defaultExpiry`).
  ///
  /// Holds the file's write lock for this one entry (a few hundred nanoseconds when
  /// nobody else writes); when the cache is full it evicts under the same hold (see
  /// eviction), and after a writer died mid-change it first repairs what that writer
  /// left. Other processes see the value as soon as this returns.
  ///
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)``;
  ///   ``CacheError/valueTooLarge(size:limit:)`` when the encoded value exceeds
  ///   ``maxValueSize``; ``CacheError/encodingFailed(reason:)``;
  ///   ``CacheError/readOnly(path:)`` on a read-only handle.
  @inlinable
  public func setObject(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) throws {
    _ = try store(value, key, expires, .always)
  }

  /// `setObject(_:forKey:expires:)` for a key given as its UTF-8 bytes.
  @inlinable
  public func setObject(_ value: Value, forKey key: UnsafeRawBufferPointer, expires: CacheExpiry? = nil) throws {
    _ = try store(value, key, expires, .always)
  }

  /// Stores only if `key` has no live entry; false when it had one. The check and the
  /// store happen under one hold of the write lock, so of several processes adding one
  /// key at once exactly one succeeds.
  /// - Throws: as ``setObject(_:forKey:expires:)-(_,String,_)`` does.
  @discardableResult
  public func add(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) throws -> Bool {
    if case .stored = try store(value, key, expires, .ifAbsent) { return true }
    return false
  }

  /// Stores only if `key` has a live entry; false when it had none (checked and stored
  /// under one hold of the write lock).
  /// - Throws: as ``setObject(_:forKey:expires:)-(_,String,_)`` does.
  @discardableResult
  public func replace(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) throws -> Bool {
    if case .stored = try store(value, key, expires, .ifPresent) { return true }
    return false
  }

  /// Compare-and-swap: stores only if the entry's version is still `version` (from
  /// ``objectWithVersion(forKey:)``); false when another write came first, or the entry is gone.
  /// - Throws: as ``setObject(_:forKey:expires:)-(_,String,_)`` does.
  @discardableResult
  public func setObject(
    _ value: Value, forKey key: String, ifVersion version: UInt64,
    expires: CacheExpiry? = nil
  ) throws -> Bool {
    if case .stored = try store(value, key, expires, .ifVersion(version)) { return true }
    return false
  }

  @inlinable
  func store(
    _ value: Value, _ key: String, _ expires: CacheExpiry?,
    _ condition: CacheEngine.SetCondition
  ) throws -> CacheEngine.SetOutcome {
    try withKey(key) { try store(value, $0, expires, condition) }
  }

  @inlinable
  func store(
    _ value: Value, _ key: UnsafeRawBufferPointer, _ expires: CacheExpiry?,
    _ condition: CacheEngine.SetCondition
  ) throws -> CacheEngine.SetOutcome {
    let ms = expiryMs(expires)
    var outcome = CacheEngine.SetOutcome.conflict
    try codec.withValueBytes(value) { v in
      outcome = try engine.set(key, v, expiry: ms, condition: condition)
    }
    return outcome
  }

  /// Changes when `key` expires, keeping its value; false when it is missing. Takes the
  /// write lock for the one entry.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key; ``CacheError/readOnly(path:)`` on a read-only handle.
  @discardableResult
  public func touch(_ key: String, expires: CacheExpiry) throws -> Bool {
    let ms = expires.milliseconds(now: SystemCall.wallClockMilliseconds())
    return try withKey(key) { try engine.touch($0, expiry: ms) }
  }

  /// Removes `key`; false when it was not present. Takes the write lock for the one entry.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key; ``CacheError/readOnly(path:)`` on a read-only handle.
  @discardableResult
  public func removeObject(forKey key: String) throws -> Bool {
    try withKey(key) { try engine.remove($0) }
  }

  /// Removes every entry, in every process's view. Holds the write lock while it clears
  /// the index (time proportional to the slot count: milliseconds for a 64 MiB cache).
  /// - Throws: ``CacheError/readOnly(path:)`` on a read-only handle.
  public func removeAllObjects() throws { try engine.removeAll() }

  /// Removes every expired entry now; returns how many. Works through the index a few
  /// thousand slots per hold of the write lock, so writers in other processes go on.
  /// - Throws: ``CacheError/readOnly(path:)`` on a read-only handle.
  @discardableResult
  public func removeExpiredObjects() throws -> Int { try engine.removeExpired() }

  /// Gets or sets like a dictionary. Errors read as nil and are dropped on set; use the
  /// throwing methods to see them.
  @inlinable
  public subscript(key: String) -> Value? {
    get { try? object(forKey: key) }
    set {
      if let newValue { try? setObject(newValue, forKey: key) } else { _ = try? removeObject(forKey: key) }
    }
  }

  // MARK: Limits, statistics, maintenance

  /// Most entries the cache keeps (0 = only the file's own limit). Stored in the file:
  /// every process sees it. Setting it evicts down to it.
  public var countLimit: Int {
    get { engine.countLimit }
    set { try? engine.setLimits(count: newValue, cost: nil) }
  }

  /// Most key+value bytes the cache keeps (0 = only the file's capacity). Stored in the file.
  public var totalCostLimit: Int {
    get { engine.costLimit }
    set { try? engine.setLimits(count: nil, cost: newValue) }
  }

  /// Sets both limits (nil leaves one as it is; 0 or less means none), reporting errors;
  /// evicts down to them at once, under the write lock.
  /// - Throws: ``CacheError/readOnly(path:)`` on a read-only handle.
  public func setLimits(count: Int? = nil, cost: Int? = nil) throws {
    try engine.setLimits(count: count, cost: cost)
  }

  /// The cache's counters, summed over every process. Takes no lock: atomic loads of the
  /// header's counters and of each process's hit and miss counters.
  public var statistics: CacheStatistics { engine.statistics() }

  /// Checks every invariant of the file (and repairs what it can with `repair`): every
  /// slot, every record, every checksum. A first pass runs without the lock (about 0.1 s
  /// for a 64 MiB cache, writers go on); only if it finds something does a second pass
  /// run under the lock, which `repair` uses to drop what cannot be trusted.
  /// - Throws: ``CacheError/readOnly(path:)`` for `repair` on a read-only handle.
  public func verify(repair: Bool = false) throws -> VerifyReport { try engine.verify(repair: repair) }

  /// Starts a background sweeper that reclaims expired entries ahead of need, a few
  /// thousand slots per tick so it never holds the write lock for long.
  public func startSweeping(every interval: TimeInterval, slotsPerStep: Int = 4096) {
    let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global(qos: .utility))
    let engine = self.engine
    timer.schedule(deadline: .now() + interval, repeating: interval)
    timer.setEventHandler { _ = try? engine.removeExpired(maxSlots: slotsPerStep) }
    sweeperLock.withLock {
      sweeperTimer?.cancel()
      sweeperTimer = timer
    }
    timer.resume()
  }

  /// Stops the background sweeper.
  public func stopSweeping() {
    sweeperLock.withLock {
      sweeperTimer?.cancel()
      sweeperTimer = nil
    }
  }

  /// Whether the path now names another file than this handle has mapped (one `stat`
  /// call). A handle keeps working on the file it mapped; reopen to use the new one.
  public var isReplaced: Bool { engine.file.isReplaced() }
}

extension SharedCache where Value == [UInt8] {
  /// Stores the bytes at `bytes` under `key`: the writing counterpart of
  /// `copyBytes(forKey:into:)` for a cache of bytes, straight from the caller's memory
  /// with no `Array` built (a buffer reused from write to write allocates nothing).
  /// Throws as `setObject` does: for an empty or oversized key, a value too large.
  @inlinable
  public func setBytes(
    _ bytes: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer,
    expires: CacheExpiry? = nil
  ) throws {
    _ = try engine.set(key, bytes, expiry: expiryMs(expires), condition: .always)
  }

  /// `setBytes(_:forKey:expires:)` for a `String` key.
  @inlinable
  public func setBytes(_ bytes: UnsafeRawBufferPointer, forKey key: String, expires: CacheExpiry? = nil) throws {
    try withKey(key) { try setBytes(bytes, forKey: $0, expires: expires) }
  }
}
