import CheckedValues
import Foundation
import Glibc
@_spi(Testing) import MappedCache

// Child-process commands for the reliability tests (issue 6). Each prints `key=value`
// lines the test parses; a crash (signal), a hang (the test's timeout) or a non-zero
// exit is what the tests look for.
let reliabilityCommands: [String: HelperCommand] = [
  "fuzz-base": { a in try Fuzz.buildBase(path: a[0], seed: UInt64(a[1]) ?? 1, variant: a.count > 2 ? Int(a[2]) ?? 0 : 0)
  },
  "fuzz-case": { a in Fuzz.runCases(a) },
  "hold-lock": { a in
    try LockHolder.run(
      path: a[0], seconds: Double(a[1]) ?? 60, ready: a[2], oddKey: a.count > 3 ? a[3] : nil,
      midMove: a.count > 4 && a[4] == "move")
  },
  "read-loop": { a in
    try ReliabilityOps.readLoop(path: a[0], key: a[1], count: Int(a[2]) ?? 100, readOnly: a.count > 3 && a[3] == "ro")
  },
  "set-timed": { a in try ReliabilityOps.setTimed(path: a[0], key: a[1]) },
  "hammer": { a in try ReliabilityOps.hammer(path: a[0], seconds: Double(a[1]) ?? 3, seed: UInt64(a[2]) ?? 1) },
  "leak-check": { a in try ReliabilityOps.leakCheck(path: a[0], rounds: Int(a[1]) ?? 300, ops: Int(a[2]) ?? 200_000) },
  "ro-probe": { a in ReliabilityOps.readOnlyProbe(path: a[0], readOnlyPolicy: a[1] == "1") },
  "create": { a in
    ReliabilityOps.create(path: a[0], capacity: Int(a[1]) ?? (1 << 20), fileSizeLimit: a.count > 2 ? Int(a[2]) : nil)
  },
  "fill": { a in try ReliabilityOps.fill(path: a[0], seconds: Double(a[1]) ?? 1) },
  "open-only": { a in ReliabilityOps.openOnly(path: a[0], readOnlyPolicy: a[1] == "1") },
  "group-probe": { a in ReliabilityOps.groupProbe(path: a[0], group: a[1], key: a[2]) },
  "grow-worker": { a in
    try ReliabilityOps.growWorker(path: a[0], seconds: Double(a[1]) ?? 3, id: Int(a[2]) ?? 0, workers: Int(a[3]) ?? 1)
  },
]

/// Self-describing values: a reader can tell, from the bytes alone, whether a value
/// is one some `set` wrote whole for that key. Values of 8 bytes or more start with
/// the key index and a version, and the rest is a function of both.
enum Pattern {
  static func key(_ i: Int) -> String {
    let pad = i % 11 == 0 ? i % 230 : 0
    return "key-\(i)-" + String(repeating: "p", count: pad)
  }

  static func byte(_ index: UInt32, _ version: UInt32, _ p: Int) -> UInt8 {
    var x = index &* 0x9E37_79B1 ^ version &* 0x85EB_CA77 ^ UInt32(truncatingIfNeeded: p) &* 0xC2B2_AE3D
    x ^= x >> 15
    return UInt8(truncatingIfNeeded: x)
  }

  static func value(index i: Int, version: UInt32, count: Int) -> [UInt8] {
    let index = UInt32(truncatingIfNeeded: i)
    if count < 8 { return (0..<count).map { UInt8(truncatingIfNeeded: index &* 31 &+ UInt32($0)) } }
    var v = [UInt8](repeating: 0, count: count)
    for b in 0..<4 {
      v[b] = UInt8(truncatingIfNeeded: index >> (8 * UInt32(b)))
      v[4 + b] = UInt8(truncatingIfNeeded: version >> (8 * UInt32(b)))
    }
    for p in 8..<count { v[p] = byte(index, version, p) }
    return v
  }

  /// The version a value of 8 bytes or more was written with.
  static func version(_ v: [UInt8]) -> UInt32 {
    var version: UInt32 = 0
    for b in 0..<4 { version |= UInt32(v[4 + b]) << (8 * UInt32(b)) }
    return version
  }

  /// Whether `v`, not a value any set wrote for key index `i` (`isValid` false), is one
  /// whose damage the record's 16-bit checksum cannot see: its first 8 bytes name a
  /// write of key `i` (index and version) and its checksum equals that write's value's.
  /// One damaged value in 65,536 is such a twin; a read that hands out any other damaged
  /// value failed to check it.
  static func isChecksumTwin(_ v: [UInt8], index i: Int) -> Bool {
    guard v.count >= 8 else { return false }
    var gotIndex: UInt32 = 0
    for b in 0..<4 { gotIndex |= UInt32(v[b]) << (8 * UInt32(b)) }
    guard gotIndex == UInt32(truncatingIfNeeded: i) else { return false }
    let written = value(index: i, version: version(v), count: v.count)
    let key = Array(Pattern.key(i).utf8)
    return CacheFile._recordChecksum(of: v, forKey: key) == CacheFile._recordChecksum(of: written, forKey: key)
  }

  /// Whether `v` is a whole value that some set wrote for key index `i`.
  static func isValid(_ v: [UInt8], index i: Int) -> Bool {
    let index = UInt32(truncatingIfNeeded: i)
    if v.count < 8 { return v == value(index: i, version: 0, count: v.count) }
    var gotIndex: UInt32 = 0
    var version: UInt32 = 0
    for b in 0..<4 {
      gotIndex |= UInt32(v[b]) << (8 * UInt32(b))
      version |= UInt32(v[4 + b]) << (8 * UInt32(b))
    }
    guard gotIndex == index else { return false }
    for p in 8..<v.count where v[p] != byte(index, version, p) { return false }
    return true
  }

  /// A value size: mostly small, some medium, a few large (up to `limit`).
  static func size(_ rng: inout SplitMix, limit: Int) -> Int {
    let r = rng.below(100)
    let n: Int
    if r < 60 {
      n = rng.below(200)
    } else if r < 90 {
      n = 200 + rng.below(1800)
    } else if r < 99 {
      n = 2000 + rng.below(18000)
    } else {
      n = rng.below(limit + 1)
    }
    return min(n, limit)
  }
}

/// Prints one line straight to descriptor 1 (unbuffered: a crash right after it must
/// not lose it).
func emit(_ s: String) {
  let line = Array((s + "\n").utf8)
  line.withUnsafeBytes { b in
    var done = 0
    while done < b.count {
      let n = write(1, b.baseAddress! + done, b.count - done)
      if n <= 0 {
        if errno == EINTR { continue }
        return
      }
      done += n
    }
  }
}

// MARK: Fuzz

enum Fuzz {
  static let keySpace = 3000

  /// Builds a valid, filled cache: varied key and value sizes, overwritten, removed and
  /// expired entries, and enough inserts (≈3× the capacity) to evict, promote and wrap.
  static func buildBase(path: String, seed: UInt64, variant: Int) throws -> Int32 {
    unlink(path)
    // Variant 0: one partition of 1 MiB; variant 1: two partitions of 1 MiB each;
    // variant 2: one partition of 1 MiB grown to three (linear hashing between its
    // levels: partition 0 split, partition 1 not), then written again; variants 3 and
    // 4: one partition of 1 MiB, for the test to grow with a grower it kills midway (in
    // its first split; once the file is extended, before anything is published).
    var options = CacheOptions(capacity: variant == 1 ? 2 << 20 : 1 << 20)
    options.partitionCount = variant == 1 ? 2 : 1
    let c = try SharedCache<[UInt8]>(path: path, capacity: options.capacity, options: options)
    var rng = SplitMix(seed)
    try traffic(c, steps: 0..<8000, &rng)
    if variant == 2 {
      _ = try c.grow(toCapacity: c.capacity * 3)
      try traffic(c, steps: 8000..<14000, &rng)
    }
    let s = c.statistics
    let report = try c.verify()
    emit(
      "partitions=\(c.partitionCount) entries=\(s.entries) evictions=\(s.evictions) expirations=\(s.expirations) promotions=\(s.promotions) reinsertions=\(s.reinsertions) verify=\(report.ok)"
    )
    return report.ok ? 0 : 1
  }

  /// Random operations on the pattern's keys, one a step (a step's number is the version
  /// of the value it sets): gets, sets (some expired, some with a TTL) and removals.
  private static func traffic(_ c: SharedCache<[UInt8]>, steps: Range<Int>, _ rng: inout SplitMix) throws {
    for step in steps {
      let i = rng.below(keySpace)
      let r = rng.below(100)
      let v = Pattern.value(index: i, version: UInt32(step), count: Pattern.size(&rng, limit: c.maxValueSize))
      if r < 5 {
        try c.removeObject(forKey: Pattern.key(i))
      } else if r < 12 {
        try c.setObject(v, forKey: Pattern.key(i), expires: .date(Date(timeIntervalSinceNow: -10)))
      } else if r < 20 {
        try c.setObject(v, forKey: Pattern.key(i), expires: .seconds(3600))
      } else if r < 65 {
        _ = try c.object(forKey: Pattern.key(i))
      } else {
        try c.setObject(v, forKey: Pattern.key(i))
      }
    }
  }

  /// What one case did.
  struct Outcome {
    var opened = false
    var thrown = 0
    var hits = 0
    var wrong = 0
    /// The operations that returned a wrong value.
    var wrongOps: Set<String> = []
    /// Damaged values read back that their checksum cannot tell from whole ones
    /// (`Pattern.isChecksumTwin`): counted, not failures.
    var twins = 0
    var repairedClean = true
    var readBack = true
    /// Whether the case's growth by a partition succeeded.
    var grew = false
  }

  /// Runs every public operation on each file. Prints `BEGIN path` before and
  /// `END path ...` after each, so that the test can name the case a crash hit.
  static func runCases(_ paths: [String]) -> Int32 {
    var wrongTotal = 0
    for path in paths {
      emit("BEGIN \(path)")
      let o = runCase(path)
      wrongTotal += o.wrong
      emit(
        "END \(path) opened=\(o.opened ? 1 : 0) thrown=\(o.thrown) hits=\(o.hits) wrong=\(o.wrong) twins=\(o.twins) repairedClean=\(o.repairedClean ? 1 : 0) readBack=\(o.readBack ? 1 : 0) grew=\(o.grew ? 1 : 0) wrongOps=\(o.wrongOps.sorted().joined(separator: ","))"
      )
    }
    return wrongTotal == 0 ? 0 : 2
  }

  static func runCase(_ path: String) -> Outcome {
    let run = CaseRun(path)
    run.readOnlyPasses()
    guard let cache = run.openWritable() else { return run.o }
    run.operations(cache, round: 0)
    // Half the cases grow the damaged file by a partition: a split copies entries out of
    // whatever the source holds, and its errors must be thrown, never trapped.
    if run.rng.below(2) == 0 { run.grow(cache) }
    run.attempt {
      _ = try cache.verify(repair: true)
      let after = try cache.verify()
      if !after.ok { run.o.repairedClean = false }
    }
    run.operations(cache, round: 1)
    run.attempt { try cache.removeAllObjects() }
    run.readBack(cache)
    run.operations(cache, round: 2)
    return run.o
  }

  /// One case of `runCases`: every public operation on one (damaged) file, what each did
  /// counted in `o`.
  final class CaseRun {
    let path: String
    var o = Outcome()
    var rng: SplitMix
    /// The writable handle's largest value (as it opened: before any growth).
    var limit = 0

    init(_ path: String) {
      self.path = path
      // Seeded by the file's name (which holds the case's seed): a case replays exactly.
      var fnv: UInt64 = 0xCBF2_9CE4_8422_2325
      for b in (path as NSString).lastPathComponent.utf8 { fnv = (fnv ^ UInt64(b)) &* 0x100_0000_01B3 }
      rng = SplitMix(fnv)
    }

    func attempt(_ body: () throws -> Void) {
      do { try body() } catch { o.thrown += 1 }
    }

    func check(_ v: [UInt8]?, _ i: Int, _ op: String = "get") {
      guard let v else { return }
      o.hits += 1
      guard !Pattern.isValid(v, index: i) else { return }
      if Pattern.isChecksumTwin(v, index: i) {
        o.twins += 1
        return
      }
      o.wrong += 1
      o.wrongOps.insert(op)
    }

    /// The key index of a key this run or the base wrote (`key-<i>-…`, or the one-letter
    /// keys of the read-back step), nil for anything else.
    func index(of key: String) -> Int? {
      if key.hasPrefix("key-") { return Int(key.split(separator: "-")[1]) }
      if key.utf8.count == 1, let b = key.utf8.first, (65..<85).contains(b) { return Int(b) - 65 }
      return nil
    }

    func checkByKey(_ key: String, _ v: [UInt8], _ op: String) { if let i = index(of: key) { check(v, i, op) } }

    /// The untyped tool API on the same file (what `mapped-cache` uses).
    func toolOperations(readOnly: Bool) {
      attempt {
        let f = try CacheFile(path: path, readOnly: readOnly)
        _ = f.info
        _ = f.tableFigures
        _ = f.attachedProcesses
        _ = f.statistics
        f.forEachEntry(values: true, includeExpired: true) { e in
          if let v = e.value, let k = String(validating: e.key, as: UTF8.self) {
            checkByKey(k, v, "CacheFile.forEachEntry")
          }
          return true
        }
        for _ in 0..<8 {
          let i = rng.below(keySpace)
          attempt { if let e = try f.get(Array(Pattern.key(i).utf8)) { check(e.value, i, "CacheFile.get") } }
        }
        attempt { _ = try f.set(Array(Pattern.key(1).utf8), Pattern.value(index: 1, version: 5, count: 40)) }
        attempt { _ = try f.delete(Array(Pattern.key(2).utf8)) }
      }
    }

    func iterate(_ c: SharedCache<[UInt8]>) {
      _ = c.allKeys
      attempt {
        try c.forEachObject(includeExpired: true) { k, v, _ in
          checkByKey(k, v, "forEachObject")
          return true
        }
      }
      attempt {
        let keys = (0..<16).map { _ in Pattern.key(rng.below(keySpace)) }
        for (k, v) in try c.objects(forKeys: keys) { checkByKey(k, v, "objects(forKeys:)") }
      }
    }

    /// Handles that judge values check checksums on read: then no damaged value may come
    /// back. A default handle (no read checksums: the fast path) must still never fault,
    /// whatever the bytes; it may hand back a value whose bytes were damaged in place.
    /// Then a read-only handle: it must never write to (or fault on) the mapping.
    func readOnlyPasses() {
      attempt {
        let fast = try SharedCache<[UInt8]>(
          path: path, capacity: 1 << 20, policy: OpenPolicy(readOnly: true, create: false))
        withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 16) { buf in
          for _ in 0..<40 {
            let k = Pattern.key(rng.below(keySpace))
            attempt { _ = try fast.copyBytes(forKey: k, into: buf) }
            attempt { _ = try fast.copyBytes(forKey: k, into: UnsafeMutableRawBufferPointer(rebasing: buf[0..<8])) }
            attempt { _ = try fast.withBytes(forKey: k) { $0.count } }
            attempt { _ = try fast.object(forKey: k, allowingExpired: true) }
            attempt { _ = try fast.object(forKey: k) }
          }
        }
      }
      attempt {
        let ro = try SharedCache<[UInt8]>(
          path: path, capacity: 1 << 20,
          policy: OpenPolicy(readOnly: true, create: false, verifyChecksumsOnRead: true))
        for _ in 0..<40 {
          let i = rng.below(keySpace)
          attempt { check(try ro.object(forKey: Pattern.key(i), allowingExpired: true), i) }
        }
        _ = ro.statistics
        iterate(ro)
        attempt { _ = try ro.verify() }
        attempt { try ro.setObject([1], forKey: "x") }
      }
      toolOperations(readOnly: true)
    }

    /// A writable handle that checks checksums on read (nil, counted, when it cannot open).
    func openWritable() -> SharedCache<[UInt8]>? {
      do {
        let cache = try SharedCache<[UInt8]>(
          path: path, capacity: 1 << 20, policy: OpenPolicy(create: false, verifyChecksumsOnRead: true))
        o.opened = true
        limit = cache.maxValueSize
        return cache
      } catch {
        o.thrown += 1
        return nil
      }
    }

    func operations(_ cache: SharedCache<[UInt8]>, round: Int) {
      _ = cache.statistics
      for _ in 0..<48 { randomOperation(cache, round: round) }
      // A few large values force eviction through whatever the logs hold.
      for _ in 0..<4 {
        let i = rng.below(keySpace)
        attempt { try cache.setObject(Pattern.value(index: i, version: 9, count: limit), forKey: Pattern.key(i)) }
      }
      attempt { _ = try cache.removeExpiredObjects() }
      attempt { try cache.setLimits(count: 100, cost: 200_000) }
      attempt { try cache.setLimits(count: 0, cost: 0) }
      _ = cache.statistics
      iterate(cache)
      attempt {
        let items = (0..<6).map { _ -> (key: String, value: [UInt8]) in
          let i = rng.below(keySpace)
          return (Pattern.key(i), Pattern.value(index: i, version: 11, count: Pattern.size(&rng, limit: limit)))
        }
        try cache.setObjects(items)
      }
      attempt { _ = try cache.verify() }
      toolOperations(readOnly: false)
    }

    /// One operation, picked at random, on a random key.
    func randomOperation(_ cache: SharedCache<[UInt8]>, round: Int) {
      let i = rng.below(keySpace)
      let k = Pattern.key(i)
      switch rng.below(12) {
      case 0, 1, 2: attempt { check(try cache.object(forKey: k), i) }
      case 3: attempt { check(try cache.object(forKey: k, allowingExpired: true), i) }
      case 4:
        attempt {
          if let (v, ver) = try cache.objectWithVersion(forKey: k) {
            check(v, i)
            _ = try cache.setObject(
              Pattern.value(index: i, version: 1_000_000 + UInt32(round), count: 50), forKey: k, ifVersion: ver)
          }
        }
      case 5: attempt { _ = try cache.withBytes(forKey: k) { check(Array($0), i) } }
      case 6:
        attempt {
          _ = try cache.expiry(forKey: k)
          _ = try cache.containsObject(forKey: k)
        }
      case 7, 8:
        attempt {
          try cache.setObject(
            Pattern.value(index: i, version: UInt32(rng.below(1 << 20)), count: Pattern.size(&rng, limit: limit)),
            forKey: k, expires: rng.below(4) == 0 ? .seconds(3600) : .never)
        }
      case 9: attempt { _ = try cache.add(Pattern.value(index: i, version: 7, count: 20), forKey: k) }
      case 10:
        attempt {
          _ = try cache.replace(Pattern.value(index: i, version: 8, count: 300), forKey: k)
          _ = try cache.touch(k, expires: .seconds(60))
        }
      default: attempt { _ = try cache.removeObject(forKey: k) }
      }
    }

    /// Grows the file by a partition, then reads.
    func grow(_ cache: SharedCache<[UInt8]>) {
      attempt {
        let before = cache.capacity
        o.grew = try cache.grow(toCapacity: before + before / max(1, cache.partitionCount)) > before
      }
      for _ in 0..<24 {
        let i = rng.below(keySpace)
        attempt { check(try cache.object(forKey: Pattern.key(i)), i, "get after grow") }
      }
    }

    /// After a repair and removeAll, the cache must work: what is set reads back.
    func readBack(_ cache: SharedCache<[UInt8]>) {
      do {
        // One-byte keys and values within the limit: valid for any geometry the file may have.
        for i in 0..<20 {
          let k = String(UnicodeScalar(UInt8(65 + i)))
          let v = Pattern.value(index: i, version: 42, count: min(10 + i * 37, limit))
          try cache.setObject(v, forKey: k)
          if try cache.object(forKey: k) != v { o.readBack = false }
        }
      } catch {
        o.readBack = false
        o.thrown += 1
      }
    }
  }
}

// MARK: Lock holder

enum LockHolder {
  /// Takes the write lock through the test hook, creates `ready` once it holds it,
  /// and keeps it until the test deletes `ready` or `seconds` pass (meanwhile the test
  /// stops, continues or kills this process). `oddKey`'s slot is left mid-write as a set
  /// leaves it, or with `midMove`, mid-move as an eviction step leaves it.
  static func run(path: String, seconds: Double, ready: String, oddKey: String?, midMove: Bool) throws -> Int32 {
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(create: false))
    let hold = {
      _ = FileManager.default.createFile(atPath: ready, contents: Data("locked\n".utf8))
      let end = Date().addingTimeInterval(seconds)
      while Date() < end && access(ready, F_OK) == 0 { usleep(5_000) }
    }
    if midMove, let oddKey {
      guard try c._holdWriteLockMidMove(key: oddKey, hold) else {
        emit("no-move")
        return 1
      }
    } else {
      try c._holdWriteLock(oddSlotForKey: oddKey, hold)
    }
    emit("released")
    return 0
  }
}

// MARK: Other children

enum ReliabilityOps {
  static func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
  }

  /// `count` reads of one key (through a read-only handle with `readOnly`); prints hits,
  /// misses and the slowest read.
  static func readLoop(path: String, key: String, count: Int, readOnly: Bool) throws -> Int32 {
    let c = try SharedCache<[UInt8]>(
      path: path, capacity: 1 << 20, policy: OpenPolicy(readOnly: readOnly, create: false))
    var hits = 0
    var misses = 0
    var worst: UInt64 = 0
    let start = monotonicNanoseconds()
    for _ in 0..<count {
      let t = monotonicNanoseconds()
      if try c.object(forKey: key) != nil { hits += 1 } else { misses += 1 }
      worst = max(worst, monotonicNanoseconds() - t)
    }
    emit(
      "hits=\(hits) misses=\(misses) worstus=\(worst / 1000) totalms=\((monotonicNanoseconds() - start) / 1_000_000)")
    return 0
  }

  /// One set; prints the monotonic time (shared by all processes) when it completed.
  static func setTimed(path: String, key: String) throws -> Int32 {
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(create: false))
    emit("start=\(monotonicNanoseconds())")
    try c.setObject(Array("written".utf8), forKey: key)
    emit("done=\(monotonicNanoseconds())")
    return 0
  }

  /// Mixed gets and sets for `seconds`, every read checked; prints counts.
  static func hammer(path: String, seconds: Double, seed: UInt64) throws -> Int32 {
    let c = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20, policy: OpenPolicy(create: false))
    var rng = SplitMix(seed)
    var gets = 0
    var sets = 0
    var hits = 0
    var wrong = 0
    let end = monotonicNanoseconds() + UInt64(seconds * 1e9)
    var version: UInt32 = 0
    // Only operations inside the window count: a starved worker reports zero.
    while monotonicNanoseconds() < end {
      for _ in 0..<64 {
        let i = rng.below(2000)
        if rng.below(10) < 8 {
          gets += 1
          if let v = try c.object(forKey: Pattern.key(i)) {
            hits += 1
            if !Pattern.isValid(v, index: i) { wrong += 1 }
          }
        } else {
          version &+= 1
          try c.setObject(Pattern.value(index: i, version: version, count: 16 + rng.below(600)), forKey: Pattern.key(i))
          sets += 1
        }
      }
    }
    emit("gets=\(gets) sets=\(sets) hits=\(hits) wrong=\(wrong)")
    return wrong == 0 ? 0 : 2
  }

  /// A worker of the growth test, for `seconds`: worker `id` owns keys `id * 100_000 +
  /// 0..<800`, sets them with rising versions and reads each back expecting exactly the
  /// version it last wrote (an older one is `stale`, none `missing`); it also reads the
  /// other workers' keys, checking every value whole. The cache is large enough that
  /// nothing is evicted. Prints counts; exits 2 on any wrong, stale or missing read.
  static func growWorker(path: String, seconds: Double, id: Int, workers: Int) throws -> Int32 {
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(create: false))
    var rng = SplitMix(UInt64(id) &+ 77)
    let keys = 800
    var versions = [UInt32](repeating: 0, count: keys)
    var gets = 0
    var sets = 0
    var wrong = 0
    var stale = 0
    var missing = 0
    let end = monotonicNanoseconds() + UInt64(seconds * 1e9)
    func index(_ w: Int, _ k: Int) -> Int { w * 100_000 + k }
    while monotonicNanoseconds() < end {
      for _ in 0..<64 {
        let k = rng.below(keys)
        let r = rng.below(10)
        if r < 3 || versions[k] == 0 {
          versions[k] &+= 1
          let i = index(id, k)
          try c.setObject(
            Pattern.value(index: i, version: versions[k], count: 16 + rng.below(200)), forKey: Pattern.key(i))
          sets += 1
        } else if r < 7 {
          gets += 1
          let i = index(id, k)
          guard let v = try c.object(forKey: Pattern.key(i)) else {
            missing += 1
            continue
          }
          if !Pattern.isValid(v, index: i) {
            wrong += 1
          } else if v.count >= 8, Pattern.version(v) != versions[k] {
            stale += 1
          }
        } else {
          gets += 1
          let i = index(rng.below(workers), k)
          if let v = try c.object(forKey: Pattern.key(i)), !Pattern.isValid(v, index: i) { wrong += 1 }
        }
      }
    }
    emit("gets=\(gets) sets=\(sets) wrong=\(wrong) stale=\(stale) missing=\(missing)")
    return wrong + stale + missing == 0 ? 0 : 2
  }

  static func fdCount() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }
  static func mapCount() -> Int {
    ((try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8)) ?? "").split(separator: "\n").count
  }
  /// Anonymous resident memory in KiB (excludes the shared mapping's pages).
  static func rssAnonKiB() -> Int {
    let s = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in s.split(separator: "\n") where line.hasPrefix("RssAnon:") {
      return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }
    return -1
  }

  /// Open/close loops (more rounds than process slots, so registrations must be
  /// recycled) and a long run of operations; prints descriptors, mappings and
  /// anonymous memory before and after.
  static func leakCheck(path: String, rounds: Int, ops: Int) throws -> Int32 {
    func round(_ r: Int) throws {
      let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
      try c.setObject(Pattern.value(index: r, version: 1, count: 100), forKey: Pattern.key(r))
      _ = try c.object(forKey: Pattern.key(r))
      _ = try c.verify()
      let ro = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(readOnly: true))
      _ = try ro.object(forKey: Pattern.key(r))
    }
    try round(0)  // load everything once before counting
    let fd0 = fdCount()
    let maps0 = mapCount()
    for r in 1...rounds { try round(r) }
    let fd1 = fdCount()
    let maps1 = mapCount()
    emit("fd0=\(fd0) fd1=\(fd1) maps0=\(maps0) maps1=\(maps1)")

    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    var rng = SplitMix(7)
    func work(_ n: Int) throws {
      for step in 0..<n {
        let i = rng.below(5000)
        if step % 4 == 0 {
          try c.setObject(
            Pattern.value(index: i, version: UInt32(step), count: rng.below(1000)), forKey: Pattern.key(i))
        } else {
          _ = try c.object(forKey: Pattern.key(i))
        }
      }
    }
    try work(ops / 10)
    let rss0 = rssAnonKiB()
    try work(ops)
    let rss1 = rssAnonKiB()
    emit("rss0=\(rss0) rss1=\(rss1)")
    return 0
  }

  static func errorName(_ e: Error) -> String {
    guard let ce = e as? CacheError else { return "other(\(e))" }
    switch ce {
    case .readOnly: return "readOnly"
    case .diskFull: return "diskFull"
    case .notACacheFile: return "notACacheFile"
    case .corrupted: return "corrupted"
    case .unsafeFile: return "unsafeFile"
    case .incompatibleFormat: return "incompatibleFormat"
    case .system(let s): return "system(\(s.errno))"
    default: return "\(ce)"
    }
  }

  /// Opens a cache prepared by the test (keys `ro-0`…`ro-9` = `value-i`), reads, then
  /// tries every write; prints what happened to each.
  /// Opens (or creates) `path` with `OpenPolicy.sharedWithGroup(group)` (`-`: the
  /// default policy), stores KEY = "by-UID", reads every key of the form "by-*" back.
  /// Prints `open=ok|ERROR`, `writable=`, `set=ok|ERROR`, `seen=KEY=VALUE,...`.
  static func groupProbe(path: String, group: String, key: String) -> Int32 {
    let c: SharedCache<String>
    do {
      c = try SharedCache<String>(
        path: path, capacity: 1 << 20,
        policy: group == "-" ? OpenPolicy() : .sharedWithGroup(group))
    } catch {
      emit("open=\(errorName(error))")
      emit("why=\(error)")
      return 0
    }
    emit("open=ok")
    emit("writable=\(c.isWritable)")
    do {
      try c.setObject("by-\(getuid())", forKey: key)
      emit("set=ok")
    } catch { emit("set=\(errorName(error))") }
    var seen: [String] = []
    for k in ["web", "job", "other"] { if let v = try? c.object(forKey: k) { seen.append("\(k)=\(v)") } }
    emit("seen=\(seen.joined(separator: ","))")
    return 0
  }

  static func readOnlyProbe(path: String, readOnlyPolicy: Bool) -> Int32 {
    let c: SharedCache<String>
    do {
      c = try SharedCache<String>(
        path: path, capacity: 1 << 20, policy: OpenPolicy(readOnly: readOnlyPolicy, create: false))
    } catch {
      emit("open=\(errorName(error))")
      return 0
    }
    emit("open=ok")
    emit("writable=\(c.isWritable)")
    var good = 0
    for i in 0..<10 where (try? c.object(forKey: "ro-\(i)")) == "value-\(i)" { good += 1 }
    emit("reads=\(good)")
    emit("entries=\(c.statistics.entries)")
    emit("verify=\((try? c.verify().ok) == true)")
    let writes: [(String, () throws -> Void)] = [
      ("set", { try c.setObject("x", forKey: "ro-0") }),
      ("add", { _ = try c.add("x", forKey: "new") }),
      ("replace", { _ = try c.replace("x", forKey: "ro-1") }),
      ("touch", { _ = try c.touch("ro-2", expires: .seconds(5)) }),
      ("remove", { _ = try c.removeObject(forKey: "ro-3") }),
      ("removeAll", { try c.removeAllObjects() }),
      ("removeExpired", { _ = try c.removeExpiredObjects() }),
      ("setLimits", { try c.setLimits(count: 5) }),
      ("verifyRepair", { _ = try c.verify(repair: true) }),
    ]
    for (name, body) in writes {
      do {
        try body()
        emit("\(name)=ok")
      } catch { emit("\(name)=\(errorName(error))") }
    }
    var after = 0
    for i in 0..<10 where (try? c.object(forKey: "ro-\(i)")) == "value-\(i)" { after += 1 }
    emit("readsAfter=\(after)")
    return 0
  }

  /// Creates a cache (under an optional RLIMIT_FSIZE, with SIGXFSZ ignored), then, if
  /// that worked, writes through the whole log several times.
  static func create(path: String, capacity: Int, fileSizeLimit: Int?) -> Int32 {
    if let fileSizeLimit {
      signal(SIGXFSZ, SIG_IGN)
      var rl = rlimit(rlim_cur: rlim_t(fileSizeLimit), rlim_max: rlim_t(fileSizeLimit))
      if setrlimit(Int32(RLIMIT_FSIZE.rawValue), &rl) != 0 {
        emit("setrlimit=failed")
        return 1
      }
    }
    do {
      let c = try SharedCache<[UInt8]>(path: path, capacity: capacity)
      emit("create=ok")
      var n = 0
      for i in 0..<(capacity / 300) {
        try c.setObject(Pattern.value(index: i, version: 1, count: 600), forKey: Pattern.key(i))
        n += 1
      }
      emit("writes=\(n) verify=\(try c.verify().ok)")
    } catch {
      emit("create=\(errorName(error))")
    }
    return 0
  }

  /// Writes to an existing cache for `seconds`; prints how many writes and verify.
  static func fill(path: String, seconds: Double) throws -> Int32 {
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(create: false))
    let end = monotonicNanoseconds() + UInt64(seconds * 1e9)
    var n = 0
    var wrong = 0
    var rng = SplitMix(3)
    while monotonicNanoseconds() < end || n < 1000 {
      let i = rng.below(4000)
      try c.setObject(Pattern.value(index: i, version: UInt32(n), count: rng.below(2000)), forKey: Pattern.key(i))
      if let v = try c.object(forKey: Pattern.key(i)), !Pattern.isValid(v, index: i) { wrong += 1 }
      n += 1
    }
    emit("writes=\(n) wrong=\(wrong) verify=\(try c.verify().ok)")
    return 0
  }

  static func openOnly(path: String, readOnlyPolicy: Bool) -> Int32 {
    do {
      _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(readOnly: readOnlyPolicy))
      emit("open=ok")
    } catch {
      emit("open=\(errorName(error))")
    }
    return 0
  }
}
