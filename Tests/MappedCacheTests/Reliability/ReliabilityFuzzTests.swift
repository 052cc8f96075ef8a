import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// Fuzzing the file format: a valid, filled cache file (in one partition, in two, grown
/// to three, or left by a grower killed mid-split or once it extended the file) is
/// damaged in many ways (byte
/// flips, zeroed and 0xFF ranges, hostile header values with and without a recomputed
/// layout fingerprint, a valid header of another geometry over the old contents,
/// hostile partition words, bucket words and tags, record headers, truncation,
/// extension), and a
/// child process runs every public operation on each damaged copy (`mc-test-helper
/// fuzz-case`: open read-only and read-write, get in all its forms, set, add, replace,
/// compare-and-swap, touch, remove, bulk get/set, iteration, removeAll, removeExpired,
/// limits, statistics, verify, in half the cases a growth by one partition,
/// verify(repair:), the same again, and the untyped
/// `CacheFile` API). Acceptable: the child exits 0, every error thrown and handled.
/// A signal, a timeout or another exit status fails the case and prints its seed; so do
/// a value that some set did not write whole for its key (values are self-describing),
/// unless its damage is one the record's 16-bit checksum cannot see (its checksum
/// equals the written value's, as for one damaged value in 65,536: counted as a
/// "checksum twin" and printed, not failed),
/// a file that `verify` still finds broken after `verify(repair: true)`, and a repaired
/// cache that does not read back what is set into it.
///
/// Quick in CI (`MC_FUZZ_CASES`, default 240; `MC_FUZZ_JOBS` children at a time, default
/// 2); long on demand: `MC_FUZZ_CASES=50000 scripts/fuzz-long.sh`.
/// Replay one case: `MC_FUZZ_SEED=0x... swift test --filter ReliabilityFuzzTests`
/// (add `MC_FUZZ_KEEP=1` to keep the damaged file under /dev/shm).
@Suite(.serialized) struct ReliabilityFuzzTests {
  static let env = ProcessInfo.processInfo.environment

  @Test func damagedFilesNeverCrashAnOperation() throws {
    let env = Self.env
    let count = Int(env["MC_FUZZ_CASES"] ?? "") ?? 240
    let baseSeed =
      env["MC_FUZZ_SEED_BASE"].flatMap { UInt64($0.replacingOccurrences(of: "0x", with: ""), radix: 16) }
      ?? 0x5EED_0000_0000_0000
    let keep = env["MC_FUZZ_KEEP"] == "1"
    let batchSize = Int(env["MC_FUZZ_BATCH"] ?? "") ?? 30
    let workers = max(1, Int(env["MC_FUZZ_JOBS"] ?? "") ?? 2)
    let seeds: [UInt64]
    if let one = env["MC_FUZZ_SEED"], let s = UInt64(one.replacingOccurrences(of: "0x", with: ""), radix: 16) {
      seeds = [s]
    } else {
      // The base is mixed before the index is added: bases that differ by a little
      // (0xC0FFEE4, 0xC0FFEE5) would otherwise name the same cases shifted by one.
      let start = FileMutator.mix(baseSeed)
      seeds = (0..<count).map { FileMutator.mix(start &+ UInt64($0)) }
    }

    let dir = "/dev/shm/mcfuzz-\(getpid())-\(UUID().uuidString.prefix(6))"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    defer { if !keep { try? FileManager.default.removeItem(atPath: dir) } }
    // Five bases (`Fuzz.buildBase`): one partition; two; one grown to three; one whose
    // grower was killed in the middle of its first split (partition 1 marked as filled
    // from 0, an entry copied, both partitions' locks held by the dead grower with their
    // intent words set); and one whose grower was killed once it had extended the file
    // (unused bytes past the size the header gives).
    var mutators: [FileMutator] = []
    var baseReports: [String] = []
    for variant in 0..<5 {
      let basePath = dir + "/base\(variant).mcache"
      let built = try ChildProcess.run(
        TestFiles.binary("mc-test-helper"), ["fuzz-base", basePath, "1", "\(variant)"], timeout: 120)
      try #require(built.status == 0 && !built.signaled, "base: \(built.stdout) \(built.stderr)")
      if variant >= 3 {
        try GrowthTests.killGrower(basePath, capacity: "3MiB", at: variant == 3 ? "moving" : "extended")
      }
      let base = try [UInt8](Data(contentsOf: URL(fileURLWithPath: basePath)))
      let m = try FileMutator(
        base: base, name: ["partitions", "partitions", "grown", "mid-split", "extended"][variant])
      mutators.append(m)
      baseReports.append("\(m.name): " + built.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    if env["MC_FUZZ_DRY"] == "1" {
      // Only generate the damaged images (checks the mutator itself over many seeds).
      for seed in seeds {
        let m = mutators[Int((seed >> 7) % UInt64(mutators.count))]
        var bytes = m.base
        _ = m.mutate(&bytes, seed: seed)
      }
      print("fuzz: dry run, \(seeds.count) damaged images generated")
      return
    }
    let started = Date()
    let tally = Tally()
    let batches = stride(from: 0, to: seeds.count, by: batchSize).map {
      Array(seeds[$0..<min($0 + batchSize, seeds.count)])
    }
    let allMutators = mutators
    let total = seeds.count
    DispatchQueue.concurrentPerform(iterations: workers) { w in
      for b in stride(from: w, to: batches.count, by: workers) {
        runBatch(batches[b], mutators: allMutators, dir: dir, keep: keep, tally: tally)
        if total >= 5000 {
          // Long runs report as they go, so that a stopped run still has its numbers.
          let t = tally.snapshot()
          if t.cases / 1000 != (t.cases - batches[b].count) / 1000 {
            print(
              "fuzz progress: \(t.cases) cases, \(t.failures.count) failures, \(Int(Date().timeIntervalSince(started))) s"
            )
            for f in t.failures { print("fuzz progress FAILURE \(f)") }
          }
        }
      }
    }
    let t = tally.snapshot()
    let seconds = Date().timeIntervalSince(started)
    print(
      """
      fuzz: bases: \(baseReports.joined(separator: "; "))
      fuzz: \(t.cases) cases in \(String(format: "%.1f", seconds)) s (\(workers) jobs): opened \(t.opened), \
      errors thrown \(t.thrown), reads checked \(t.hits), grown by a partition \(t.grown), failures \(t.failures.count), \
      not clean after repair \(t.notClean.count), read-back failures after repair \(t.readBackFailed.count), \
      checksum twins \(t.twins.count)
      """)
    for (category, n) in t.byCategory.sorted(by: { $0.key < $1.key }) { print("fuzz:   \(category): \(n)") }
    for f in t.failures.prefix(30) { print("fuzz FAILURE \(f)") }
    for f in t.notClean.prefix(10) { print("fuzz note: verify not clean after repair: \(f)") }
    for f in t.twins.prefix(10) { print("fuzz note: a damaged value its checksum cannot see, read back: \(f)") }
    #expect(t.cases == seeds.count)
    // Half the cases try a growth: some must have made one (a run of a few cases may not).
    #expect(seeds.count < 40 || t.grown > 0, "no damaged file grew")
    #expect(t.failures.isEmpty, "\(t.failures.count) failing cases, first: \(t.failures.first ?? "")")
    // A repaired cache must be usable: what is set afterwards reads back.
    #expect(t.readBackFailed.isEmpty, "read-back after repair failed: \(t.readBackFailed.prefix(5))")
    #expect(t.notClean.isEmpty, "verify after verify(repair:) not clean: \(t.notClean.prefix(5))")
  }

  final class Tally: @unchecked Sendable {
    struct State {
      var cases = 0, opened = 0, thrown = 0, hits = 0, grown = 0
      /// Damaged values read back whose checksum equals the written value's (a 16-bit
      /// checksum passes one damaged value in 65,536): counted, not failures.
      var twins: [String] = []
      var failures: [String] = []
      var notClean: [String] = []
      var readBackFailed: [String] = []
      var byCategory: [String: Int] = [:]
    }
    private let lock = NSLock()
    private var state = State()
    func update(_ body: (inout State) -> Void) { lock.withLock { body(&state) } }
    func snapshot() -> State { lock.withLock { state } }
  }

  /// Writes one damaged copy per seed, runs them in one child, and re-runs what a
  /// crash left unrun in a new child.
  func runBatch(_ batch: [UInt64], mutators: [FileMutator], dir: String, keep: Bool, tally: Tally) {
    var pending: [(seed: UInt64, path: String, what: String)] = []
    for seed in batch {
      let mutator = mutators[Int((seed >> 7) % UInt64(mutators.count))]
      var bytes = mutator.base
      let what = "\(mutator.name) " + mutator.mutate(&bytes, seed: seed)
      let path = "\(dir)/case-\(String(seed, radix: 16)).mcache"
      guard RelSupport.tryWriteFile(path, bytes) else {
        tally.update { $0.failures.append("seed=0x\(String(seed, radix: 16)): cannot write case file") }
        continue
      }
      if keep {
        // A pristine copy: the run changes the case file. Replay: cp it and run
        // `mc-test-helper fuzz-case COPY` (the case's name seeds its operations).
        try? FileManager.default.copyItem(atPath: path, toPath: path + ".orig")
      }
      pending.append((seed, path, what))
      tally.update { $0.byCategory[String(what.prefix { $0 != ":" }), default: 0] += 1 }
    }
    while !pending.isEmpty {
      let timeout = 30.0 + 2.0 * Double(pending.count)
      let r: ChildProcess.Result
      do {
        r = try ChildProcess.run(
          TestFiles.binary("mc-test-helper"), ["fuzz-case"] + pending.map(\.path), timeout: timeout)
      } catch {
        tally.update { $0.failures.append("cannot start helper: \(error)") }
        return
      }
      var finished = Set<String>()
      var begun: String? = nil
      for line in r.stdout.split(separator: "\n") {
        let parts = line.split(separator: " ")
        guard parts.count >= 2 else { continue }
        let path = String(parts[1])
        if parts[0] == "BEGIN" {
          begun = path
          continue
        }
        guard parts[0] == "END", let c = pending.first(where: { $0.path == path }) else { continue }
        finished.insert(path)
        begun = nil
        var f: [String: Int] = [:]
        var wrongOps = ""
        for p in parts.dropFirst(2) {
          let kv = p.split(separator: "=")
          if kv.count == 2 { f[String(kv[0])] = Int(kv[1]) }
          if kv.count == 2 && kv[0] == "wrongOps" { wrongOps = String(kv[1]) }
        }
        let name = "seed=0x\(String(c.seed, radix: 16)) (\(c.what))"
        tally.update {
          $0.cases += 1
          $0.opened += f["opened"] ?? 0
          $0.thrown += f["thrown"] ?? 0
          $0.hits += f["hits"] ?? 0
          $0.grown += f["grew"] ?? 0
          if (f["twins"] ?? 0) != 0 { $0.twins.append("\(name): \(f["twins"]!)") }
          if (f["wrong"] ?? 0) != 0 { $0.failures.append("\(name): \(f["wrong"]!) wrong values read, by \(wrongOps)") }
          if f["repairedClean"] == 0 { $0.notClean.append(name) }
          if f["readBack"] == 0 { $0.readBackFailed.append(name) }
        }
        if !keep { unlink(path) }
      }
      let unfinished = pending.filter { !finished.contains($0.path) }
      if unfinished.isEmpty { break }
      // The child died or hung inside the case it began last.
      let culprit = unfinished.first(where: { $0.path == begun }) ?? unfinished[0]
      let how = r.signaled ? "killed by signal \(r.status)" : "exit \(r.status) (timeout \(Int(timeout)) s or crash)"
      // The trap's message and the first frames inside the library, when there is a backtrace.
      let lines = r.stderr.split(separator: "\n")
      let interesting = lines.filter { $0.contains("Fatal error") || $0.contains("Sources/MappedCache/") }.prefix(4)
      let tail = (interesting.isEmpty ? lines.suffix(3) : interesting)
        .map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " | ")
      tally.update {
        $0.cases += 1
        $0.failures.append("seed=0x\(String(culprit.seed, radix: 16)) (\(culprit.what)): \(how); stderr: \(tail)")
      }
      if !keep { unlink(culprit.path) }
      pending = unfinished.filter { $0.path != culprit.path }
    }
  }
}

/// Damages a copy of a valid cache file, deterministically from a seed.
struct FileMutator: Sendable {
  let base: [UInt8]
  /// The base's kind and its partition count (published), as cases are tallied.
  let name: String
  let layout: Layout
  let header: HeaderFields
  /// Occupied slots in the base file (the file offsets of their buckets, and their
  /// slot numbers), and their records' file offsets.
  let liveSlots: [(bucket: Int, slot: Int)]
  let liveRecords: [Int]

  init(base: [UInt8], name: String) throws {
    self.base = base
    // Through line 6: a grown file's size and partition count are there.
    header = HeaderFields(bytes: Array(base[0..<Format.headerPage]))
    layout = try Layout(header: header, actualFileSize: base.count)
    self.name = name + String(layout.partitionCount)
    var slots: [(Int, Int)] = []
    var records: [Int] = []
    for p in 0..<layout.partitionCount {
      let part = layout.partitionsOffset + p * layout.partitionBytes
      let groups = Int(Self.get64(base, part + Format.PartitionOffset.geometry) & 0xFFFF_FFFF)
      for g in 0..<groups {
        for bucket in 0..<Format.bucketsPerGroup {
          let b = part + layout.partitionBytes - (g + 1) * Format.groupBytes + bucket * Format.bucketBytes
          for s in 0..<Format.slotsPerBucket where Self.get64(base, b + Format.BucketOffset.tags + 2 * s) & 0xFFFF != 0
          {
            slots.append((b, s))
            records.append(
              part + Int(Self.get64(base, b + Format.BucketOffset.words + 4 * s) & UInt64(Format.offsetMask)))
          }
        }
      }
      // The main log's free records too (`FreeLists`: their links are damaged like keys).
      for c in 0..<FreeLists.classCount {
        var at = Int(
          Self.get64(base, part + Format.PartitionOffset.freeHeads + 8 * (c / 2)) >> UInt64(32 * (c % 2)) & 0xFFFF_FFFF)
        for _ in 0..<64 where at >= Format.PartitionOffset.dataStart && at + 32 <= layout.partitionBytes {
          records.append(part + at)
          let form = Int(base[part + at] >> 4) & 3
          let next = part + at + RecordFormat.headerBytes(form: UInt8(form), expiry: false) + 5
          at = Int(Self.get64(base, next) & 0xFFFF_FFFF)
        }
      }
    }
    liveSlots = slots
    liveRecords = records
  }

  static func mix(_ x: UInt64) -> UInt64 {
    var z = x &+ 0x9E37_79B9_7F4A_7C15
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  struct Rng {
    var s: UInt64
    mutating func next() -> UInt64 {
      s = FileMutator.mix(s)
      return s
    }
    mutating func below(_ n: Int) -> Int { n <= 0 ? 0 : Int(next() % UInt64(n)) }
    mutating func pick<T>(_ a: [T]) -> T { a[below(a.count)] }
  }

  static func get64(_ b: [UInt8], _ o: Int) -> UInt64 {
    var v: UInt64 = 0
    for i in 0..<8 where o + i < b.count { v |= UInt64(b[o + i]) << (8 * UInt64(i)) }
    return v
  }
  static func put(_ b: inout [UInt8], _ o: Int, _ v: UInt64, bytes: Int = 8) {
    for i in 0..<bytes where o + i >= 0 && o + i < b.count {
      b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))
    }
  }

  /// A partition's file offset.
  func partition(_ p: Int) -> Int { layout.partitionsOffset + p * layout.partitionBytes }

  /// Hostile 64-bit values: extremes, partition-relative offsets, near-misses.
  func hostile(_ r: inout Rng) -> UInt64 {
    let l = layout
    let choices: [UInt64] = [
      0, 1, 7, 8, 9, UInt64.max, UInt64.max - 7, 1 << 63, (1 << 63) - 8, 1 << 62, 1 << 32, 1 << 31, 0xFFFF_FFFF,
      UInt64(l.fileSize), UInt64(l.partitionBytes), UInt64(l.partitionBytes - 1), UInt64(l.partitionBytes + 8),
      UInt64(l.smallBase), UInt64(l.mainBase), UInt64(l.mainBase - 1), UInt64(l.maxGroups), UInt64(l.maxGroups + 1),
      UInt64(Format.PartitionOffset.dataStart - 1), 1 << 32 | UInt64(l.mainBase), UInt64(l.indexLow(groups: 1)),
      UInt64(Int.max), r.next(), r.next() & 0xFFFF_FFFF, r.next() % UInt64(l.partitionBytes),
      UInt64(r.below(4)) << 32 | (r.next() % UInt64(l.partitionBytes)),
    ]
    return r.pick(choices)
  }

  /// A hostile Int for a header field that `HeaderFields.encoded()` writes in `bits` bits.
  func hostileInt(_ r: inout Rng, current: Int, bits: Int) -> Int {
    let cap = bits == 32 ? Int(UInt32.max) : Int.max
    // Wrapping: `current` may already be hostile (an earlier damage in the same case).
    let choices = [
      0, 1, 8, current &- 8, current &- 1, current &+ 1, current &+ 8, current &* 2, current / 2,
      cap, cap / 2, 1 << 31, Int(UInt32.max), layout.fileSize, layout.fileSize * 2,
      1 << 40, 1 << 56, r.below(1 << 20), r.below(layout.fileSize) & ~7,
    ]
    return min(max(r.pick(choices), 0), cap)
  }

  /// A region-biased range: the header, the process table, a partition's header lines,
  /// its logs, its index, or anywhere.
  func range(_ r: inout Rng, maxLength: Int) -> Range<Int> {
    let l = layout
    let p = partition(r.below(l.partitionCount))
    let low = p + l.partitionBytes - Int(Self.get64(base, p) & 0xFFFF_FFFF) * Format.groupBytes
    let regions = [
      0..<256, 256..<Format.headerPage, Format.headerPage..<l.headerBytes,
      p..<(p + Format.PartitionOffset.dataStart), (p + l.smallBase)..<(p + l.mainBase),
      (p + l.mainBase)..<max(p + l.mainBase + 1, low),
      max(p, min(low, p + l.partitionBytes - 1))..<(p + l.partitionBytes), 0..<l.fileSize,
    ]
    let reg = r.pick(regions)
    let start = reg.lowerBound + r.below(reg.count)
    let len = 1 + r.below(maxLength)
    return start..<min(start + len, base.count)
  }

  /// Applies one damage chosen by `seed`; returns a description (category first).
  func mutate(_ b: inout [UInt8], seed: UInt64) -> String {
    var r = Rng(s: seed)
    let category = r.below(14)
    if category == 13 {
      var parts: [String] = []
      // Damage in place first; a size change (which moves the end) only last.
      for _ in 0..<(2 + r.below(3)) { parts.append(apply(r.pick([0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12]), &b, &r)) }
      if r.below(4) == 0 { parts.append(apply(r.pick([9, 10]), &b, &r)) }
      return "combo: " + parts.joined(separator: "; ")
    }
    return apply(category, &b, &r)
  }

  private func apply(_ category: Int, _ b: inout [UInt8], _ r: inout Rng) -> String {
    switch category {
    case 0:
      let n = 1 + r.below(64)
      let meta = r.below(2) == 0
      for _ in 0..<n {
        // With `meta`: in the header, a partition's header lines or its index.
        let o = meta ? r.pick([r.below(layout.headerBytes), range(&r, maxLength: 1).lowerBound]) : r.below(b.count)
        guard o < b.count else { continue }
        b[o] ^= UInt8(1 + r.below(255))
      }
      return "flips: \(n) bytes\(meta ? " in headers/index" : "")"
    case 1, 2:
      let rg = range(&r, maxLength: r.below(4) == 0 ? 65536 : 512)
      let v: UInt8 = category == 1 ? 0 : 0xFF
      for o in rg where o < b.count { b[o] = v }
      return "\(category == 1 ? "zeros" : "0xFF"): [\(rg.lowerBound), \(rg.upperBound))"
    case 3: return headerRaw(&b, &r)
    case 4: return headerFingerprinted(&b, &r)
    case 5: return reshape(&b, &r)
    case 6: return stateWords(&b, &r)
    case 7: return slots(&b, &r)
    case 8: return records(&b, &r)
    case 9:
      let l = layout
      let choices = [
        0, 1, 8, 100, 255, 256, 4096, l.headerBytes, l.partitionsOffset + 100, partition(0) + l.mainBase,
        b.count - 4096, b.count - 8, b.count - 1, r.below(b.count),
      ]
      let n = max(0, min(r.pick(choices), b.count))
      b.removeLast(b.count - n)
      return "truncate: to \(n) bytes"
    case 10:
      let n = r.pick([1, 8, 4096, 65536, 1 << 20])
      let random = r.below(2) == 0
      b.append(contentsOf: (0..<n).map { _ in random ? UInt8(truncatingIfNeeded: r.next()) : 0 })
      var what = "extend: +\(n) \(random ? "random" : "zero") bytes"
      if r.below(2) == 0, b.count >= 256 {
        // And a header that claims the new size (fingerprint recomputed).
        var h = HeaderFields(bytes: Array(b[0..<256]))
        h.fileSize = b.count
        writeHeader(&b, h)
        what += ", header claims it"
      }
      return what
    case 11:
      let i = r.below(layout.procCount)
      return changes("process-table", &r, upTo: 3) { r in
        let field = r.pick([
          Format.ProcessEntryOffset.generation, Format.ProcessEntryOffset.pid, Format.ProcessEntryOffset.hits,
          Format.ProcessEntryOffset.misses, Format.ProcessEntryOffset.openedMs,
        ])
        let v = hostile(&r)
        Self.put(&b, Format.headerPage + i * Format.procEntryBytes + field, v)
        return "proc \(i)+\(field)=\(v)"
      }
    default:
      let from = range(&r, maxLength: 4096)
      let to = r.below(b.count)
      for (k, o) in from.enumerated() where to + k < b.count { b[to + k] = b[o] }
      return "copy: [\(from.lowerBound), \(from.upperBound)) to \(to)"
    }
  }

  /// Hostile values in the header's identity fields, the fingerprint left stale.
  private func headerRaw(_ b: inout [UInt8], _ r: inout Rng) -> String {
    let fields: [(Int, Int)] = [
      (Format.HeaderOffset.magic, 8), (Format.HeaderOffset.version, 4), (Format.HeaderOffset.headerBytes, 4),
      (Format.HeaderOffset.fileSize, 8),
      (Format.HeaderOffset.partitionCount, 8), (Format.HeaderOffset.partitionBytes, 8),
      (Format.HeaderOffset.partitionsOffset, 8),
      (Format.HeaderOffset.smallBytes, 8), (Format.HeaderOffset.maxCapacity, 8), (Format.HeaderOffset.maxKey, 4),
      (Format.HeaderOffset.maxValue, 4),
      (Format.HeaderOffset.typeFingerprint, 8), (Format.HeaderOffset.procOffset, 8), (Format.HeaderOffset.procCount, 4),
      (Format.HeaderOffset.layoutFingerprint, 8),
    ]
    let (o, n) = r.pick(fields)
    let v = hostile(&r)
    Self.put(&b, o, v, bytes: n)
    return "header-raw: field@\(o) = \(v)"
  }

  /// Hostile values behind a valid fingerprint: only the layout checks stand in the way.
  private func headerFingerprinted(_ b: inout [UInt8], _ r: inout Rng) -> String {
    var h = HeaderFields(bytes: Array(b[0..<256]))
    // The fields a hostile value goes into, and their widths in bits.
    let fields: [(String, WritableKeyPath<HeaderFields, Int>, Int)] = [
      ("headerBytes", \.headerBytes, 32),
      ("fileSize", \.fileSize, 64),
      ("partitionCount", \.partitionCount, 64),
      ("partitionBytes", \.partitionBytes, 64),
      ("partitionsOffset", \.partitionsOffset, 64),
      ("smallBytes", \.smallBytes, 64),
      ("maxCapacity", \.maxCapacity, 64),
      ("maxKey", \.maxKey, 32),
      ("maxValue", \.maxValue, 32),
      ("procCount", \.procCount, 32),
    ]
    let said = changes("header-fingerprinted", &r, upTo: 2) { r in
      let pick = r.below(fields.count + 1)
      if pick < fields.count {
        let (name, field, bits) = fields[pick]
        h[keyPath: field] = hostileInt(&r, current: h[keyPath: field], bits: bits)
        return "\(name)=\(h[keyPath: field])"
      } else {
        // Fewer, smaller partitions (still a valid layout, over the old contents).
        h.partitionBytes = max(256 << 10, (h.partitionBytes / (1 + r.below(4))) & ~4095)
        h.partitionCount = max(1, h.partitionCount - r.below(2))
        h.smallBytes = max(1024, min(h.smallBytes, (h.partitionBytes - Format.PartitionOffset.dataStart) / 4))
        h.maxValue = min(
          h.maxValue, max(0, (h.partitionBytes - Format.PartitionOffset.dataStart - h.smallBytes) / 10 - 19 - h.maxKey))
        return "partitions=\(h.partitionCount)×\(h.partitionBytes) small=\(h.smallBytes) maxValue=\(h.maxValue)"
      }
    }
    writeHeader(&b, h)
    return said
  }

  /// A valid header of another geometry over the old contents.
  private func reshape(_ b: inout [UInt8], _ r: inout Rng) -> String {
    var o = CacheOptions(capacity: layout.fileSize)
    o.averageEntrySize = r.pick([16, 40, 64, 100, 320, 1000, 5000])
    o.maxKeySize = r.pick([1, 8, 250, 4096])
    o.maxValueSize = r.pick([0, 100, 4096, 1 << 20])
    o.maxProcesses = r.pick([1, 2, 100, 256, 1000])
    o.partitionCount = r.pick([1, 2, 3])
    guard let nl = try? Layout(options: o) else { return "reshape: options rejected" }
    writeHeader(
      &b,
      HeaderFields(
        layout: nl, typeFingerprint: header.typeFingerprint, typeName: header.typeName, createdMs: header.createdMs))
    return
      "reshape: key \(o.maxKeySize) value \(o.maxValueSize) procs \(o.maxProcesses ?? 0) partitions \(o.partitionCount!)"
  }

  /// Hostile values in a partition's header lines (geometry, lock, intent, counters, log
  /// positions and limits, the move sequence) and the file header's live words.
  private func stateWords(_ b: inout [UInt8], _ r: inout Rng) -> String {
    return changes("state-words", &r, upTo: 4, separator: " ") { r in
      let o =
        r.below(4) == 0
        ? 256 + 8 * r.below((400 - 256) / 8)
        : partition(r.below(layout.partitionCount)) + 8 * r.below(Format.PartitionOffset.dataStart / 8)
      let v = hostile(&r)
      Self.put(&b, o, v)
      return "@\(o)=\(v)"
    }
  }

  /// Hostile bucket words: tags, entry words, sequences, and whole buckets copied.
  private func slots(_ b: inout [UInt8], _ r: inout Rng) -> String {
    return changes("slots", &r, upTo: 20) { r in
      guard !liveSlots.isEmpty else { return nil }
      let (bucket, slot) = r.pick(liveSlots)
      switch r.below(5) {
      case 0:
        let word = Self.get64(b, bucket + Format.BucketOffset.words + 4 * slot) & 0xFFFF_FFFF
        let other =
          liveRecords.isEmpty
          ? 0 : UInt64(r.pick(liveRecords) - layout.partitionsOffset) % UInt64(layout.partitionBytes)
        let v = r.pick([hostile(&r), word &+ 1, word &- 1, word | 0x1FFF_FFFF, other, r.next()])
        Self.put(&b, bucket + Format.BucketOffset.words + 4 * slot, v, bytes: 4)
        return "bucket@\(bucket) word \(slot)=\(v & 0xFFFF_FFFF)"
      case 1:
        let v = r.below(2) == 0 ? Self.get64(b, bucket) | 1 : r.next()
        Self.put(&b, bucket + Format.BucketOffset.seq, v, bytes: 4)
        return "bucket@\(bucket) seq=\(v & 0xFFFF_FFFF)"
      case 2:
        let v = r.pick([
          0, 1, r.next() & 0xFFFF, Self.get64(b, bucket + Format.BucketOffset.tags + 2 * ((slot + 1) % 10)) & 0xFFFF,
        ])
        Self.put(&b, bucket + Format.BucketOffset.tags + 2 * slot, v, bytes: 2)
        return "bucket@\(bucket) tag \(slot)=\(v)"
      case 3:
        // A slot's tag and word copied to another slot (two slots, one record).
        let to = r.below(Format.slotsPerBucket)
        let (from, fs) = r.pick(liveSlots)
        Self.put(
          &b, bucket + Format.BucketOffset.tags + 2 * to, Self.get64(b, from + Format.BucketOffset.tags + 2 * fs),
          bytes: 2)
        Self.put(
          &b, bucket + Format.BucketOffset.words + 4 * to, Self.get64(b, from + Format.BucketOffset.words + 4 * fs),
          bytes: 4)
        return "bucket@\(bucket) slot \(to) = copy of \(from)/\(fs)"
      default:
        // A whole bucket copied over another.
        let (from, _) = r.pick(liveSlots)
        for k in 0..<Format.bucketBytes { b[bucket + k] = b[from + k] }
        return "bucket@\(bucket) = copy of \(from)"
      }
    }
  }

  /// Hostile record headers: flags, lengths, version, checksum, expiry.
  private func records(_ b: inout [UInt8], _ r: inout Rng) -> String {
    return changes("records", &r, upTo: 8) { r in
      guard !liveRecords.isEmpty else { return nil }
      let at = r.pick(liveRecords)
      guard at >= 0, at + 19 <= b.count else { return nil }
      switch r.below(5) {
      case 0:
        let v = r.pick([0, 1, 2, 3, 0x04, 0x08, 0x10, 0x20, 0x30, 0x40, 0x80, 0xFF, r.next() & 0xFF] as [UInt64])
        Self.put(&b, at, v, bytes: 1)
        return "record@\(at) flags=\(v)"
      case 1:
        let v = r.pick([0, 1, 249, 250, 255, r.next() & 0xFF] as [UInt64])
        Self.put(&b, at + 1, v, bytes: 1)
        return "record@\(at) klen=\(v)"
      case 2:
        let v = r.pick([
          0, 1, 0xFF, 0xFFFF, 0xFFFF_FFFF, UInt64(layout.maxValue), UInt64(layout.maxValue + 1), r.next(),
        ])
        Self.put(&b, at + 2, v, bytes: r.pick([1, 2, 4]))
        return "record@\(at) vlen=\(v)"
      case 3:
        Self.put(&b, at + 3 + r.below(6), r.next(), bytes: 2)
        return "record@\(at) version/sum"
      default:
        Self.put(&b, at + 9 + r.below(10), r.next(), bytes: 6)
        return "record@\(at) expiry/key"
      }
    }
  }

  /// `label`, then what 1 to `most` runs of `change` did (each run says what it changed,
  /// or nil when it found nothing to change), joined with `separator`.
  private func changes(
    _ label: String, _ r: inout Rng, upTo most: Int, separator: String = ", ", _ change: (inout Rng) -> String?
  ) -> String {
    var what: [String] = []
    for _ in 0..<(1 + r.below(most)) {
      if let done = change(&r) { what.append(done) }
    }
    return label + ": " + what.joined(separator: separator)
  }

  private func writeHeader(_ b: inout [UInt8], _ h: HeaderFields) {
    let image = h.encoded()
    for i in 0..<min(256, b.count) { b[i] = image[i] }
  }
}
