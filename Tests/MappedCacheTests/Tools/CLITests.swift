import CheckedValues
import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// The `mapped-cache` tool, run as a child process: each command's output and exit code
/// on a fresh cache, on a busy one, on a damaged one and on files that are not caches.
@Suite(.serialized) struct CLITests {
  // MARK: Running the tool

  struct Run {
    var status: Int32
    var signaled: Bool
    var out: Data
    var err: String
    var text: String { String(decoding: out, as: UTF8.self) }
  }

  /// Runs `mapped-cache args` with optional stdin; captures raw stdout bytes.
  @discardableResult
  static func cli(_ args: [String], stdin: Data? = nil, timeout: TimeInterval = 30) throws -> Run {
    let r = try ChildProcess.run(TestFiles.binary("mapped-cache"), args, stdin: stdin, timeout: timeout)
    return Run(status: r.status, signaled: r.signaled, out: r.stdoutData, err: r.stderr)
  }

  static func json(_ r: Run) throws -> Any { try JSONSerialization.jsonObject(with: r.out) }

  /// A fresh 4 MiB cache made by the tool.
  static func freshCache(_ tag: String, _ extra: [String] = []) throws -> String {
    let path = TestFiles.tempPath(tag)
    let r = try cli(["create", path, "--capacity", "4M", "--partitions", "2"] + extra)
    #expect(r.status == 0, "create: \(r.err)")
    return path
  }

  static func fileBytes(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

  // MARK: Help and usage errors

  @Test func helpGoesToStdoutWithExitZero() throws {
    for args in [["--help"], ["-h"], ["help"]] {
      let r = try Self.cli(args)
      #expect(r.status == 0 && !r.signaled)
      #expect(r.text.contains("USAGE: mapped-cache COMMAND"))
      #expect(r.text.contains("EXIT CODES"))
      for c in [
        "create", "info", "stats", "get", "set", "delete", "keys", "dump", "verify", "migrate", "sweep", "clear",
      ] {
        #expect(r.text.contains("  \(c) "), "tool help lists \(c)")
      }
      #expect(r.err.isEmpty)
    }
    for c in ["create", "info", "stats", "get", "set", "delete", "keys", "dump", "verify", "migrate", "sweep", "clear"]
    {
      for flag in ["-h", "--help"] {
        // Help wins even where the arguments are missing.
        let r = try Self.cli([c, flag])
        #expect(r.status == 0, "\(c) \(flag)")
        #expect(r.text.contains("USAGE: mapped-cache \(c) "), "\(c) \(flag): \(r.text)")
        #expect(r.text.contains("-h, --help"))
        #expect(r.err.isEmpty)
      }
    }
    let stats = try Self.cli(["stats", "--help"])
    for flag in ["--json", "--watch SECONDS", "--prometheus", "--serve ADDRESS"] { #expect(stats.text.contains(flag)) }
    let set = try Self.cli(["set", "-h"])
    #expect(set.text.contains("USAGE: mapped-cache set PATH KEY [VALUE|-] [--ttl SECONDS]"))
  }

  @Test func usageErrorsExit64WithUsageLine() throws {
    let path = try Self.freshCache("usage")
    defer { TestFiles.cleanup(path) }
    let cases: [[String]] = [
      [],
      ["frobnicate", path],
      ["--bogus"],
      ["info"],
      ["get", path],
      ["get", path, "k", "extra"],
      ["stats", path, "--watch"],
      ["stats", path, "--watch", "soon"],
      ["stats", path, "--json", "--prometheus"],
      ["stats", path, "--count", "3"],
      ["keys", path, "--limit", "-1"],
      ["keys", path, "--nope"],
      ["set", path, "k", "v", "--ttl", "-5"],
      ["set", path, "", "v"],
      ["create", path + ".x", "--capacity", "12 parsecs"],
      ["create", path + ".x", "--capacity", "1K"],
      ["create", path + ".x", "--max-key", "0"],
      ["create", path + ".x", "--mode", "999"],
      ["verify", path, "--repair=yes"],
    ]
    for args in cases {
      let r = try Self.cli(args)
      #expect(r.status == 64 && !r.signaled, "\(args): \(r.status) \(r.err)")
      #expect(r.err.hasPrefix("error: "), "\(args): \(r.err)")
      #expect(r.err.contains("usage: mapped-cache"), "\(args): \(r.err)")
      #expect(r.out.isEmpty, "\(args)")
    }
    #expect(!FileManager.default.fileExists(atPath: path + ".x"))
    // The command's own usage line, not the tool's.
    let r = try Self.cli(["stats", path, "--json", "--prometheus"])
    #expect(r.err.contains("usage: mapped-cache stats PATH [--json] [--watch SECONDS]"))
  }

  // MARK: A fresh cache, command by command

  @Test func createAndInfo() throws {
    let path = TestFiles.tempPath("create")
    defer { TestFiles.cleanup(path) }
    let c = try Self.cli([
      "create", path, "--capacity", "8M", "--max-key", "100", "--max-value", "64K", "--type", "string",
    ])
    #expect(c.status == 0, "\(c.err)")
    #expect(c.text.hasPrefix("created \(path): 8.0 MiB"))
    var st = stat()
    #expect(stat(path, &st) == 0)
    #expect(st.st_size == 8 << 20)
    #expect(st.st_mode & 0o777 == 0o600)

    // create never touches an existing file.
    let before = Self.fileBytes(path)
    let again = try Self.cli(["create", path])
    #expect(again.status == 3)
    #expect(again.err.contains("already exists"))
    #expect(Self.fileBytes(path) == before)

    let info = try Self.cli(["info", path])
    #expect(info.status == 0)
    for expected in [
      "format version", "8.0 MiB (8,388,608 B)", "max key         100 B", "max value       64.0 KiB",
      "value type      string", "slots", "small log", "main log", "created",
    ] {
      #expect(info.text.contains(expected), "info lacks \(expected):\n\(info.text)")
    }
    let j = try #require(try Self.json(try Self.cli(["info", path, "--json"])) as? [String: Any])
    #expect(j["capacity_bytes"] as? Int == 8 << 20)
    #expect(j["max_key_bytes"] as? Int == 100)
    #expect(j["max_value_bytes"] as? Int == 64 << 10)
    #expect(j["format_version"] as? Int == Int(Format.version))
    #expect(j["value_type"] as? String == "string")
    #expect((j["slot_count"] as? Int ?? 0) >= 1024)
    // The typed library accepts the file the tool made for its type.
    let typed = try SharedCache<String>(path: path)
    try typed.setObject("hello", forKey: "greeting")
    let got = try Self.cli(["get", path, "greeting"])
    #expect(got.status == 0 && got.text == "hello")
  }

  @Test func setGetDeleteRoundTrip() throws {
    let path = try Self.freshCache("entries")
    defer { TestFiles.cleanup(path) }
    #expect(try Self.cli(["set", path, "alpha", "one"]).status == 0)
    let g = try Self.cli(["get", path, "alpha"])
    #expect(g.status == 0)
    #expect(g.out == Data("one".utf8))  // raw bytes, no newline

    // Binary value through stdin, every byte value.
    let binary = Data((0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
    #expect(try Self.cli(["set", path, "bin", "-"], stdin: binary).status == 0)
    #expect(try Self.cli(["get", path, "bin"]).out == binary)
    // Empty value; key starting with a dash after --.
    #expect(try Self.cli(["set", path, "empty", ""]).status == 0)
    let e = try Self.cli(["get", path, "empty"])
    #expect(e.status == 0 && e.out.isEmpty)
    #expect(try Self.cli(["set", path, "--", "-dash", "x"]).status == 0)
    #expect(try Self.cli(["get", path, "--", "-dash"]).text == "x")

    let miss = try Self.cli(["get", path, "nope"])
    #expect(miss.status == 1 && miss.out.isEmpty && miss.err.contains("not found"))
    #expect(try Self.cli(["delete", path, "alpha"]).status == 0)
    #expect(try Self.cli(["delete", path, "alpha"]).status == 1)
    #expect(try Self.cli(["get", path, "alpha"]).status == 1)

    // Limits are the file's: a too-long key or value is exit 3 and stores nothing.
    let longKey = String(repeating: "k", count: 251)
    let lk = try Self.cli(["set", path, longKey, "v"])
    #expect(lk.status == 3 && lk.err.contains("exceeds"))
    let big = Data(count: 2 << 20)
    let bv = try Self.cli(["set", path, "big", "-"], stdin: big)
    #expect(bv.status == 3 && bv.err.contains("limit"))
    #expect(try Self.cli(["get", path, "big"]).status == 1)

    // TTL: present before it passes, gone after. (Presence is checked on an entry with a
    // long TTL: a loaded machine can take longer than a short TTL to start `get`.)
    #expect(try Self.cli(["set", path, "lasting", "x", "--ttl", "600"]).status == 0)
    #expect(try Self.cli(["get", path, "lasting"]).status == 0)
    #expect(try Self.cli(["set", path, "brief", "x", "--ttl", "0.3"]).status == 0)
    usleep(450_000)
    #expect(try Self.cli(["get", path, "brief"]).status == 1)
  }

  @Test func keysAndDump() throws {
    let path = try Self.freshCache("keys")
    defer { TestFiles.cleanup(path) }
    for i in 0..<20 { try Self.cli(["set", path, "user:\(i)", String(repeating: "v", count: i + 1)]) }
    try Self.cli(["set", path, "other", "12345", "--ttl", "1h"])
    try Self.cli(["set", path, "raw", "-"], stdin: Data([0xFF, 0x00, 0x41]))

    let all = try Self.cli(["keys", path])
    #expect(all.status == 0)
    let lines = all.text.split(separator: "\n")
    #expect(lines.first?.hasPrefix("KEY") == true)
    #expect(lines.last == "22 entries, 218 B of values")  // 1+...+20, 5, 3
    let other = try #require(lines.first { $0.hasPrefix("other ") })
    #expect(other.contains("5 B"))
    #expect(other.hasSuffix(" s"))  // remaining TTL in seconds
    #expect(lines.contains { $0.hasPrefix("user:3 ") && $0.hasSuffix("never") })

    let j = try #require(
      try Self.json(try Self.cli(["keys", path, "--prefix", "user:", "--json"])) as? [[String: Any]])
    #expect(j.count == 20)
    #expect(Set(j.compactMap { $0["key"] as? String }) == Set((0..<20).map { "user:\($0)" }))
    for e in j {
      let k = e["key"] as! String
      #expect(e["value_bytes"] as? Int == Int(k.dropFirst(5))! + 1)
      #expect(e["ttl_seconds"] is NSNull)
    }
    let limited = try #require(
      try Self.json(try Self.cli(["keys", path, "--limit", "3", "--json"])) as? [[String: Any]])
    #expect(limited.count == 3)
    let ttl = try #require(
      try Self.json(try Self.cli(["keys", path, "--prefix", "other", "--json"])) as? [[String: Any]])
    let seconds = try #require(ttl.first?["ttl_seconds"] as? Double)
    #expect(seconds > 3500 && seconds <= 3600)

    let dump = try #require(try Self.json(try Self.cli(["dump", path, "--json", "--values"])) as? [[String: Any]])
    #expect(dump.count == 22)
    let byKey = Dictionary(uniqueKeysWithValues: dump.map { ($0["key"] as! String, $0) })
    #expect(byKey["user:4"]?["value"] as? String == "vvvvv")
    #expect(byKey["raw"]?["value_base64"] as? String == Data([0xFF, 0x00, 0x41]).base64EncodedString())
    #expect(byKey["other"]?["expires"] is String)
    #expect(byKey["user:0"]?["expires"] is NSNull)
    #expect(byKey["user:0"]?["version"] is Int)
    let human = try Self.cli(["dump", path, "--values", "--prefix", "raw"])
    #expect(human.text.contains("\\xff\\x00A"))
    #expect(human.text.hasPrefix("KEY"))
    // Stable JSON: the same data prints the same bytes (entries without a TTL, whose
    // remaining time would differ).
    // A reader that goes away: exit 3 with a message, not death by SIGPIPE.
    let gone = try ChildProcess.run(
      TestFiles.binary("mapped-cache"), ["dump", path, "--values"], stdout: .unread, stderr: .discarded)
    #expect(!gone.signaled && gone.status == 3)

    let d1 = try Self.cli(["dump", path, "--json", "--prefix", "user:"])
    #expect(d1.out == (try Self.cli(["dump", path, "--json", "--prefix", "user:"]).out))
  }

  @Test func statsJSONPrometheusAndWatch() throws {
    let path = try Self.freshCache("stats")
    defer { TestFiles.cleanup(path) }
    for i in 0..<10 { try Self.cli(["set", path, "k\(i)", "value-\(i)"]) }
    let cache = try SharedCache<[UInt8]>(path: path)
    for i in 0..<15 { _ = try cache.object(forKey: "k\(i)") }  // 10 hits, 5 misses

    let human = try Self.cli(["stats", path])
    #expect(human.status == 0)
    for expected in [
      "entries", "live bytes", "capacity", "fill", "hits", "misses", "hit ratio", "66.7 %", "sets",
      "evictions", "expirations", "recoveries", "table load", "second place", "index", "partitions",
      "clock hand", "sweeper hand", "4.0 MiB",
    ] {
      #expect(human.text.contains(expected), "stats lacks \(expected)")
    }
    let a = try Self.cli(["stats", path, "--json"])
    let j = try #require(try Self.json(a) as? [String: Any])
    #expect(j["entries"] as? Int == 10)
    #expect(j["sets"] as? Int == 10)
    #expect(j["hits"] as? Int == 10 && j["misses"] as? Int == 5)
    #expect(j["capacity_bytes"] as? Int == 4 << 20)
    let table = try #require(j["table"] as? [String: Any])
    #expect(table["occupied_slots"] as? Int == 10)
    #expect(table["partitions"] as? Int == 2 && table["index_splits"] as? Int == 0)
    #expect((j["processes"] as? [Any])?.count == 1)  // this test process holds the file open
    #expect(try Self.cli(["stats", path, "--json"]).out == a.out)  // stable

    let prom = try Self.cli(["stats", path, "--prometheus"]).text
    #expect(prom.contains("# TYPE mappedcache_hits_total counter\n"))
    #expect(prom.contains("mappedcache_entries{path=\"\(path)\"} 10\n"))
    #expect(prom.contains("mappedcache_hits_total{path=\"\(path)\"} 10\n"))
    for line in prom.split(separator: "\n") where !line.hasPrefix("#") {
      #expect(line.wholeMatch(of: /mappedcache_[a-z_]+\{path="[^"]*"\} -?[0-9.e+-]+/) != nil, "bad line \(line)")
    }

    let w = try Self.cli(["stats", path, "--watch", "0.2", "--count", "3"])
    #expect(w.status == 0)
    #expect(w.text.components(separatedBy: "FIGURE").count == 4)
    #expect(w.text.components(separatedBy: "RATE").count == 3)  // rates from the second refresh
    #expect(w.text.contains("/s"))
    let wj = try Self.cli(["stats", path, "--watch", "0.2", "--count", "2", "--json"])
    let objects = wj.text.split(separator: "\n").map {
      try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
    }
    #expect(objects.count == 2)
    #expect(objects.last??["rates_per_second"] is [String: Any])

    // Interrupted: a clean exit 0, not a death by signal.
    let p = try ChildProcess(TestFiles.binary("mapped-cache"), ["stats", path, "--watch", "0.1"])
    usleep(400_000)
    p.kill(SIGINT)
    #expect(p.wait().ok)
  }

  /// `grow`: the file grows with its entries, `info` and `stats` show it, a policy is
  /// stored and cleared, and bad requests are usage errors or refusals.
  @Test func growAndGrowthPolicy() throws {
    let path = try Self.freshCache("cli-grow")
    defer { TestFiles.cleanup(path) }
    for i in 0..<20 { try Self.cli(["set", path, "k\(i)", "v\(i)"]) }
    let g = try Self.cli(["grow", path, "--capacity", "8MiB", "--json"])
    #expect(g.status == 0, "\(g.err)")
    let o = try #require(try Self.json(g) as? [String: Any])
    #expect((o["capacity"] as? Int ?? 0) > 4 << 20 && (o["partitions"] as? Int) == 4)
    for i in 0..<20 { #expect(try Self.cli(["get", path, "k\(i)"]).text == "v\(i)") }
    let info = try #require(try Self.json(try Self.cli(["info", path, "--json"])) as? [String: Any])
    #expect(info["capacity_bytes"] as? Int == o["capacity"] as? Int)
    #expect(try Self.cli(["grow", path, "--policy", "0.05:2:30:1000"]).status == 0)
    let st = try #require(try Self.json(try Self.cli(["stats", path, "--json"])) as? [String: Any])
    #expect(st["growths"] as? Int == 1)
    #expect((st["growth_policy"] as? [String: Any])?["minimum_inserts"] as? Int == 1000)
    #expect(try Self.cli(["stats", path]).text.contains("growth policy"))
    #expect(try Self.cli(["grow", path, "--policy", "off"]).status == 0)
    let off = try #require(try Self.json(try Self.cli(["stats", path, "--json"])) as? [String: Any])
    #expect(off["growth_policy"] is NSNull)
    #expect(try Self.cli(["grow", path]).status == 64)
    #expect(try Self.cli(["grow", path, "--policy", "fast"]).status == 64)
    #expect(try Self.cli(["grow", path, "--policy", "7"]).status != 0, "a rate past 1 is refused")
    #expect(try Self.cli(["grow", path, "--capacity", "1MiB"]).status != 0, "caches only grow")
  }

  @Test func sweepClearVerifyOnFreshCache() throws {
    let path = try Self.freshCache("maint")
    defer { TestFiles.cleanup(path) }
    for i in 0..<30 { try Self.cli(["set", path, "k\(i)", "v", "--ttl", i < 10 ? "0.2" : "0"]) }
    usleep(300_000)
    let s = try Self.cli(["sweep", path])
    #expect(s.status == 0 && s.text == "removed 10 expired entries\n")
    #expect(try Self.cli(["sweep", path]).text == "removed 0 expired entries\n")
    let v = try Self.cli(["verify", path])
    #expect(v.status == 0)
    #expect(v.text.contains("OK: \(path) is consistent"))
    let vj = try #require(try Self.json(try Self.cli(["verify", path, "--json"])) as? [String: Any])
    #expect(vj["ok"] as? Bool == true && vj["entries"] as? Int == 20)
    // The ten swept entries' records stay in the log, dead, until its tail passes.
    let logBytes = try #require(vj["log_bytes"] as? Int)
    let deadBytes = try #require(vj["dead_bytes"] as? Int)
    #expect(deadBytes > 0 && deadBytes < logBytes, "\(deadBytes) of \(logBytes)")
    #expect(v.text.contains("dead bytes"))
    let c = try Self.cli(["clear", path])
    #expect(c.status == 0 && c.text.contains("20 before"))
    let j = try #require(try Self.json(try Self.cli(["stats", path, "--json"])) as? [String: Any])
    #expect(j["entries"] as? Int == 0)
    #expect(try Self.cli(["keys", path]).text.hasSuffix("0 entries, 0 B of values\n"))
  }

  // MARK: A busy cache

  @Test func commandsWorkOnABusyCache() throws {
    let path = try Self.freshCache("busy")
    defer { TestFiles.cleanup(path) }
    // Two writers: cache-stress (checks every value it reads) and a helper whose
    // entries expire and get removed, so that sweep has work.
    let stress = try ChildProcess(
      TestFiles.binary("cache-stress"),
      ["--path", path, "--duration", "3", "--procs", "1", "--keys", "20000", "--read-pct", "50"],
      stdout: .discarded, stderr: .discarded)
    defer { stress.kill() }
    let writer = try ChildProcess(
      TestFiles.binary("mc-test-helper"), ["cli-writer", path, "3"], stdout: .discarded, stderr: .discarded)
    defer { writer.kill() }
    usleep(300_000)
    var rounds = 0
    while (writer.isRunning || stress.isRunning) && rounds < 40 {
      rounds += 1
      for args in [
        ["stats", path], ["stats", path, "--json"], ["stats", path, "--prometheus"], ["info", path],
        ["keys", path, "--limit", "50"], ["dump", path, "--json", "--values", "--limit", "20"],
        ["set", path, "cli-\(rounds)", "x"], ["sweep", path], ["verify", path],
      ] {
        let r = try Self.cli(args)
        #expect(!r.signaled && r.status == 0, "\(args): \(r.status) \(r.err)")
        if args[0] == "stats" && args.count == 3 && args[2] == "--json" {
          #expect((try? Self.json(r)) is [String: Any])
        }
      }
      let g = try Self.cli(["get", path, "w\(rounds)"])
      #expect(!g.signaled && (g.status == 0 || g.status == 1), "get: \(g.status) \(g.err)")
      let d = try Self.cli(["delete", path, "w\(rounds + 1)"])
      #expect(!d.signaled && (d.status == 0 || d.status == 1), "delete: \(d.status) \(d.err)")
    }
    #expect(writer.wait().status == 0)
    #expect(stress.wait().status == 0, "cache-stress saw a bad value or failed while the tool ran")
    #expect(rounds >= 2)
    let v = try Self.cli(["verify", path])
    #expect(v.status == 0, "\(v.text)")
  }

  // MARK: A damaged cache

  /// Reads and writes little-endian words of a cache file with FileHandle, at offsets
  /// computed from its header (the way an outside tool would damage it).
  struct RawFile {
    let handle: FileHandle
    init(_ path: String) throws { handle = try FileHandle(forUpdating: URL(fileURLWithPath: path)) }
    func read(_ offset: Int, _ count: Int) throws -> [UInt8] {
      try handle.seek(toOffset: UInt64(offset))
      return Array(try handle.read(upToCount: count) ?? Data())
    }
    func u64(_ offset: Int) throws -> UInt64 {
      try read(offset, 8).enumerated().reduce(0) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
    }
    func u32(_ offset: Int) throws -> UInt32 { UInt32(truncatingIfNeeded: try u64(offset)) }
    func u16(_ offset: Int) throws -> Int { Int(try u64(offset) & 0xFFFF) }
    func write(_ offset: Int, _ bytes: [UInt8]) throws {
      try handle.seek(toOffset: UInt64(offset))
      try handle.write(contentsOf: Data(bytes))
    }
    func write64(_ offset: Int, _ v: UInt64) throws {
      try write(offset, (0..<8).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) })
    }

    // The layout, from the header (format 5).
    var partitionsOffset: Int { get throws { Int(try u64(Format.HeaderOffset.partitionsOffset)) } }
    var partitionBytes: Int { get throws { Int(try u64(Format.HeaderOffset.partitionBytes)) } }
    var partitionCount: Int { get throws { Int(try u64(Format.HeaderOffset.partitionCount)) } }
    func partition(_ p: Int) throws -> Int { try partitionsOffset + p * partitionBytes }
    func groups(_ p: Int) throws -> Int { Int(try u32(try partition(p) + Format.PartitionOffset.geometry)) }

    /// One occupied slot: its partition and bucket number, and where its bytes are.
    struct Slot {
      var partition: Int
      var bucket: Int
      var slot: Int
      var bucketOffset: Int
      var tagOffset: Int { bucketOffset + Format.BucketOffset.tags + 2 * slot }
      var wordOffset: Int { bucketOffset + Format.BucketOffset.words + 4 * slot }
    }

    /// Every occupied slot (its tag nonzero), partition by partition.
    func occupiedSlots() throws -> [Slot] {
      var out: [Slot] = []
      for p in 0..<(try partitionCount) {
        let base = try partition(p)
        let end = base + (try partitionBytes)
        for g in 0..<(try groups(p)) {
          for b in 0..<Format.bucketsPerGroup {
            let bucket = end - (g + 1) * Format.groupBytes + b * Format.bucketBytes
            for s in 0..<Format.slotsPerBucket where try u16(bucket + Format.BucketOffset.tags + 2 * s) != 0 {
              out.append(Slot(partition: p, bucket: g * Format.bucketsPerGroup + b, slot: s, bucketOffset: bucket))
            }
          }
        }
      }
      return out
    }

    /// The file offset of the record a slot names.
    func record(_ s: Slot) throws -> Int {
      try partition(s.partition) + Int(try u32(s.wordOffset) & Format.offsetMask)
    }

    /// A record's header size, key and value offsets (`RecordFormat`).
    func layout(ofRecord r: Int) throws -> (key: Int, klen: Int, value: Int) {
      let flags = try read(r, 1)[0]
      let form = (flags & RecordFormat.formMask) >> RecordFormat.formShift
      let header = RecordFormat.headerBytes(form: form, expiry: flags & RecordFormat.expiryFlag != 0)
      let klen = form == 2 ? try u16(r + 1) + 1 : Int(try read(r + 1, 1)[0]) + 1
      return (r + header, klen, r + header + klen)
    }

    func key(ofRecord r: Int) throws -> String {
      let l = try layout(ofRecord: r)
      return String(decoding: try read(l.key, l.klen), as: UTF8.self)
    }
  }

  @Test func verifyReportsDamageAndRepairFixesIt() throws {
    let path = try Self.freshCache("damage", ["--partitions", "1"])
    defer { TestFiles.cleanup(path) }
    let cache = try SharedCache<[UInt8]>(path: path)
    for i in 0..<200 { try cache.setObject([UInt8](repeating: UInt8(i), count: 100 + i), forKey: "key\(i)") }

    let raw = try RawFile(path)
    let occupied = try raw.occupiedSlots()
    try #require(occupied.count == 200)
    try #require(try raw.partitionCount == 1)
    // 1. A flipped byte in a record's value: its checksum no longer matches.
    let r0 = try raw.record(occupied[0])
    let key0 = try raw.key(ofRecord: r0)
    let valueByte = try raw.layout(ofRecord: r0).value + 3
    try raw.write(valueByte, [try raw.read(valueByte, 1)[0] ^ 0xFF])
    // 2. A slot pointing at no record at all.
    let key1 = try raw.key(ofRecord: try raw.record(occupied[1]))
    try raw.write(occupied[1].wordOffset, [0x39, 0x30, 0, 0])  // offset 12345
    // 3. A bucket left mid-write (odd seqlock): its entries are checked and kept.
    let odd = try #require(occupied.first { $0.bucket != occupied[0].bucket && $0.bucket != occupied[1].bucket })
    let seq = try raw.u32(odd.bucketOffset + Format.BucketOffset.seq)
    try raw.write(
      odd.bucketOffset + Format.BucketOffset.seq, (0..<4).map { UInt8(truncatingIfNeeded: (seq | 1) >> (8 * $0)) })
    // 4. An entry count that disagrees with the slots.
    try raw.write64(try raw.partition(0) + Format.PartitionOffset.entries, 100_000)
    try raw.handle.close()

    let v = try Self.cli(["verify", path])
    #expect(v.status == 2 && !v.signaled)
    #expect(
      v.text.contains("problem: bucket \(occupied[0].bucket) slot \(occupied[0].slot): value checksum mismatch"),
      "\(v.text)")
    #expect(
      v.text.contains(
        "problem: bucket \(occupied[1].bucket) slot \(occupied[1].slot): record offset 12345 is not a valid entry"))
    #expect(v.text.contains("problem: bucket \(odd.bucket): left mid-write"))
    #expect(v.text.contains("counts say 100000 entries"))
    #expect(v.text.contains("DAMAGED"))
    let vj = try #require(try Self.json(try Self.cli(["verify", path, "--json"])) as? [String: Any])
    #expect(vj["ok"] as? Bool == false && vj["sound"] as? Bool == false)
    #expect((vj["problems"] as? [String])?.count == 4)

    // The damaged value is never served.
    #expect(try Self.cli(["get", path, key0]).status == 1)

    let r = try Self.cli(["verify", path, "--repair"])
    #expect(r.status == 0, "\(r.text) \(r.err)")
    #expect(r.text.contains("REPAIRED"))
    #expect(r.text.contains("repaired: 4 fixes"), "\(r.text)")
    let after = try Self.cli(["verify", path])
    #expect(after.status == 0, "\(after.text)")
    #expect(after.text.contains("OK"))
    // What could not be trusted was dropped; everything else is intact.
    #expect(try Self.cli(["get", path, key0]).status == 1)
    #expect(try Self.cli(["get", path, key1]).status == 1)
    let j = try #require(try Self.json(try Self.cli(["stats", path, "--json"])) as? [String: Any])
    #expect(j["entries"] as? Int == 198)
    var intact = 0
    for i in 0..<200 {
      let g = try cache.object(forKey: "key\(i)")
      if let g {
        #expect(g == [UInt8](repeating: UInt8(i), count: 100 + i))
        intact += 1
      }
    }
    #expect(intact == 198, "all but the two damaged entries")
    #expect(try Self.cli(["set", path, "new", "works"]).status == 0)
  }

  @Test(arguments: [[], ["--partitions", "2"]])  // one partition; two
  func hostileBytesNeverKillTheTool(createOptions: [String]) throws {
    let path = try Self.freshCache("hostile", createOptions)
    defer { TestFiles.cleanup(path) }
    var rng = SplitMix(0xC11)
    let commands: [[String]] = [
      ["info", path], ["stats", path], ["stats", path, "--json"], ["stats", path, "--prometheus"],
      ["keys", path], ["dump", path, "--values"], ["get", path, "k1"], ["set", path, "k1", "v"],
      ["delete", path, "k2"], ["verify", path], ["sweep", path], ["verify", path, "--repair"],
      ["clear", path],
    ]
    for round in 0..<4 {
      // Refill, then damage state words, slots and records with random bytes.
      let cache = try SharedCache<[UInt8]>(path: path)
      for i in 0..<300 { try cache.setObject([UInt8](repeating: 1, count: rng.inRange(1...400)), forKey: "k\(i)") }
      let raw = try RawFile(path)
      let part = try raw.partition(rng.below(try raw.partitionCount))
      let words =
        [
          Format.PartitionOffset.geometry, Format.PartitionOffset.smallHead, Format.PartitionOffset.smallTail,
          Format.PartitionOffset.mainHead,
          Format.PartitionOffset.mainTail,
          Format.PartitionOffset.mainLastWrap, Format.PartitionOffset.mainLimit,
          Format.PartitionOffset.mainPendingLimit, Format.PartitionOffset.entries,
          Format.PartitionOffset.liveBytes, Format.PartitionOffset.sweepHand, Format.PartitionOffset.intent,
          Format.PartitionOffset.sets, Format.PartitionOffset.moves,
        ].map { part + $0 } + [
          Format.HeaderOffset.countLimit, Format.HeaderOffset.costLimit, Format.HeaderOffset.retiredHits,
        ]
      if round == 0 {
        // Counters at their extremes (a conversion to Int must not trap).
        try raw.write64(part + Format.PartitionOffset.entries, UInt64.max)
        try raw.write64(part + Format.PartitionOffset.liveBytes, UInt64.max)
      } else {
        for _ in 0..<3 { try raw.write64(words[rng.below(words.count)], rng.next() >> UInt64(rng.below(64))) }
      }
      let slots = try raw.occupiedSlots()
      for _ in 0..<(round == 0 || slots.isEmpty ? 0 : 20) {
        let s = slots[rng.below(slots.count)]
        try raw.write64(s.bucketOffset + 8 * rng.below(Format.bucketBytes / 8), rng.next())
      }
      for _ in 0..<(round == 0 || slots.isEmpty ? 0 : 20) {
        let s = slots[rng.below(slots.count)]
        let r = try raw.record(s)
        if r < (4 << 20) - 64 { try raw.write(r + rng.below(40), [UInt8(rng.below(256))]) }
      }
      try raw.handle.close()
      for args in commands {
        let r = try Self.cli(args, timeout: 20)
        #expect(!r.signaled, "round \(round) \(args): killed by signal \(r.status)")
        #expect([0, 1, 2, 3].contains(r.status), "round \(round) \(args): exit \(r.status) \(r.err)")
      }
      // After repair and clear, the file is sound again.
      #expect(try Self.cli(["verify", path]).status == 0, "round \(round)")
    }
  }

  // MARK: Files that are not caches

  @Test func filesThatAreNotCachesAreLeftUntouched() throws {
    var rng = SplitMix(42)
    let random = Data((0..<(2 << 20)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
    var fakeMagic = Data("MCACHE01".utf8)  // the magic, then garbage: a damaged header
    fakeMagic.append(random.prefix(1 << 20))
    // (Unfinished creations, empty or marked: see ReliabilityCreationTests.)
    let contents: [(String, Data)] = [
      ("random", random), ("text", Data("hello, world\n".utf8)), ("empty", Data()),
      ("magic", fakeMagic),
    ]
    for (tag, data) in contents {
      let path = TestFiles.tempPath("notcache-\(tag)")
      defer { TestFiles.cleanup(path) }
      #expect(FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600]))
      for args in [
        ["info", path], ["stats", path], ["stats", path, "--json"], ["stats", path, "--prometheus"],
        ["get", path, "k"], ["set", path, "k", "v"], ["delete", path, "k"], ["keys", path],
        ["dump", path, "--values"], ["verify", path], ["verify", path, "--repair"], ["sweep", path],
        ["clear", path],
      ] {
        let r = try Self.cli(args)
        #expect(r.status == 2 && !r.signaled, "\(tag) \(args): \(r.status) \(r.err)")
        #expect(r.err.hasPrefix("error: "), "\(tag) \(args)")
        #expect(r.out.isEmpty, "\(tag) \(args)")
        #expect(Self.fileBytes(path) == data, "\(tag) \(args) changed the file")
      }
      if !data.isEmpty {
        let c = try Self.cli(["create", path])
        #expect(c.status == 3 && Self.fileBytes(path) == data)
      }
    }
    // A directory is not a cache either; a missing file is another failure (3).
    let dir = TestFiles.tempPath("dir")
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
    defer { rmdir(dir) }
    #expect(try Self.cli(["info", dir]).status == 2)
    #expect(try Self.cli(["set", dir, "k", "v"]).status == 2)
    let missing = try Self.cli(["info", "/dev/shm/no-such-cache-\(getpid())"])
    #expect(missing.status == 3 && missing.err.contains("no such file"))
  }
}
