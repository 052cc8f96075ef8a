import CheckedValues
import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// The file: creation, reopening, parameters, foreign files, the creation race between
/// processes, and the embedded default location.
@Suite struct CoreFormatTests {
  private func fileBytes(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

  private func statOf(_ path: String) -> stat {
    var st = stat()
    _ = stat(path, &st)
    return st
  }

  @Test func createsFixedSizeFileWithHeaderAndMode0600() throws {
    let path = TestFiles.tempPath("fmt-create")
    defer { TestFiles.cleanup(path) }
    let cache = try SharedCache<[UInt8]>(path: path, capacity: 3 << 20 | 123)
    let st = statOf(path)
    #expect(Int(st.st_size) == 3 << 20, "capacity rounds down to whole pages")
    #expect(cache.capacity == 3 << 20)
    #expect(cache.statistics.capacity == 3 << 20)
    #expect(st.st_mode & 0o777 == 0o600)
    // Blocks reserved at creation (posix_fallocate): the file is not sparse.
    #expect(Int(st.st_blocks) * 512 >= 3 << 20)
    let head = [UInt8](fileBytes(path).prefix(16))
    #expect(Array(head[0..<8]) == Array("MCACHE01".utf8))
    #expect(UInt32(head[8]) == Format.version && Format.version == 5, "format version 5")
    #expect(cache.maxKeySize == 250)
    #expect(cache.statistics.entries == 0)
    #expect(try cache.verify().ok)
  }

  @Test func modeIsWhatTheCallerAsks() throws {
    let path = TestFiles.tempPath("fmt-mode")
    defer { TestFiles.cleanup(path) }
    var o = CacheOptions()
    o.mode = 0o640
    let old = umask(0o022)
    defer { umask(old) }
    _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, options: o)
    #expect(statOf(path).st_mode & 0o777 == 0o640)
  }

  @Test func reopenKeepsEntriesAndTheFilesCapacityWins() throws {
    let path = TestFiles.tempPath("fmt-reopen")
    defer { TestFiles.cleanup(path) }
    var o = CacheOptions()
    o.maxKeySize = 40
    do {
      let c = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20, options: o)
      try c.setObject([1, 2, 3], forKey: "a")
      try c.setObject([], forKey: "empty")
    }
    // Other parameters asked for: the file opens with its own, nothing wiped.
    let again = try SharedCache<[UInt8]>(path: path, capacity: 8 << 20)
    #expect(again.capacity == 2 << 20)
    #expect(again.maxKeySize == 40)
    #expect(Int(statOf(path).st_size) == 2 << 20)
    #expect(try again.object(forKey: "a") == [1, 2, 3])
    #expect(try again.object(forKey: "empty") == [])
    #expect(again.statistics.entries == 2)
    #expect(throws: CacheError.keyTooLarge(size: 41, limit: 40)) {
      try again.setObject([1], forKey: String(repeating: "x", count: 41))
    }
    // Data shares the byte encoding with [UInt8]: the same file opens as Data.
    let asData = try SharedCache<Data>(path: path, capacity: 1 << 20)
    #expect(try asData.object(forKey: "a") == Data([1, 2, 3]))
  }

  @Test func twoHandlesInOneProcessSeeEachOther() throws {
    let path = TestFiles.tempPath("fmt-two")
    defer { TestFiles.cleanup(path) }
    let a = try SharedCache<String>(path: path, capacity: 1 << 20)
    let b = try SharedCache<String>(path: path, capacity: 1 << 20)
    try a.setObject("from a", forKey: "k")
    #expect(try b.object(forKey: "k") == "from a")
    try b.setObject("from b", forKey: "k")
    #expect(try a.object(forKey: "k") == "from b")
    #expect(try b.removeObject(forKey: "k"))
    #expect(try a.object(forKey: "k") == nil)
  }

  @Test func foreignFileIsAnErrorAndLeftUntouched() throws {
    let contents: [Data] = [
      Data("hello, this is not a cache\n".utf8),
      Data([0x4D]),  // 1 byte
      Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }),  // larger than a header
      Data(repeating: 0, count: 1 << 20),  // a zeroed 1 MiB file
      Data("MCACHE01".utf8) + Data(repeating: 7, count: 4096),  // right magic, junk after
    ]
    for (n, bytes) in contents.enumerated() {
      let path = TestFiles.tempPath("fmt-foreign\(n)")
      defer { TestFiles.cleanup(path) }
      #expect(FileManager.default.createFile(atPath: path, contents: bytes, attributes: [.posixPermissions: 0o600]))
      let before = statOf(path)
      var thrown: CacheError?
      do { _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20) } catch let e as CacheError { thrown = e }
      #expect(thrown != nil, "file \(n) must be refused")
      switch thrown {
      case .notACacheFile?, .corrupted?, .incompatibleFormat?: break
      default: Issue.record("file \(n): unexpected \(String(describing: thrown))")
      }
      #expect(fileBytes(path) == bytes, "file \(n) must be left untouched")
      let after = statOf(path)
      #expect(after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec)
    }
  }

  @Test func pathsThatAreNotRegularFilesAreRefused() throws {
    let dir = TestFiles.tempPath("fmt-dir")
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
    defer { rmdir(dir) }
    #expect(throws: CacheError.self) { try SharedCache<[UInt8]>(path: dir, capacity: 1 << 20) }
    let fifo = TestFiles.tempPath("fmt-fifo")
    #expect(mkfifo(fifo, 0o600) == 0)
    defer { unlink(fifo) }
    #expect(throws: CacheError.notACacheFile(path: fifo)) { try SharedCache<[UInt8]>(path: fifo, capacity: 1 << 20) }
    // A symbolic link, even to a valid cache, is refused (and the cache left alone).
    let target = TestFiles.tempPath("fmt-target")
    defer { TestFiles.cleanup(target) }
    let real = try SharedCache<[UInt8]>(path: target, capacity: 1 << 20)
    try real.setObject([1], forKey: "k")
    let link = TestFiles.tempPath("fmt-link")
    #expect(symlink(target, link) == 0)
    defer { unlink(link) }
    var refused = false
    do { _ = try SharedCache<[UInt8]>(path: link, capacity: 1 << 20) } catch CacheError.unsafeFile { refused = true }
    #expect(refused)
    #expect(try real.object(forKey: "k") == [1])
  }

  @Test func damagedHeaderIsRefusedNotTrusted() throws {
    let path = TestFiles.tempPath("fmt-damaged")
    defer { TestFiles.cleanup(path) }
    do {
      let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
      try c.setObject([9], forKey: "k")
    }
    let good = fileBytes(path)
    func attempt(_ mutate: (inout Data) -> Void) -> CacheError? {
      var d = good
      mutate(&d)
      _ = FileManager.default.createFile(atPath: path, contents: d, attributes: [.posixPermissions: 0o600])
      defer { _ = FileManager.default.createFile(atPath: path, contents: good, attributes: [.posixPermissions: 0o600]) }
      do { _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20) } catch let e as CacheError { return e } catch {
        return .invalidArgument("\(error)")
      }
      return nil
    }
    // Another format version (1-3: earlier single-index layouts; 4: the last of them,
    // which `mapped-cache migrate` copies from; 6: not yet defined).
    for version: UInt8 in [1, 2, 3, 4, 6] {
      if case .incompatibleFormat(_, let reason)? = attempt({ $0[8] = version }) {
        #expect(reason.contains("migrate") == (version == 4), "\(reason)")
      } else {
        Issue.record("version \(version) must be incompatible")
      }
    }
    // A layout field changed (the partition count) without its fingerprint.
    if case .corrupted? = attempt({ $0[24] ^= 0x10 }) {
    } else {
      Issue.record("changed partition count must be refused")
    }
    // Truncated file (the header's size no longer matches).
    let truncated = attempt { $0 = $0.prefix(512 << 10) }
    if case .corrupted? = truncated {
    } else {
      Issue.record("truncated file must be refused, got \(String(describing: truncated))")
    }
    // The intact file still opens with its entry.
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    #expect(try c.object(forKey: "k") == [9])
  }

  @Test func interruptedCreationIsRedone() throws {
    let path = TestFiles.tempPath("fmt-interrupted")
    defer { TestFiles.cleanup(path) }
    // A creator that died after marking the file but before finishing it.
    _ = FileManager.default.createFile(
      atPath: path, contents: Data("MCCINIT0".utf8) + Data(repeating: 0xEE, count: 100),
      attributes: [.posixPermissions: 0o600])
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    #expect(c.capacity == 1 << 20)
    #expect(c.statistics.entries == 0)
    try c.setObject([1], forKey: "x")
    #expect(try c.verify().ok)
  }

  @Test func badCreationParametersAreErrors() throws {
    for cap in [0, 1 << 19, (1 << 20) - 4096] {
      let path = TestFiles.tempPath("fmt-badcap")
      defer { TestFiles.cleanup(path) }
      #expect(throws: CacheError.self) { try SharedCache<[UInt8]>(path: path, capacity: cap) }
      #expect(!FileManager.default.fileExists(atPath: path), "a refused creation leaves no file behind")
    }
    var o = CacheOptions()
    o.maxKeySize = 0
    let path = TestFiles.tempPath("fmt-badkey")
    defer { TestFiles.cleanup(path) }
    #expect(throws: CacheError.self) { try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, options: o) }
  }

  @Test func smallCacheClampsValueLimitAndStillHoldsAMaximalValue() throws {
    let path = TestFiles.tempPath("fmt-clamp")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    #expect(c.maxValueSize > 0 && c.maxValueSize < 1 << 20)
    let big = (0..<c.maxValueSize).map { UInt8(truncatingIfNeeded: $0 &* 7) }
    try c.setObject(big, forKey: "big")
    #expect(try c.object(forKey: "big") == big)
    // A large cache keeps the 1 MiB default.
    let p2 = TestFiles.tempPath("fmt-clamp2")
    defer { TestFiles.cleanup(p2) }
    let c2 = try SharedCache<[UInt8]>(path: p2, capacity: 32 << 20)
    #expect(c2.maxValueSize == 1 << 20)
  }

  /// The automatic partition count: by the machine (32 a core), up to what the capacity
  /// allows, a partition holding at least 4 MiB and twelve of the largest records (so
  /// about 12 MiB with the default 1 MiB values).
  @Test func automaticPartitionCountFollowsCoresAndCapacity() throws {
    func layout(_ capacity: Int, cores: Int, maxValue: Int = 1 << 20) throws -> Layout {
      var o = CacheOptions(capacity: capacity)
      o.maxValueSize = maxValue
      return try Layout(options: o, cores: cores)
    }
    #expect(try layout(16 << 20, cores: 8).partitionCount == 1)
    #expect(try layout(64 << 20, cores: 1).partitionCount == 4)  // by capacity
    #expect(try layout(64 << 20, cores: 64).partitionCount == 4)
    #expect(try layout(64 << 20, cores: 4, maxValue: 4096).partitionCount == 16)  // 4 MiB each
    #expect(try layout(1 << 30, cores: 1).partitionCount == 32)  // by the cores
    #expect(try layout(1 << 30, cores: 2).partitionCount == 64)
    #expect(try layout(1 << 30, cores: 2, maxValue: 4096).partitionCount == 64)
    #expect(try layout(64 << 30, cores: 192).partitionCount == Format.maxAutomaticPartitions)
    // Every automatic count leaves room for the largest value, and partitions of 4 MiB
    // or more, less their share of the header (and a page's rounding).
    for mib in [1, 3, 4, 5, 8, 12, 16, 17, 100, 1000, 5000] {
      for maxValue in [4096, 1 << 20] {
        let l = try layout(mib << 20, cores: 64, maxValue: maxValue)
        #expect(l.partitionCount == 1 || l.partitionBytes >= (4 << 20) - l.headerBytes - 4096, "\(mib) MiB")
        #expect(l.partitionCount == 1 || l.maxValue == maxValue, "\(mib) MiB, values up to \(maxValue)")
      }
    }
  }

  /// A record is its key and value behind a 9-byte header (12-byte keys and 64-byte
  /// values: 85 bytes, no padding), and the index costs about 8 bytes an entry, so that
  /// 100,000 such entries fill 32 MiB to well under a third. The verifier judges a key by
  /// its hash (it must fit the slot's tag and bucket): a damaged key is found, and repair
  /// drops only its entry.
  @Test func smallEntriesTakeANineByteHeader() throws {
    let path = TestFiles.tempPath("fmt-small-rec")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 32 << 20)
    let e = c.engine
    #expect(RecordFormat.size(keyCount: 12, valueCount: 64, expiry: false) == 85)
    #expect(RecordFormat.size(keyCount: 12, valueCount: 64, expiry: true) == 91)
    for n in 0..<100_000 {
      try c.setObject(Array(repeating: UInt8(truncatingIfNeeded: n), count: 64), forKey: String(format: "key:%08d", n))
    }
    let s = c.statistics
    #expect(s.entries == 100_000 && s.evictions == 0)
    #expect(s.logBytesUsed <= 100_000 * 85 + 4096 * e.layout.partitionCount, "records only, no padding")
    #expect(s.indexBytes < 100_000 * 12, "the index: \(s.indexBytes) bytes")
    #expect(s.indexBytes + s.logBytesUsed < (32 << 20) / 3)
    let key = Array("key:00000007".utf8)
    let found = try #require(try key.withUnsafeBytes { try e._find($0) })
    #expect(found.entry.header.klen == 12 && found.entry.header.vlen == 64 && found.entry.header.headerBytes == 9)
    #expect(try c.verify().ok)
    // Damage the key's last byte: the verifier finds it, and repair drops only it.
    let keyEnd = e._fileOffset(partition: found.partition, found.entry.offset + 9 + key.count - 1)
    e.memory._byte(at: keyEnd).storeBytes(of: UInt8(ascii: "x"), as: UInt8.self)
    let report = try c.verify()
    #expect(!report.ok && report.problems.contains { $0.contains("does not belong in this slot") })
    #expect(try c.verify(repair: true).repaired >= 1)
    #expect(try c.verify().ok)
    #expect(try c.object(forKey: "key:00000007") == nil)
    #expect(try c.object(forKey: "key:00000008") == Array(repeating: 8, count: 64))
    #expect(c.statistics.entries == 99_999)
  }

  @Test func defaultLocationAndCapacity() throws {
    let name = "mctest-core-default-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    let expected = "/dev/shm/\(name).mcache"
    #expect(try SharedCache<String>.defaultPath(forName: name) == expected)
    defer { TestFiles.cleanup(expected) }
    let c = try SharedCache<String>(name: name)
    #expect(c.path == expected)
    #expect(c.capacity == 64 << 20)
    try c.setObject("v", forKey: "k")
    #expect(FileManager.default.fileExists(atPath: expected))
    let again = try SharedCache<String>(name: name)
    #expect(try again.object(forKey: "k") == "v")
    for bad in ["", "a/b", ".", "..", String(repeating: "n", count: 201)] {
      #expect(throws: CacheError.self) { try SharedCache<String>.defaultPath(forName: bad) }
    }
  }

  @Test func wrongValueTypeIsRefused() throws {
    let path = TestFiles.tempPath("fmt-type")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<String>(path: path, capacity: 1 << 20)
    try c.setObject("s", forKey: "k")
    #expect(throws: CacheError.self) { try SharedCache<[UInt8]>(path: path, capacity: 1 << 20) }
    #expect(try c.object(forKey: "k") == "s")
  }

  /// A creating process SIGKILLed at a random instant (before, during or after reserving
  /// the file's blocks and writing its header) leaves a path the next opener can use at
  /// once: either the finished cache or a recognised interrupted creation that it redoes.
  @Test func creatorKilledMidCreation() throws {
    var rng = SplitMix(UInt64(getpid()) &+ 3)
    var redone = 0
    var finished = 0
    for round in 0..<12 {
      let path = TestFiles.tempPath("fmt-killcreate\(round)")
      defer { TestFiles.cleanup(path) }
      let child = try coreChild(["create-race", path, String(64 << 20), "0"])
      usleep(UInt32(rng.below(40_000)))
      child.kill(SIGKILL)
      child.finish()
      guard FileManager.default.fileExists(atPath: path) else { continue }  // killed before open
      let c = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
      if c.capacity == 64 << 20 {
        finished += 1
      } else {
        redone += 1
        #expect(c.capacity == 2 << 20)
      }
      try c.setObject([1], forKey: "after")
      #expect(try c.object(forKey: "after") == [1])
      #expect(try c.verify().ok)
    }
    print("[core] creator killed mid-creation: \(finished) finished caches, \(redone) creations redone")
  }

  /// Eight processes create the same path at the same instant: one valid cache, every
  /// process sees the same capacity and stores its entry, and nobody fails.
  @Test func creationRaceBetweenProcesses() throws {
    for round in 0..<3 {
      let path = TestFiles.tempPath("fmt-race\(round)")
      defer { TestFiles.cleanup(path) }
      let start = Int(Date().timeIntervalSince1970 * 1000) + 400
      // Different capacities asked for: whoever creates wins, all others agree.
      let children = try (0..<8).map { i in
        try coreChild(["create-race", path, String((1 + i % 4) << 20), String(start)])
      }
      var capacities = Set<Int>()
      for child in children {
        let c = child.finish()
        #expect(c.status == 0 && !c.signaled, "child failed: \(c.stderr)")
        #expect(c.report["ok"] as? Bool == true)
        capacities.insert(c.int("capacity"))
      }
      #expect(capacities.count == 1, "all processes must see one cache, saw \(capacities)")
      let cache = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
      #expect(capacities.first == cache.capacity)
      #expect(cache.statistics.entries == 8)
      for c in children {
        let key = "pid-\(c.pid)"
        let v = try #require(try cache.object(forKey: key))
        #expect(CoreValue.check(v, key: key))
      }
      #expect(try cache.verify().ok)
    }
  }

  /// The handles of one process share its process-table entry, given back when the last
  /// is released: many handles opened and closed in turn leak neither entries nor
  /// descriptors, counters survive their handles, and a full table is a clear error.
  @Test func handlesComeAndGoWithoutLeaking() throws {
    let (first, path) = try SharedCache<[UInt8]>.scratch("fmt-handles", options: CacheOptions(capacity: 1 << 20)) {
      $0.maxProcesses = 4
    }
    defer { TestFiles.cleanup(path) }
    try first.setObject([1], forKey: "k")
    let fds = Support.openDescriptorCount()
    for _ in 0..<300 {
      let h = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
      #expect(try h.object(forKey: "k") == [1])  // one hit each
    }
    // Other tests run in parallel and open descriptors too: a leak here would be 300.
    #expect(Support.openDescriptorCount() < fds + 100, "descriptors leaked")
    #expect(first.statistics.hits == 300, "hits of closed handles still count")
    // Entries as other processes take them (through descriptors of their own): `first`'s
    // plus three; the fifth is refused, cleanly, while this process opens on.
    let others = (0..<4).map { _ in open(path, O_RDWR | O_CLOEXEC) }
    defer { for fd in others { close(fd) } }
    for fd in others.prefix(3) { _ = try ProcessTable.register(memory: first.engine.memory, fd: fd) }
    #expect(throws: CacheError.tooManyProcesses(limit: 4)) {
      _ = try ProcessTable.register(memory: first.engine.memory, fd: others[3])
    }
    let more = try (0..<3).map { _ in try SharedCache<[UInt8]>(path: path, capacity: 1 << 20) }
    #expect(more.allSatisfy { $0.engine.registration?.slot == first.engine.registration?.slot })
    // Read-only handles take no entry.
    let ro = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(readOnly: true))
    #expect(try ro.object(forKey: "k") == [1])
    #expect(try first.verify().ok)
  }
}
