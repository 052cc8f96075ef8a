// libFuzzer target (a): a cache file whose bytes the fuzzer controls. Built by
// scripts/fuzz-guided.sh (compiled against the library built with `-enable-testing`, so
// the layout is read from the engine); see docs/fuzzing.md.
//
// Once per process, four valid caches are made and filled (one untyped in one partition
// of 1 MiB, one typed `[UInt8]` in two; entries in both logs, some expired, some removed,
// the small log wrapped so that main holds promoted survivors and the ghost lines tags;
// and each of those grown by one partition, then written again, so that routing runs
// between linear hashing's levels). Their images are kept in memory. Each input then says:
//
//     byte 0        flags: bits 0 and 7 template (bit 7: grown), bit 1 recompute the header's layout
//                   fingerprint after patching (so damage past the identity bytes is
//                   reached), bit 2 open with flock, bit 3 checksums on read (SharedCache),
//                   bit 4 also open read-only first, bit 5 skip the SharedCache phase,
//                   bit 6 live: the patches are written into the file while it is open,
//                   one every 4 operations (as another process could), not before
//     byte 1        patch count (low 4 bits)
//     patches       region u8 (low 3 bits: header, process table, a partition's words, a
//                   partition's index (buckets and ghost lines), small log, main log,
//                   whole file, file size; bit 3: XOR instead of overwrite), offset u24
//                   (its partition: offset mod the count; then modulo the region's
//                   size), length u8 (mod 64), bytes
//     the rest      up to 32 operations per handle, 2 bytes each: opcode, argument (key, value size)
//
// The image (with its patches, unless live) is written to a fresh file, then opened with `CacheFile`
// (read-only and writable) and `SharedCache<[UInt8]>`; the operations read, write, remove,
// iterate, sweep, verify and repair it, and read again. Oracle: nothing traps (every
// failure is a thrown error); after `verify(repair: true)` a second verify reports the
// file sound, and a value set after the repair reads back as set.
import Foundation
import Glibc

@testable import MappedCache

/// What the process prepared once: the directory, the template images and their layouts.
final class FuzzWorld: @unchecked Sendable {
  struct Template {
    var image: [UInt8]
    var layout: Layout
    var keys: [String]
  }

  let dir: String
  let path: String
  var templates: [Template] = []

  static let shared = FuzzWorld()

  init() {
    let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
    dir = "\(base)/mc-fuzz-cachefile-\(getpid())"
    path = "\(dir)/input.mcache"
    // A fuzzer that stopped on a crash or timeout exits without atexit handlers: remove
    // the directories of processes that are gone.
    for name in (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []
    where name.hasPrefix("mc-fuzz-cachefile-") {
      guard let pid = Int32(name.dropFirst("mc-fuzz-cachefile-".count)), kill(pid, 0) != 0, errno == ESRCH else {
        continue
      }
      for f in ["input.mcache", "input.mcache.template"] { unlink("\(base)/\(name)/\(f)") }
      rmdir("\(base)/\(name)")
    }
    mkdir(dir, 0o700)
    templates = [false, true].map { makeTemplate(typed: $0, grown: false) }
    templates += [false, true].map { makeTemplate(typed: $0, grown: true) }
    atexit { FuzzWorld.cleanUp() }
  }

  static func cleanUp() {
    let w = shared
    unlink(w.path)
    unlink(w.path + ".template")
    rmdir(w.dir)
  }

  static let keys: [String] = (0..<160).map { i in i % 7 == 0 ? "user:\(i):profile:with-a-longer-key" : "k\(i)" }

  private func makeTemplate(typed: Bool, grown: Bool) -> Template {
    let p = path + ".template"
    unlink(p)
    var o = CacheOptions(capacity: 1 << 20)
    o.maxKeySize = 64
    o.maxValueSize = 16 << 10
    o.maxProcesses = 8
    // Indexes of a few groups: loops over them (verify, scans, sweeps) stay cheap under
    // the fuzzer's instrumentation. Two partitions in the typed file: damage to one must
    // leave the other's entries readable.
    o.averageEntrySize = 2000
    o.partitionCount = typed ? 2 : 1
    do {
      // The untyped file is made by `CacheFile`, the typed one by `SharedCache`.
      let f = typed ? nil : try CacheFile(creating: p, options: o)
      let c =
        typed
        ? try SharedCache<[UInt8]>(path: p, capacity: 1 << 20, options: o)
        : try SharedCache<[UInt8]>(path: p, capacity: 1 << 20)
      try fill(c, typed: typed)
      if grown {
        _ = try c.grow(toCapacity: c.capacity + c.capacity / c.partitionCount)
        try fill(c, typed: typed)
      }
      _ = f
      let image = try [UInt8](Data(contentsOf: URL(fileURLWithPath: p)))
      let layout = try CacheFile(path: p, readOnly: true).engine.layout
      unlink(p)
      return Template(image: image, layout: layout, keys: Self.keys)
    } catch {
      fatalError("cannot make the template cache: \(error)")
    }
  }

  /// Enough traffic that both logs hold records: the small log wraps, survivors are
  /// promoted to main, some entries expire, some are removed, some are large.
  private func fill(_ c: SharedCache<[UInt8]>, typed: Bool) throws {
    // cache-stress's generator (Stress/KeyDistribution.swift, compiled into this target).
    var rng = SplitMix64(seed: typed ? 7 : 3)
    for round in 0..<6 {
      for (i, k) in Self.keys.enumerated() {
        let size = i % 13 == 0 ? 2000 + i * 10 : (typed ? 8 + i % 40 : 40 + i * 3 % 900)
        let value = (0..<size).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let expires: CacheExpiry =
          i % 11 == 0 ? .date(Date(timeIntervalSinceNow: -5)) : (i % 5 == 0 ? .seconds(3600) : .never)
        try c.setObject(value, forKey: k, expires: expires)
        if round > 2 && i % 3 == 0 { _ = try c.object(forKey: k) }  // referenced: promoted on wrap
      }
      for (i, k) in Self.keys.enumerated() where i % 17 == round { _ = try c.removeObject(forKey: k) }
    }
  }
}

/// Reads the input front to back; past the end every read is 0.
struct InputReader {
  let bytes: UnsafeRawBufferPointer
  var at = 0
  var atEnd: Bool { at >= bytes.count }
  mutating func u8() -> Int {
    guard at < bytes.count else { return 0 }
    defer { at += 1 }
    return Int(bytes[at])
  }
  mutating func u24() -> Int { u8() | u8() << 8 | u8() << 16 }
  mutating func take(_ n: Int) -> ArraySlice<UInt8> {
    let end = min(bytes.count, at + n)
    defer { at = end }
    return ArraySlice(bytes[at..<end])
  }
}

enum CacheFileFuzz {
  /// One patch, resolved to a file offset.
  struct Edit {
    var at: Int
    var data: ArraySlice<UInt8>
    var xor: Bool
  }

  /// Reads the patches and applies them to `image` (unless `live`: then they are only
  /// returned, to be written into the file while it is open). Returns the file size to
  /// write (the image's, unless a size patch changed it; never in live mode) and the edits.
  static func patch(_ image: inout [UInt8], _ l: Layout, _ r: inout InputReader, live: Bool) -> (Int, [Edit]) {
    var size = image.count
    var edits: [Edit] = []
    let count = r.u8() & 15
    for _ in 0..<count {
      let region = r.u8()
      let offset = r.u24()
      let length = r.u8() & 63
      let data = r.take(length)
      let (start, span): (Int, Int)
      let part = l.partitionsOffset + offset % l.partitionCount * l.partitionBytes
      let local = offset / l.partitionCount
      switch region & 7 {
      case 0: (start, span) = (0, Format.headerPage)
      case 1: (start, span) = (Format.headerPage, l.headerBytes - Format.headerPage)
      case 2: (start, span) = (part, Format.PartitionOffset.dataStart)
      case 3:
        // The index's groups as the image has them (the geometry word's low half),
        // within what the partition can hold.
        let groups = min(max(1, Int(readU32(image, part + Format.PartitionOffset.geometry))), l.maxGroups)
        (start, span) = (part + l.indexLow(groups: groups), groups * Format.groupBytes)
      case 4: (start, span) = (part + l.smallBase, l.smallBytes)
      case 5: (start, span) = (part + l.mainBase, l.indexLow(groups: 1) - l.mainBase)
      case 6: (start, span) = (0, image.count)
      default:
        // The file's size: shorter, longer, or (offset 0) empty. Not while it is mapped:
        // a file truncated under its mappings faults (SIGBUS) in any reader, by design of
        // mmap; DESIGN.md's caveats.
        if !live { size = offset == 0 ? 0 : offset % (image.count * 2) }
        continue
      }
      guard span > 0 else { continue }
      var at = start + (region & 7 >= 2 && region & 7 <= 5 ? local : offset) % span
      if live {
        // Live, the identity lines (checked once, at open) and the partitions' lock words
        // are left alone: a process that can write the file can always hold a lock
        // forever or change what `verify` cannot repair; the words after them are fair game.
        if at < Format.HeaderOffset.lockTakeovers { at = Format.HeaderOffset.lockTakeovers + at }
        let p = (at - l.partitionsOffset) / l.partitionBytes
        let lock = l.partitionsOffset + p * l.partitionBytes + Format.PartitionOffset.lockWord
        if p >= 0 && p < l.partitionCount && at < lock + 4 && at + data.count > lock { at = lock + 4 }
      }
      let e = Edit(at: at, data: data, xor: region & 8 != 0)
      edits.append(e)
      if !live { apply(e, to: &image) }
    }
    return (size, edits)
  }

  static func readU32(_ image: [UInt8], _ at: Int) -> UInt32 {
    guard at >= 0, at + 4 <= image.count else { return 0 }
    return (0..<4).reduce(0) { $0 | UInt32(image[at + $1]) << (8 * UInt32($1)) }
  }

  static func apply(_ e: Edit, to image: inout [UInt8]) {
    for (i, b) in e.data.enumerated() where e.at + i < image.count {
      if e.xor { image[e.at + i] ^= b } else { image[e.at + i] = b }
    }
  }

  /// Writes an edit into the file while handles have it mapped (as another process
  /// with write access could, at any moment between two operations).
  static func applyLive(_ e: Edit, path: String, size: Int) {
    let fd = open(path, O_RDWR | O_CLOEXEC)
    guard fd >= 0 else { return }
    defer { close(fd) }
    let n = min(e.data.count, size - e.at)
    guard n > 0 else { return }
    var buf = [UInt8](repeating: 0, count: n)
    _ = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, n, off_t(e.at)) }
    for (i, b) in e.data.prefix(n).enumerated() { buf[i] = e.xor ? buf[i] ^ b : b }
    _ = buf.withUnsafeBytes { pwrite(fd, $0.baseAddress, n, off_t(e.at)) }
  }

  static func fixFingerprint(_ image: inout [UInt8]) {
    let fp = KeyHash.bytes(image[0..<Format.HeaderOffset.fingerprinted])
    for i in 0..<8 {
      image[Format.HeaderOffset.layoutFingerprint + i] = UInt8(truncatingIfNeeded: fp >> (8 * UInt64(i)))
    }
  }

  static func write(_ image: [UInt8], size: Int, to path: String) {
    unlink(path)
    let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    guard fd >= 0 else { fatalError("cannot create \(path): errno \(errno)") }
    defer { close(fd) }
    let n = min(size, image.count)
    let written = image.withUnsafeBytes { pwrite(fd, $0.baseAddress, n, 0) }
    guard written == n, ftruncate(fd, off_t(size)) == 0 else { fatalError("cannot write \(path): errno \(errno)") }
  }

  static func value(_ n: Int, _ tag: Int) -> [UInt8] {
    (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ tag) }
  }

  static func key(_ t: FuzzWorld.Template, _ arg: Int) -> String {
    arg < t.keys.count ? t.keys[arg] : "new:\(arg)"
  }

  /// Runs `body` on up to 32 operations of `ops`, each an opcode and an argument byte. In
  /// live mode one patch is written into the file every 4 operations, and those left after
  /// the last. The operations that visit every slot or record (opcodes whose place in the
  /// caller's table, `op % table`, is in `wholeFile`) run at most 4 times an input: more
  /// would spend the fuzzer's time on the same walks.
  static func forEachOperation(
    _ ops: ArraySlice<UInt8>, _ t: FuzzWorld.Template, path: String, live: [Edit], table: UInt8,
    wholeFile: ClosedRange<UInt8>, _ body: (_ op: UInt8, _ arg: Int) -> Void
  ) {
    var it = ops.makeIterator()
    var steps = 0
    var wholeFileRuns = 0
    var pending = live[...]
    while let op = it.next(), steps < 32 {
      steps += 1
      if steps % 4 == 0, let e = pending.popFirst() { applyLive(e, path: path, size: t.image.count) }
      let arg = Int(it.next() ?? 0)
      if wholeFile.contains(op % table) {
        wholeFileRuns += 1
        if wholeFileRuns > 4 { continue }
      }
      body(op, arg)
    }
    for e in pending { applyLive(e, path: path, size: t.image.count) }
  }

  /// The raw-bytes tool handle: everything `mapped-cache` does.
  static func runCacheFile(_ t: FuzzWorld.Template, _ path: String, flags: Int, ops: ArraySlice<UInt8>, live: [Edit]) {
    let lock: LockMode = flags & 4 != 0 ? .flock : .sharedWord
    if flags & 16 != 0, let ro = try? CacheFile(path: path, readOnly: true, lockMode: lock) {
      _ = ro.info
      _ = ro.statistics
      _ = ro.tableFigures
      _ = ro.attachedProcesses
      _ = ro.sweeperSlot
      for k in t.keys.prefix(8) { _ = try? ro.get(Array(k.utf8), allowingExpired: true) }
      var n = 0
      ro.forEachEntry(values: true, includeExpired: true) { _ in
        n += 1
        return n < 400
      }
      _ = try? ro.verify()
      if (try? ro.set(Array("x".utf8), [1])) != nil { fatalError("a read-only handle stored a value") }
    }
    guard let f = try? CacheFile(path: path, lockMode: lock) else { return }
    _ = f.info
    _ = f.statistics
    _ = f.tableFigures
    forEachOperation(ops, t, path: path, live: live, table: 10, wholeFile: 4...7) { op, arg in
      let k = Array(key(t, arg).utf8)
      switch op % 10 {
      case 0, 1: _ = try? f.get(k, allowingExpired: op & 16 != 0, countingStatistics: op & 32 != 0)
      case 2: _ = try? f.set(k, value(arg * 37 % 3000, arg), ttl: op & 16 != 0 ? 60 : nil)
      case 3: _ = try? f.delete(k)
      case 4:
        var n = 0
        f.forEachEntry(
          prefix: Array(key(t, arg).utf8.prefix(Int(op & 3))), values: op & 16 != 0,
          includeExpired: op & 32 != 0
        ) { _ in
          n += 1
          return n < 300
        }
      case 5: _ = try? f.sweep()
      case 6: _ = try? f.verify(repair: op & 16 != 0)
      case 7:
        switch op & 48 {
        case 48: try? f.clear()
        // The growth policy's check (and the growth it may call for) on the file's words.
        case 16: _ = f.engine.considerGrowth()
        default: _ = f.statistics
        }
      case 8:
        _ = try? f.set(Array(repeating: UInt8(truncatingIfNeeded: arg), count: 1 + arg % 80), value(arg * 131, arg))
      default: _ = try? f.get(Array(repeating: UInt8(truncatingIfNeeded: arg), count: 1 + arg % 80))
      }
    }
    // Repair, then the file must be sound and behave.
    guard let report = try? f.verify(repair: true) else { return }
    _ = report
    do {
      let again = try f.verify()
      if !again.ok { fatalError("verify after verify(repair: true) still finds problems: \(again.problems.prefix(3))") }
      // Within the file's own limits: a header that checks out may give a key or value
      // limit of 0 (libFuzzer can match the layout fingerprint), and then the set's
      // `keyTooLarge` or `valueTooLarge` is the right answer, not a failure.
      let info = f.info
      let k = Array("after-repair".utf8.prefix(info.maxKeySize))
      let v = value(min(100, info.maxValueSize), 9)
      if !k.isEmpty {
        try f.set(k, v)
        guard let got = try f.get(k), got.value == v else { fatalError("a value set after repair did not read back") }
      }
    } catch {
      // An I/O or lock error would be thrown here; a sound file gives none.
      fatalError("after repair: \(error)")
    }
    for k in t.keys.prefix(8) { _ = try? f.get(Array(k.utf8)) }
  }

  /// The typed handle applications use.
  static func runSharedCache(_ t: FuzzWorld.Template, _ path: String, flags: Int, ops: ArraySlice<UInt8>, live: [Edit])
  {
    var policy = OpenPolicy()
    policy.create = false
    policy.verifyChecksumsOnRead = flags & 8 != 0
    guard let c = try? SharedCache<[UInt8]>(path: path, policy: policy, lockMode: flags & 4 != 0 ? .flock : .sharedWord)
    else { return }
    _ = c.statistics
    _ = c.countLimit
    _ = c.totalCostLimit
    var buffer = [UInt8](repeating: 0, count: 4096)
    var counters: SharedCache<Int64>? = nil
    forEachOperation(ops, t, path: path, live: live, table: 16, wholeFile: 13...15) { op, arg in
      let k = key(t, arg)
      if op >= 224 {
        // Batches and counters (opcodes 224...255; below them the table is op % 16).
        switch op % 4 {
        case 0: _ = try? c.removeObjects(forKeys: t.keys.dropFirst(arg % 100).prefix(arg % 9))
        case 1:
          try? c.setObjects(
            Dictionary(uniqueKeysWithValues: (0..<(arg % 5)).map { (key(t, arg + $0), value($0 * 40, arg)) }),
            expires: op & 8 != 0 ? .seconds(10) : nil)
        default:
          // An integer view of the same file (untyped template only; typed: typeMismatch).
          if counters == nil { counters = try? SharedCache<Int64>(path: path, policy: policy) }
          if op % 4 == 2 {
            _ = try? counters?.increment(forKey: k, by: Int64(arg) - 128)
          } else {
            _ = try? counters?.decrement(forKey: k, by: op & 8 != 0 ? .max : 1, initial: Int64(arg))
          }
        }
        return
      }
      switch op % 16 {
      case 0: _ = try? c.object(forKey: k)
      case 1: _ = try? c.object(forKey: k, allowingExpired: true)
      case 2: _ = try? c.objectWithVersion(forKey: k)
      case 3: _ = try? c.withBytes(forKey: k) { $0.count }
      case 4: _ = try? buffer.withUnsafeMutableBytes { try c.copyBytes(forKey: k, into: $0) }
      case 5: _ = try? c.expiry(forKey: k)
      case 6: _ = try? c.containsObject(forKey: k)
      case 7: try? c.setObject(value(arg * 53 % 4000, arg), forKey: k, expires: op & 16 != 0 ? .seconds(30) : nil)
      case 8: _ = try? c.add(value(arg % 200, arg), forKey: k)
      case 9: _ = try? c.replace(value(arg % 300, arg), forKey: k)
      case 10:
        if let (_, version) = try? c.objectWithVersion(forKey: k) {
          _ = try? c.setObject(value(arg, 1), forKey: k, ifVersion: op & 16 != 0 ? version : version &+ 1)
        }
      case 11: _ = try? c.touch(k, expires: .seconds(Double(arg)))
      case 12: _ = try? c.removeObject(forKey: k)
      case 13: _ = try? c.removeExpiredObjects()
      case 14:
        if op & 16 != 0 {
          try? c.setLimits(count: arg * 4, cost: op & 32 != 0 ? arg * 1000 : nil)
        } else {
          _ = try? c.objects(forKeys: t.keys.prefix(arg % 24))
        }
      default:
        if op & 16 != 0 { _ = c.allKeys.count } else { _ = try? c.verify(repair: op & 32 != 0) }
      }
    }
    guard (try? c.verify(repair: true)) != nil else { return }
    do {
      let again = try c.verify()
      if !again.ok { fatalError("verify after verify(repair: true) still finds problems: \(again.problems.prefix(3))") }
      // Within the file's limits, as in `runCacheFile`.
      let k = String("after-repair-typed".prefix(c.maxKeySize))
      let v = value(min(77, c.maxValueSize), 5)
      if !k.isEmpty {
        try c.setObject(v, forKey: k)
        guard try c.object(forKey: k) == v else { fatalError("a value set after repair did not read back") }
      }
    } catch {
      fatalError("after repair: \(error)")
    }
    for k in t.keys.prefix(8) { _ = try? c.object(forKey: k) }
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
  let world = FuzzWorld.shared
  var r = InputReader(bytes: UnsafeRawBufferPointer(start: start, count: count))
  let flags = r.u8()
  let t = world.templates[flags & 1 | flags >> 6 & 2]
  var image = t.image
  let liveMode = flags & 64 != 0
  let (size, edits) = CacheFileFuzz.patch(&image, t.layout, &r, live: liveMode)
  if flags & 2 != 0 { CacheFileFuzz.fixFingerprint(&image) }
  let live = liveMode ? edits : []
  let ops = ArraySlice(r.take(count))
  CacheFileFuzz.write(image, size: size, to: world.path)
  CacheFileFuzz.runCacheFile(t, world.path, flags: flags, ops: ops, live: live)
  if flags & 32 == 0 {
    // The CacheFile phase may have repaired it: the typed phase starts from the input again.
    CacheFileFuzz.write(image, size: size, to: world.path)
    CacheFileFuzz.runSharedCache(t, world.path, flags: flags, ops: ops, live: live)
  }
  return 0
}

/// Makes the templates before the first input, so that their cost (a few hundred
/// milliseconds under the fuzzer's instrumentation) is not charged to it.
@_cdecl("LLVMFuzzerInitialize")
public func initialize(
  _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> CInt {
  _ = FuzzWorld.shared
  return 0
}
