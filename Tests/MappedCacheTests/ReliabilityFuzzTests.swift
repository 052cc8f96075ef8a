import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// Fuzzing the file format: a valid, filled cache file is damaged in many ways (byte
/// flips, zeroed and 0xFF ranges, hostile header values with and without a recomputed
/// layout fingerprint, a valid header of another geometry over the old contents,
/// hostile slot words, inline areas and record headers, truncation, extension), and a
/// child process runs every public operation on each damaged copy (`mc-test-helper
/// fuzz-case`: open read-only and read-write, get in all its forms, set, add, replace,
/// compare-and-swap, touch, remove, bulk get/set, iteration, removeAll, removeExpired,
/// limits, statistics, verify, verify(repair:), the same again, and the untyped
/// `CacheFile` API). Acceptable: the child exits 0, every error thrown and handled.
/// A signal, a timeout or another exit status fails the case and prints its seed; so do
/// a value that some set did not write whole for its key (values are self-describing),
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
    // Two bases: 32-byte slots (values in the logs), and 128-byte slots (small values inline).
    var mutators: [FileMutator] = []
    var baseReports: [String] = []
    for variant in 0..<2 {
      let basePath = dir + "/base\(variant).mcache"
      let built = try ChildProcess.run(
        TestFiles.binary("mc-test-helper"), ["fuzz-base", basePath, "1", "\(variant)"], timeout: 120)
      try #require(built.status == 0 && !built.signaled, "base: \(built.stdout) \(built.stderr)")
      let base = try [UInt8](Data(contentsOf: URL(fileURLWithPath: basePath)))
      let m = try FileMutator(base: base)
      mutators.append(m)
      baseReports.append(
        "slotBytes \(m.layout.slotBytes): " + built.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
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
      errors thrown \(t.thrown), reads checked \(t.hits), failures \(t.failures.count), \
      not clean after repair \(t.notClean.count), read-back failures after repair \(t.readBackFailed.count)
      """)
    for (category, n) in t.byCategory.sorted(by: { $0.key < $1.key }) { print("fuzz:   \(category): \(n)") }
    for f in t.failures.prefix(30) { print("fuzz FAILURE \(f)") }
    for f in t.notClean.prefix(10) { print("fuzz note: verify not clean after repair: \(f)") }
    #expect(t.cases == seeds.count)
    #expect(t.failures.isEmpty, "\(t.failures.count) failing cases, first: \(t.failures.first ?? "")")
    // A repaired cache must be usable: what is set afterwards reads back.
    #expect(t.readBackFailed.isEmpty, "read-back after repair failed: \(t.readBackFailed.prefix(5))")
    #expect(t.notClean.isEmpty, "verify after verify(repair:) not clean: \(t.notClean.prefix(5))")
  }

  final class Tally: @unchecked Sendable {
    struct State {
      var cases = 0, opened = 0, thrown = 0, hits = 0
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
      let what = "slots\(mutator.layout.slotBytes) " + mutator.mutate(&bytes, seed: seed)
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
  let layout: Layout
  let header: HeaderFields
  /// Slots that hold entries in the base file, and their records' offsets.
  let liveSlots: [Int]
  let liveLocs: [Int]

  init(base: [UInt8]) throws {
    self.base = base
    header = HeaderFields(bytes: Array(base[0..<256]))
    layout = try Layout(header: header, actualFileSize: base.count)
    var slots: [Int] = []
    var locs: [Int] = []
    for i in 0..<layout.slotCount {
      let o = layout.slotsOffset + i * layout.slotBytes
      if Self.get64(base, o + Format.S.hash) != 0 {
        slots.append(i)
        locs.append(Int(Self.get64(base, o + Format.S.loc)))
      }
    }
    liveSlots = slots
    liveLocs = locs
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

  /// Hostile 64-bit values: extremes, file-relative offsets, near-misses.
  func hostile(_ r: inout Rng) -> UInt64 {
    let l = layout
    let choices: [UInt64] = [
      0, 1, 7, 8, 9, UInt64.max, UInt64.max - 7, 1 << 63, (1 << 63) - 8, 1 << 62, 1 << 32, 1 << 31, 0xFFFF_FFFF,
      UInt64(l.fileSize), UInt64(l.fileSize - 8), UInt64(l.fileSize + 8), UInt64(l.smallBase), UInt64(l.mainBase),
      UInt64(l.mainBase - 8), UInt64(l.logEnd - 8), UInt64(l.logEnd), UInt64(l.slotsOffset), UInt64(l.ghostOffset),
      UInt64(l.smallSize), UInt64(l.mainSize), UInt64(l.slotCount), UInt64(l.slotCount * 2), UInt64(Int.max),
      r.next(), r.next() & ~7, r.next() % UInt64(l.fileSize), (r.next() % UInt64(l.fileSize)) & ~7,
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

  /// A region-biased range: header, process table, slots, ghost, logs, or anywhere.
  func range(_ r: inout Rng, maxLength: Int) -> Range<Int> {
    let l = layout
    let regions = [
      0..<256, 256..<Format.headerPage, Format.headerPage..<l.headerBytes,
      l.slotsOffset..<l.ghostOffset, l.ghostOffset..<l.logOffset,
      l.smallBase..<l.mainBase, l.mainBase..<l.logEnd, 0..<l.fileSize,
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
    let l = layout
    switch category {
    case 0:
      let n = 1 + r.below(64)
      let meta = r.below(2) == 0
      for _ in 0..<n {
        let o = meta ? r.below(l.logOffset) : r.below(b.count)
        guard o < b.count else { continue }
        b[o] ^= UInt8(1 + r.below(255))
      }
      return "flips: \(n) bytes\(meta ? " in header/index" : "")"
    case 1, 2:
      let rg = range(&r, maxLength: r.below(4) == 0 ? 65536 : 512)
      let v: UInt8 = category == 1 ? 0 : 0xFF
      for o in rg where o < b.count { b[o] = v }
      return "\(category == 1 ? "zeros" : "0xFF"): [\(rg.lowerBound), \(rg.upperBound))"
    case 3:
      let fields: [(Int, Int)] = [
        (Format.H.magic, 8), (Format.H.version, 4), (Format.H.headerBytes, 4), (Format.H.fileSize, 8),
        (Format.H.slotCount, 8), (Format.H.slotsOffset, 8), (Format.H.logOffset, 8),
        (Format.H.smallSize, 8), (Format.H.mainSize, 8), (Format.H.ghostOffset, 8),
        (Format.H.ghostCount, 8), (Format.H.maxKey, 4), (Format.H.maxValue, 4),
        (Format.H.typeFingerprint, 8), (Format.H.procOffset, 8), (Format.H.procCount, 4),
        (Format.H.slotBytes, 4), (Format.H.layoutFingerprint, 8),
      ]
      let (o, n) = r.pick(fields)
      let v = hostile(&r)
      Self.put(&b, o, v, bytes: n)
      return "header-raw: field@\(o) = \(v)"
    case 4:
      // Hostile values behind a valid fingerprint: only the layout checks stand in the way.
      var h = HeaderFields(bytes: Array(b[0..<256]))
      var what: [String] = []
      for _ in 0..<(1 + r.below(2)) {
        switch r.below(13) {
        case 12:
          h.slotBytes = r.pick([0, 8, 16, 32, 48, 64, 128, 256, 512, 1 << 20])
          what.append("slotBytes=\(h.slotBytes)")
        case 0:
          h.headerBytes = hostileInt(&r, current: h.headerBytes, bits: 32)
          what.append("headerBytes=\(h.headerBytes)")
        case 1:
          h.fileSize = hostileInt(&r, current: h.fileSize, bits: 64)
          what.append("fileSize=\(h.fileSize)")
        case 2:
          h.slotCount = hostileInt(&r, current: h.slotCount, bits: 64)
          what.append("slotCount=\(h.slotCount)")
        case 3:
          h.slotsOffset = hostileInt(&r, current: h.slotsOffset, bits: 64)
          what.append("slotsOffset=\(h.slotsOffset)")
        case 4:
          h.logOffset = hostileInt(&r, current: h.logOffset, bits: 64)
          what.append("logOffset=\(h.logOffset)")
        case 5:
          h.smallSize = hostileInt(&r, current: h.smallSize, bits: 64)
          what.append("smallSize=\(h.smallSize)")
        case 6:
          h.mainSize = hostileInt(&r, current: h.mainSize, bits: 64)
          what.append("mainSize=\(h.mainSize)")
        case 7:
          h.ghostOffset = hostileInt(&r, current: h.ghostOffset, bits: 64)
          h.ghostCount = hostileInt(&r, current: h.ghostCount, bits: 64)
          what.append("ghost=\(h.ghostOffset)/\(h.ghostCount)")
        case 8:
          h.maxKey = hostileInt(&r, current: h.maxKey, bits: 32)
          what.append("maxKey=\(h.maxKey)")
        case 9:
          h.maxValue = hostileInt(&r, current: h.maxValue, bits: 32)
          what.append("maxValue=\(h.maxValue)")
        case 10:
          h.procCount = hostileInt(&r, current: h.procCount, bits: 32)
          what.append("procCount=\(h.procCount)")
        default:
          // Shrink the logs consistently (still a valid layout, over the old contents).
          h.mainSize = max(8, (h.mainSize / (2 + r.below(6))) & ~7)
          h.smallSize = max(8, (h.smallSize / (1 + r.below(8))) & ~7)
          h.maxValue = min(h.maxValue, max(0, h.mainSize / 8 - 40 - h.maxKey))
          what.append("logs=\(h.smallSize)/\(h.mainSize) maxValue=\(h.maxValue)")
        }
      }
      writeHeader(&b, h)
      return "header-fingerprinted: " + what.joined(separator: ", ")
    case 5:
      // A valid header of another geometry over the old contents.
      var o = CacheOptions(capacity: l.fileSize)
      o.averageEntrySize = r.pick([16, 40, 64, 100, 320, 1000, 5000])
      o.maxKeySize = r.pick([1, 8, 250, 4096])
      o.maxValueSize = r.pick([0, 100, 4096, 1 << 20])
      o.maxProcesses = r.pick([1, 2, 100, 256, 1000])
      guard let nl = try? Layout(options: o) else { return "reshape: options rejected" }
      writeHeader(
        &b,
        HeaderFields(
          layout: nl, typeFingerprint: header.typeFingerprint, typeName: header.typeName,
          createdMs: header.createdMs))
      return "reshape: avg \(o.averageEntrySize) key \(o.maxKeySize) value \(o.maxValueSize) procs \(o.maxProcesses)"
    case 6:
      var what: [String] = []
      for _ in 0..<(1 + r.below(4)) {
        let o = 256 + 8 * r.below((704 - 256) / 8)
        let v = hostile(&r)
        Self.put(&b, o, v)
        what.append("@\(o)=\(v)")
      }
      return "state-words: " + what.joined(separator: " ")
    case 7:
      var what: [String] = []
      for _ in 0..<(1 + r.below(20)) {
        let live = !liveSlots.isEmpty && r.below(10) < 7
        let slot = live ? r.pick(liveSlots) : r.below(l.slotCount)
        let so = l.slotsOffset + slot * l.slotBytes
        switch r.below(l.slotBytes > Format.slotHeaderBytes ? 7 : 5) {
        case 5:
          // The inline area's lengths (slots with one).
          let v = r.pick([0, 1, 8, 48, 79, 80, 81, 200, 255, 256, 4096, 0xFFFF] as [UInt64])
          let field = r.pick([Format.S.klen, Format.S.vlen])
          Self.put(&b, so + field, v, bytes: 2)
          what.append("slot \(slot) inline@\(field)=\(v)")
        case 6:
          // Flip the inline flag (bit 62) of the meta word.
          let v = Self.get64(b, so + Format.S.meta) ^ (1 << 62)
          Self.put(&b, so + Format.S.meta, v)
          what.append("slot \(slot) meta^inline")
        case 0:
          let loc = Self.get64(b, so + Format.S.loc)
          let choices: [UInt64] = [
            hostile(&r), loc &+ 8, loc &+ 16, loc &+ 32, loc &- 8, loc | 4,
            liveLocs.isEmpty ? 0 : UInt64(r.pick(liveLocs)),
          ]
          let v = r.pick(choices)
          Self.put(&b, so + Format.S.loc, v)
          what.append("slot \(slot) loc=\(v)")
        case 1:
          let v = r.below(2) == 0 ? Self.get64(b, so) | 1 : r.next()
          Self.put(&b, so + Format.S.seq, v)
          what.append("slot \(slot) seq=\(v)")
        case 2:
          let other = liveSlots.isEmpty ? 0 : r.pick(liveSlots)
          let v = r.below(2) == 0 ? Self.get64(b, l.slotsOffset + other * l.slotBytes + Format.S.hash) : r.next()
          Self.put(&b, so + Format.S.hash, v)
          what.append("slot \(slot) hash=\(v)")
        case 3:
          let v = r.next()
          Self.put(&b, so + Format.S.meta, v)
          what.append("slot \(slot) meta=\(v)")
        default:
          // Copy a whole slot over another (two slots, one record).
          let from = liveSlots.isEmpty ? 0 : r.pick(liveSlots)
          let fo = l.slotsOffset + from * l.slotBytes
          for k in 0..<l.slotBytes { b[so + k] = b[fo + k] }
          what.append("slot \(slot) = copy of \(from)")
        }
      }
      return "slots: " + what.joined(separator: ", ")
    case 8:
      var what: [String] = []
      for _ in 0..<(1 + r.below(8)) {
        guard !liveLocs.isEmpty else { break }
        let loc = r.pick(liveLocs)
        guard loc >= 0, loc + 32 <= b.count else { continue }
        switch r.below(6) {
        case 0:
          let v = r.pick([
            0, 8, 16, 24, 32, 0xFFFF_FFF8, 0xFFFF_FFFF, UInt64(l.mainSize), Self.get64(b, loc) & 0xFFFF_FFFF &+ 8,
            (Self.get64(b, loc) & 0xFFFF_FFFF) &- 8, r.next() & 0xFFFF_FFFF,
          ])
          Self.put(&b, loc + Format.R.size, v, bytes: 4)
          what.append("record@\(loc) size=\(v)")
        case 1:
          let v = r.pick([0, 1, 250, 251, 4096, 65535, r.next() & 0xFFFF])
          Self.put(&b, loc + Format.R.klen, v, bytes: 2)
          what.append("record@\(loc) klen=\(v)")
        case 2:
          let v = r.pick([0, 1, 2, 3, 0xFFFF] as [UInt64])
          Self.put(&b, loc + Format.R.kind, v, bytes: 2)
          what.append("record@\(loc) kind=\(v)")
        case 3:
          let v = r.pick([
            0, 1, UInt64(l.maxValue), UInt64(l.maxValue + 1), 0xFFFF_FFFF, 0x8000_0000, r.next() & 0xFFFF_FFFF,
          ])
          Self.put(&b, loc + Format.R.vlen, v, bytes: 4)
          what.append("record@\(loc) vlen=\(v)")
        case 4:
          let v = r.next()
          Self.put(&b, loc + Format.R.hash, v)
          what.append("record@\(loc) hash=\(v)")
        default:
          Self.put(&b, loc + Format.R.sum, r.next(), bytes: 4)
          what.append("record@\(loc) sum")
        }
      }
      return "records: " + what.joined(separator: ", ")
    case 9:
      let choices = [
        0, 1, 8, 100, 255, 256, 4096, l.headerBytes, l.slotsOffset + 100, l.logOffset, l.mainBase,
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
      let i = r.below(l.procCount)
      var what: [String] = []
      for _ in 0..<(1 + r.below(3)) {
        let field = r.pick([Format.P.generation, Format.P.pid, Format.P.hits, Format.P.misses, Format.P.openedMs])
        let v = hostile(&r)
        Self.put(&b, Format.headerPage + i * Format.procEntryBytes + field, v)
        what.append("proc \(i)+\(field)=\(v)")
      }
      return "process-table: " + what.joined(separator: ", ")
    default:
      let from = range(&r, maxLength: 4096)
      let to = r.below(b.count)
      for (k, o) in from.enumerated() where to + k < b.count { b[to + k] = b[o] }
      return "copy: [\(from.lowerBound), \(from.upperBound)) to \(to)"
    }
  }

  private func writeHeader(_ b: inout [UInt8], _ h: HeaderFields) {
    let image = h.encoded()
    for i in 0..<min(256, b.count) { b[i] = image[i] }
  }
}
