import Glibc
import SystemCalls

/// What `CacheFile.migrate(from:to:options:)` did.
public struct MigrationReport: Sendable, Equatable, Codable {
  /// The source file's format version (4, or this library's).
  public var sourceFormat: Int
  /// Entries copied into the new file.
  public var copied: Int
  /// Entries left behind because they had expired.
  public var expired: Int
  /// Entries left behind because they did not check out (a key that does not hash to
  /// its slot, a value that fails its checksum, a length or offset out of bounds).
  public var damaged: Int
  /// Entries left behind because their key or value is larger than the new file allows.
  public var tooLarge: Int
  /// Entries in the new file at the end: fewer than `copied` when it holds less than the
  /// old one did (copies evict, as sets do).
  public var entries: Int
}

extension MigrationReport {
  /// A report with nothing counted yet.
  init(sourceFormat: Int) {
    self.init(sourceFormat: sourceFormat, copied: 0, expired: 0, damaged: 0, tooLarge: 0, entries: 0)
  }
}

extension CacheFile {
  /// Copies every live entry of the cache at `source` (format 4, which this library no
  /// longer opens, or the current format, to change a file's capacity, partitions or
  /// limits) into a new cache file at `destination`, with its key, value and expiry, and
  /// the source's value type. The source is only read (mapped read-only); stop its
  /// writers first, or entries they write meanwhile may be missed. `destination` must not
  /// exist.
  ///
  /// The new file's options start as the source's capacity, key and value limits,
  /// process count and permission bits, with the partitions this machine would choose;
  /// `configure` may change any of them:
  ///
  /// ```swift
  /// let report = try CacheFile.migrate(from: "/dev/shm/app.mcache", to: "/dev/shm/app.new") {
  ///   $0.capacity = 1 << 30
  /// }
  /// ```
  /// - Throws: ``CacheError/notACacheFile(path:)``, ``CacheError/incompatibleFormat(path:reason:)``
  ///   or ``CacheError/corrupted(path:reason:)`` for a source that cannot be read;
  ///   ``CacheError/invalidArgument(_:)`` when `destination` exists; what creating a file
  ///   throws.
  public static func migrate(
    from source: String, to destination: String, configure: (inout CacheOptions) -> Void = { _ in }
  ) throws(CacheError) -> MigrationReport {
    if SystemCall.lstatIfPresent(destination) != nil {
      throw .invalidArgument("\(destination) exists: migrate writes a new file, and leaves an existing one alone")
    }
    let first = try headerBytes(of: source)
    let mode = SystemCall.lstatIfPresent(source).map { UInt32($0.st_mode) & 0o777 } ?? 0o600
    let now = SystemCall.wallClockMilliseconds()
    let new: CacheFile
    var report: MigrationReport
    if HeaderFields(bytes: first).version == Format.previousVersion, HeaderFields(bytes: first).magic == Format.magic {
      let old = try FormatFourReader(path: source)
      let h = old.header
      new = try create(destination, like: (h.fileSize, h.maxKey, h.maxValue, h.procCount, h.typeName), mode, configure)
      report = MigrationReport(sourceFormat: 4)
      report.damaged = try rethrowing {
        try old.forEachEntry { e in try new.copy(e.key, e.value, expiry: e.expiry, now: now, into: &report) }
      }
    } else {
      let old = try CacheFile(path: source, readOnly: true)
      let i = old.info
      new = try create(
        destination, like: (i.capacity, i.maxKeySize, i.maxValueSize, i.processSlots, i.valueTypeName), mode, configure)
      report = MigrationReport(sourceFormat: i.formatVersion)
      try rethrowing {
        try old.forEachEntry(values: true, includeExpired: true) { e in
          let expiry = e.expiryMilliseconds.map { Expiry.stamp($0, now: now) } ?? 0
          try new.copy(e.key, e.value ?? [], expiry: expiry, now: now, into: &report)
          return true
        }
      }
    }
    report.entries = new.statistics.entries
    return report
  }

  /// Creates the new file with the source's capacity, key and value limits, process
  /// count, permission bits and value type, as `configure` changes them.
  private static func create(
    _ destination: String, like source: (capacity: Int, maxKey: Int, maxValue: Int, processes: Int, typeName: String),
    _ mode: UInt32, _ configure: (inout CacheOptions) -> Void
  ) throws(CacheError) -> CacheFile {
    var o = CacheOptions(capacity: source.capacity)
    (o.maxKeySize, o.maxValueSize, o.maxProcesses, o.mode) = (source.maxKey, source.maxValue, source.processes, mode)
    configure(&o)
    let new = try CacheFile(creating: destination, options: o, typeName: source.typeName)
    try refuseExisting(new, destination)
    return new
  }

  /// Copies one entry (its expiry word, 0 for never) unless it has expired or does not
  /// fit this file's limits, counting it in `report`.
  private func copy(
    _ key: [UInt8], _ value: [UInt8], expiry: UInt64, now: UInt64, into report: inout MigrationReport
  ) throws(CacheError) {
    if expiry != 0 && Expiry.isExpired(expiry, now: now) {
      report.expired += 1
      return
    }
    if key.count > engine.layout.maxKey || value.count > engine.layout.maxValue {
      report.tooLarge += 1
      return
    }
    do {
      _ = try key.withUnsafeBytes { k in
        try value.withUnsafeBytes { v in try engine.set(k, v, expiry: expiry & Format.expiryMask) }
      }
    } catch let e as CacheError {
      throw e
    } catch {
      throw .corrupted(path: path, reason: "\(error)")
    }
    report.copied += 1
  }

  /// Throws when `file` was not made by this call (another process created a cache at
  /// the path after the check that it was free).
  private static func refuseExisting(_ file: CacheFile, _ destination: String) throws(CacheError) {
    guard file.wasCreated else {
      throw .invalidArgument("\(destination) was created by another process meanwhile; left as it is")
    }
  }

  /// The first 256 bytes of the file at `path` (fewer when it is shorter).
  private static func headerBytes(of path: String) throws(CacheError) -> [UInt8] {
    do {
      let fd = try SystemCall.open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW, mode: 0)
      defer { SystemCall.close(fd) }
      return try SystemCall.pread(fd, count: 256, at: 0)
    } catch {
      throw .system(error)
    }
  }

  /// Runs `body`, whose only errors are `CacheError`s, as a typed throw.
  private static func rethrowing<R>(_ body: () throws -> R) throws(CacheError) -> R {
    do { return try body() } catch let e as CacheError { throw e } catch { throw .invalidArgument("\(error)") }
  }
}
