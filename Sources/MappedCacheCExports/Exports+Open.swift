import CMappedCacheABI
import MappedCache

// mappedcache.h: versions, opening and closing, mc_info_get, mc_after_fork_child.

@_cdecl("mc_abi_version")
public func mcABIVersion() -> UInt32 { UInt32(MC_ABI_VERSION) }

@_cdecl("mc_version")
public func mcVersion() -> UnsafePointer<CChar> { ABIStrings.version }

@_cdecl("mc_file_format_version")
public func mcFileFormatVersion() -> Int32 { Int32(MappedCacheVersion.fileFormat) }

/// Strings handed to C that live as long as the process.
enum ABIStrings {
  nonisolated(unsafe) static let version: UnsafePointer<CChar> = {
    let bytes = Array(MappedCacheVersion.library.utf8CString)
    let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
    p.initialize(from: bytes, count: bytes.count)
    return UnsafePointer(p)
  }()
}

@_cdecl("mc_open")
public func mcOpen(
  _ path: UnsafePointer<CChar>?, _ options: UnsafePointer<mc_options>?, _ cache: UnsafeMutablePointer<OpaquePointer?>?
) -> Int32 {
  guarded {
    let out = try Arguments.output(cache, "the cache output pointer")
    out.pointee = nil
    guard let path else { throw ABIError.invalidArgument("the path is NULL") }
    guard let p = String(validatingCString: path), !p.isEmpty else {
      throw ABIError.invalidArgument("the path is empty or not UTF-8")
    }
    let opened = try OpenCache(try OpenOptions.request(path: p, options))
    guard let handle = Handles.caches.insert(opened) else {
      throw ABIError.noMemory("all 4096 cache handles of this process are open; close some")
    }
    out.pointee = handle
    return MC_OK
  }
}

@_cdecl("mc_close")
public func mcClose(_ cache: OpaquePointer?) -> Int32 {
  guard let opened = Handles.caches.remove(cache) else { return failure(Handles.badHandle(cache, "cache")) }
  opened.release()  // unmaps and closes, unless a pending claim still holds the cache
  return MC_OK
}

@_cdecl("mc_info_get")
public func mcInfoGet(_ cache: OpaquePointer?, _ info: UnsafeMutablePointer<mc_info>?) -> Int32 {
  Handles.withStore(cache) { store in
    let out = try Arguments.output(info, "the info pointer")
    var i = mc_info()
    i.struct_size = MemoryLayout<mc_info>.size
    i.capacity = UInt64(store.capacity)
    i.max_key_size = UInt32(store.maxKey)
    i.max_value_size = UInt32(store.maxValue)
    i.writable = store.isWritable ? 1 : 0
    i.partition_count = UInt32(truncatingIfNeeded: store.partitionCount)
    withUnsafeMutableBytes(of: &i.value_type) { dst in
      let name = Array(store.typeName.utf8.prefix(dst.count - 1)) + [0]
      dst.copyBytes(from: name)
    }
    try ABIStructs.copy(i, to: out, name: "info")
    return MC_OK
  }
}

@_cdecl("mc_after_fork_child")
public func mcAfterForkChild() -> Int32 {
  Handles.caches.forEachLive { $0.dropInherited() }
  Handles.claims.forEachLive { $0.dropInherited() }
  return MC_OK
}

/// Reading `mc_options` into what `SharedCache` takes.
enum OpenOptions {
  static let knownFlags: UInt32 =
    MC_OPEN_READ_ONLY | MC_OPEN_NO_CREATE | MC_OPEN_VERIFY_CHECKSUMS | MC_OPEN_ALLOW_OTHER_OWNER
    | MC_OPEN_ALLOW_GROUP_OR_WORLD_WRITABLE | MC_OPEN_FLOCK

  static func request(path: String, _ given: UnsafePointer<mc_options>?) throws -> OpenRequest {
    let o = try ABIStructs.read(given, name: "options", initial: { mc_options_init(&$0) })
    guard o.flags & ~knownFlags == 0 else {
      throw ABIError.invalidArgument("unknown option flags 0x\(String(o.flags & ~knownFlags, radix: 16))")
    }
    var c = CacheOptions()
    if o.capacity != 0 {
      guard o.capacity <= UInt64(Int.max) else { throw ABIError.invalidArgument("a capacity of \(o.capacity) bytes") }
      c.capacity = Int(o.capacity)
    }
    if o.max_key_size != 0 { c.maxKeySize = Int(o.max_key_size) }
    if o.max_value_size != 0 { c.maxValueSize = Int(o.max_value_size) }
    if o.average_entry_size != 0 { c.averageEntrySize = Int(o.average_entry_size) }
    if o.inline_entry_size >= 0 { c.inlineEntrySize = Int(o.inline_entry_size) }
    if o.max_processes != 0 { c.maxProcesses = Int(o.max_processes) }
    if o.partition_count != 0 { c.partitionCount = Int(o.partition_count) }
    if o.mode != 0 { c.mode = o.mode }
    let policy = OpenPolicy(
      allowOtherOwner: o.flags & MC_OPEN_ALLOW_OTHER_OWNER != 0,
      allowGroupOrWorldWritable: o.flags & MC_OPEN_ALLOW_GROUP_OR_WORLD_WRITABLE != 0,
      readOnly: o.flags & MC_OPEN_READ_ONLY != 0, create: o.flags & MC_OPEN_NO_CREATE == 0,
      verifyChecksumsOnRead: o.flags & MC_OPEN_VERIFY_CHECKSUMS != 0,
      sharedGroup: try string(o.shared_group, "shared_group"), decodedValues: .off)
    let typeName = try string(o.value_type, "value_type")
    let createTypeName = try string(o.create_value_type, "create_value_type") ?? "bytes"
    for name in [typeName, createTypeName].compactMap({ $0 }) where !OpenRequest.typeNames.contains(name) {
      throw ABIError.invalidArgument(
        "value type \"\(name)\"; the C ABI opens caches of \(OpenRequest.typeNames.joined(separator: ", "))")
    }
    return OpenRequest(
      path: path, options: c, policy: policy, lockMode: o.flags & MC_OPEN_FLOCK != 0 ? .flock : .sharedWord,
      typeName: typeName, createTypeName: createTypeName)
  }

  private static func string(_ p: UnsafePointer<CChar>?, _ name: String) throws -> String? {
    guard let p else { return nil }
    guard let s = String(validatingCString: p) else { throw ABIError.invalidArgument("\(name) is not UTF-8") }
    return s
  }
}

/// Structures that C passes with their size first (`struct_size`), so that a caller
/// built against an older header, whose structure is shorter, is read and written only
/// as far as its structure goes.
enum ABIStructs {
  /// The caller's structure, its fields past `struct_size` left as `initial` sets them.
  static func read<T>(_ given: UnsafePointer<T>?, name: String, initial: (inout T) -> Void) throws -> T {
    var value = zeroed(T.self)
    initial(&value)
    guard let given else { return value }
    let size = UnsafeRawPointer(given).load(as: Int.self)
    guard size >= MemoryLayout<Int>.size else {
      throw ABIError.invalidArgument("\(name).struct_size is \(size); set it (its *_init function does)")
    }
    withUnsafeMutableBytes(of: &value) { dst in
      dst.copyMemory(from: UnsafeRawBufferPointer(start: given, count: min(size, dst.count)))
    }
    return value
  }

  /// Writes `value` to the caller's structure, as far as its `struct_size` goes.
  static func copy<T>(_ value: T, to out: UnsafeMutablePointer<T>, name: String) throws {
    let size = UnsafeRawPointer(out).load(as: Int.self)
    guard size >= MemoryLayout<Int>.size else {
      throw ABIError.invalidArgument("\(name).struct_size is \(size); set it to sizeof(mc_\(name))")
    }
    withUnsafeBytes(of: value) { src in
      let n = min(size, src.count)
      UnsafeMutableRawPointer(out).copyMemory(from: src.baseAddress!, byteCount: n)
      UnsafeMutableRawPointer(out).storeBytes(of: size, as: Int.self)
    }
  }

  private static func zeroed<T>(_: T.Type) -> T {
    let p = UnsafeMutableRawPointer.allocate(byteCount: MemoryLayout<T>.size, alignment: MemoryLayout<T>.alignment)
    defer { p.deallocate() }
    p.initializeMemory(as: UInt8.self, repeating: 0, count: MemoryLayout<T>.size)
    return p.load(as: T.self)
  }
}
