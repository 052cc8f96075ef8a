import CMappedCacheABI
import MappedCache

/// What `mc_open` was asked for: enough to open the same cache again in a child of fork.
struct OpenRequest {
  var path: String
  var options: CacheOptions
  var policy: OpenPolicy
  var lockMode: LockMode
  /// The value type asked for, or nil for the file's own.
  var typeName: String?
  /// The value type of a file created when `typeName` is nil.
  var createTypeName: String

  /// The value types the ABI opens.
  static let typeNames = ["bytes", "string", "int64", "python"]

  /// Opens the store; with no type asked for, the file's own (found by opening it as
  /// `createTypeName`, which also creates a missing file as that type).
  func open() throws -> ByteStore {
    if let typeName { return try open(as: typeName) }
    do {
      return try open(as: createTypeName)
    } catch CacheError.typeMismatch(_, _, let found) where OpenRequest.typeNames.contains(found) {
      return try open(as: found)
    }
  }

  private func open(as typeName: String) throws -> ByteStore {
    do {
      switch typeName {
      case "bytes": return try TypedStore<[UInt8]>(path: path, options: options, policy: policy, lockMode: lockMode)
      case "string":
        return try TypedStore<TaggedBytes<StringFormat>>(
          path: path, options: options, policy: policy, lockMode: lockMode)
      case "int64": return try TypedStore<Int>(path: path, options: options, policy: policy, lockMode: lockMode)
      case "python":
        return try TypedStore<TaggedBytes<PythonFormat>>(
          path: path, options: options, policy: policy, lockMode: lockMode)
      default:
        throw ABIError.invalidArgument(
          "value type \"\(typeName)\"; the C ABI opens caches of \(OpenRequest.typeNames.joined(separator: ", "))")
      }
    } catch CacheError.typeMismatch(let p, let expected, let found) where !OpenRequest.typeNames.contains(found) {
      throw CacheError.typeMismatch(
        path: p, expected: "\(expected) (the C ABI opens \(OpenRequest.typeNames.joined(separator: ", ")))",
        found: found)
    }
  }
}

/// One `mc_cache` handle: the request it was opened with and the store open in this
/// process. A handle inherited across fork() opens the file again on its first use in
/// the child, so the child has its own registration and write-lock token: the
/// parent's live on the open file description both share, and a child acting on them
/// would hold the parent's lock as its own.
final class OpenCache: @unchecked Sendable {
  let request: OpenRequest
  /// The fork generation `store` was opened in (`mc_abi_fork_generation`).
  private var generation: UInt64
  /// Nil only in a child of fork after `dropInherited` or a failed reopen. Replaced only
  /// under the tables lock, in a child, where no thread can be using it: a thread of the
  /// child that reads it either sees a stale generation and takes the lock too, or
  /// reads it after the new generation was stored.
  private var store: ByteStore? {
    didSet { unretainedStore = store.map { Unmanaged.passUnretained($0) } }
  }
  /// `store`, used without retaining it (a retain and a release cost a read about a
  /// third of its time): `store` keeps it alive until it is replaced, which happens only
  /// where no thread uses it (above), or closed, which must not race with its use.
  private var unretainedStore: Unmanaged<ByteStore>?

  init(_ request: OpenRequest) throws {
    self.request = request
    generation = mc_abi_fork_generation()
    let opened = try request.open()
    store = opened
    unretainedStore = Unmanaged.passUnretained(opened)
  }

  /// Runs `body` with the store for this process: one load and one compare, unless this
  /// is the first use in a child of fork.
  @inline(__always)
  func withCurrent<R>(_ body: (ByteStore) throws -> R) throws -> R {
    var current = unretainedStore
    if generation != mc_abi_fork_generation() || current == nil {
      current = Unmanaged.passUnretained(try reopenAfterFork())  // `store` holds it
    }
    return try current.unsafelyUnwrapped._withUnsafeGuaranteedRef(body)
  }

  /// The store, unretained, when it was opened in this process: one load and one
  /// compare. Nil on the first use in a child of fork (and after a failed reopen there),
  /// which `withCurrent` handles. The generation is this process's only while `store` is
  /// set: `dropInherited` and a reopen clear `store` only under an older generation, and
  /// a reopen stores the new generation after the new store.
  @inline(__always)
  var storeIfCurrent: Unmanaged<ByteStore>? {
    generation == mc_abi_fork_generation() ? unretainedStore : nil
  }

  /// The store for this process (retained: for calls that keep it).
  func current() throws -> ByteStore {
    if generation == mc_abi_fork_generation(), let store { return store }
    return try reopenAfterFork()
  }

  @inline(never)
  private func reopenAfterFork() throws -> ByteStore {
    mc_abi_tables_lock()
    defer { mc_abi_tables_unlock() }
    if generation == mc_abi_fork_generation(), let store { return store }
    // What the parent opened is never used here: closing it closes only this process's
    // descriptor (the parent keeps its own open file description and its locks).
    store = nil
    let reopened = try request.open()
    store = reopened
    generation = mc_abi_fork_generation()
    return reopened
  }

  /// In a child of fork (tables lock held): closes the inherited descriptor and mapping
  /// now, rather than on the first use here.
  func dropInherited() {
    if generation != mc_abi_fork_generation() { store = nil }
  }
}

/// Every open `mc_cache` and `mc_claim` handle of the process.
enum Handles {
  static let caches: HandleTable<OpenCache> = {
    let table = HandleTable<OpenCache>(kind: 1, capacity: 4096)
    mc_abi_publish_cache_table(Unmanaged.passUnretained(table).toOpaque())
    return table
  }()
  static let claims = HandleTable<PendingClaim>(kind: 2, capacity: 16384)

  /// Runs `body` with the store of an open cache handle; the error of a bad handle or of
  /// `body` becomes its status.
  @inline(__always)
  static func withStore(_ handle: OpaquePointer?, _ body: (ByteStore) throws -> Int32) -> Int32 {
    guard let cache = openCache(handle) else { return failure(badHandle(handle, "cache")) }
    return guarded { try cache._withUnsafeGuaranteedRef { try $0.withCurrent(body) } }
  }

  /// Asks `question` of a cache handle's store about one key, after checking the key:
  /// `MC_OK` for yes and `MC_NOT_FOUND` for no.
  static func answer(
    _ handle: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int,
    _ question: (ByteStore, String) throws -> Bool
  ) -> Int32 {
    withStore(handle) { store in
      let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
      return try question(store, String(decoding: k, as: UTF8.self)) ? MC_OK : MC_NOT_FOUND
    }
  }

  /// The open cache a handle names, unretained; nil when it names none.
  @inline(__always)
  static func openCache(_ handle: OpaquePointer?) -> Unmanaged<OpenCache>? {
    // No table yet: no cache was ever opened.
    guard let table = mc_abi_cache_table() else { return nil }
    return Unmanaged<HandleTable<OpenCache>>.fromOpaque(table)._withUnsafeGuaranteedRef { $0.object(handle) }
  }

  static func badHandle(_ handle: OpaquePointer?, _ kind: String) -> ABIError {
    handle == nil ? .invalidArgument("the \(kind) handle is NULL") : .closed("this \(kind) handle")
  }
}
