import Glibc
import SystemCalls

/// A read-only view of a format-4 file (one index of slots and one pair of logs for the
/// whole file), for `CacheFile.migrate` (`mapped-cache migrate`): it hands out each live
/// entry's key, value and expiry, checked as the format-4 engine checked them, and never
/// writes. The file is mapped read-only and private to this value; every offset and
/// length read from it is checked against the file's size and limits before any byte it
/// names is read (this type and `MappedMemory` are the two places that read through
/// pointers into a cache file).
///
/// Format 4, as far as this reader needs it (little-endian, offsets from the file's start):
///
///     header  0 magic, 8 version (4), 12 header bytes u32, 16 file size, 24 slot count,
///             32 slots offset, 40 log offset, 48 small size, 56 main size, 64 ghost
///             offset, 72 ghost count, 80 max key u32, 84 max value u32, 88 type
///             fingerprint, 96 created ms, 104 process table offset, 112 its count u32,
///             116 slot bytes u32 (32, 64, 128, 256), 120 layout fingerprint, 128 type name
///     slot    0 seq, 8 hash (0: empty), 16 record offset, 24 meta (bits 0-47 expiry ms,
///             48-53 horizon, 62 inline); inline area from 32: klen u16, vlen u16, sum
///             u32, cas u64, key and value from 48
///     record  0 size u32, 4 klen u16, 6 kind u16 (1 entry), 8 vlen u32, 12 sum u32,
///             16 hash u64, 24 cas u64, key and value from 32
final class FormatFourReader {
  struct Entry {
    var key: [UInt8]
    var value: [UInt8]
    /// The expiry word (`Expiry`: ms in bits 0-47, the horizon in 48-53), 0 for never.
    var expiry: UInt64
  }

  let path: String
  let header: HeaderFields
  private let fd: Int32
  private let base: UnsafeMutableRawPointer
  private let size: Int
  private let slotCount: Int, slotBytes: Int, slotsOffset: Int
  private let logStart: Int, logEnd: Int
  private let maxKey: Int, maxValue: Int

  /// Opens `path` read-only, if it is a format-4 cache whose header checks out.
  init(path: String) throws(CacheError) {
    self.path = path
    let fd: Int32
    do { fd = try SystemCall.open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW, mode: 0) } catch {
      throw .system(error)
    }
    self.fd = fd
    var mapped: UnsafeMutableRawPointer? = nil
    defer { if mapped == nil { SystemCall.close(fd) } }
    let st: stat
    let bytes: [UInt8]
    do {
      st = try SystemCall.fstat(fd)
      bytes = try SystemCall.pread(fd, count: 256, at: 0)
    } catch {
      throw .system(error)
    }
    guard (st.st_mode & S_IFMT) == S_IFREG, bytes.count == 256 else { throw .notACacheFile(path: path) }
    let h = HeaderFields(bytes: bytes)
    guard h.magic == Format.magic else { throw .notACacheFile(path: path) }
    guard h.version == Format.previousVersion else {
      throw .incompatibleFormat(path: path, reason: "format version \(h.version), not 4")
    }
    guard HeaderFields.fingerprintMatches(bytes) else {
      throw .corrupted(path: path, reason: "the header's layout fingerprint does not match its fields")
    }
    header = h
    func u64(_ o: Int) -> Int { Int(min(Self.word(bytes, o), 1 << 56)) }
    func u32(_ o: Int) -> Int { Int(Self.word(bytes, o) & 0xFFFF_FFFF) }
    size = Int(st.st_size)
    slotCount = u64(24)
    slotsOffset = u64(32)
    slotBytes = u32(116)
    let logOffset = u64(40)
    let small = u64(48)
    let main = u64(56)
    let ghostOffset = u64(64)
    let ghostCount = u64(72)
    maxKey = u32(80)
    maxValue = u32(84)
    let procCount = u32(112)
    let headerBytes = u32(12)
    logStart = logOffset
    logEnd = logOffset + small + main
    // Format 4's own checks of its geometry (`Layout.init(header:)` of that version).
    let ok =
      u64(16) == size && size >= Format.minCapacity && size <= Format.maxCapacity && (1...1000).contains(procCount)
      && headerBytes == Format.align(Format.headerPage + procCount * Format.procEntryBytes, 4096)
      && [32, 64, 128, 256].contains(slotBytes) && slotCount >= 1024 && slotCount <= size / slotBytes
      && slotsOffset == headerBytes && ghostOffset == slotsOffset + slotCount * slotBytes
      && ghostCount >= 256 && ghostCount <= slotCount && logOffset == Format.align(ghostOffset + ghostCount * 4, 64)
      && small > 0 && main > 0 && small % 8 == 0 && main % 8 == 0 && logEnd <= size
      && (1...Format.maxKeyLimit).contains(maxKey) && maxValue >= 0 && maxValue <= Int(UInt32.max)
    guard ok else { throw .corrupted(path: path, reason: "its format-4 geometry does not check out") }
    do { mapped = try SystemCall.mmap(fd, size: size, writable: false) } catch { throw .system(error) }
    base = mapped!
  }

  deinit {
    SystemCall.munmap(base, size: size)
    SystemCall.close(fd)
  }

  private static func word(_ b: [UInt8], _ o: Int) -> UInt64 {
    (0..<8).reduce(0) { $0 | UInt64(b[o + $1]) << (8 * UInt64($1)) }
  }

  /// The file's bytes at `offset ..< offset + count`, or nil when they lie outside it.
  private func bytes(_ offset: Int, _ count: Int) -> UnsafeRawBufferPointer? {
    guard offset >= 0, count >= 0, offset <= size, count <= size - offset else { return nil }
    return UnsafeRawBufferPointer(start: base + offset, count: count)
  }

  private func load<T: FixedWidthInteger>(_ offset: Int, as: T.Type) -> T? {
    bytes(offset, MemoryLayout<T>.size).map { $0.loadUnaligned(as: T.self) }
  }

  /// Calls `body` with each entry that checks out (its key hashing to its slot's hash,
  /// its value matching its checksum, every length and offset in bounds), and returns
  /// how many slots held an entry that did not (skipped). Expired entries are handed out
  /// too (`Entry.expiry` says so).
  func forEachEntry(_ body: (Entry) throws -> Void) rethrows -> Int {
    var damaged = 0
    for i in 0..<slotCount {
      let slot = slotsOffset + i * slotBytes
      guard let hash = load(slot + 8, as: UInt64.self), hash != 0 else { continue }
      guard let seq = load(slot, as: UInt64.self), seq & 1 == 0, let meta = load(slot + 24, as: UInt64.self),
        let found = meta & (1 << 62) != 0 ? inlineEntry(slot) : recordEntry(slot, hash: hash),
        KeyHash.key(found.key) == hash, KeyHash.checksum32(found.value, hash: hash) == found.sum,
        load(slot, as: UInt64.self) == seq
      else {
        damaged += 1
        continue
      }
      try body(Entry(key: Array(found.key), value: Array(found.value), expiry: meta & ((1 << 54) - 1)))
    }
    return damaged
  }

  private func inlineEntry(_ slot: Int) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, sum: UInt32)? {
    guard let klen = load(slot + 32, as: UInt16.self).map(Int.init),
      let vlen = load(slot + 34, as: UInt16.self).map(Int.init),
      klen >= 1, klen + Int(vlen) <= slotBytes - 48, let sum = load(slot + 36, as: UInt32.self),
      let key = bytes(slot + 48, klen), let value = bytes(slot + 48 + klen, vlen)
    else { return nil }
    return (key, value, sum)
  }

  private func recordEntry(_ slot: Int, hash: UInt64) -> (
    key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, sum: UInt32
  )? {
    guard let loc = load(slot + 16, as: UInt64.self).map({ Int(min($0, 1 << 56)) }), loc & 7 == 0, loc >= logStart,
      loc <= logEnd - 32, let size = load(loc, as: UInt32.self).map(Int.init), loc + size <= logEnd,
      load(loc + 6, as: UInt16.self) == 1, let klen = load(loc + 4, as: UInt16.self).map(Int.init),
      let vlen = load(loc + 8, as: UInt32.self).map(Int.init), klen >= 1, klen <= maxKey, vlen <= maxValue,
      32 + klen + vlen <= size, load(loc + 16, as: UInt64.self) == hash, let sum = load(loc + 12, as: UInt32.self),
      let key = bytes(loc + 32, klen), let value = bytes(loc + 32 + klen, vlen)
    else { return nil }
    return (key, value, sum)
  }
}
