import Foundation
import Glibc
import TestSupport
import Testing

/// Issue 21, item 3: ENOSPC and EIO on the paths that can see them. An LD_PRELOAD
/// library (Tests/FaultInjection/fault_inject.c, compiled here with `cc`) fails chosen
/// calls; `mapped-cache` and `mc-test-helper` run under it. Creation is the only write
/// path that makes such calls: after it, stores go to reserved blocks of the mapping,
/// and the tests prove that even with every such call failing nothing changes. A full
/// tmpfs (root only) and a sparse cache on it complete the picture.
@Suite(.serialized) struct ReliabilityFaultTests {
  /// The fault library, built for one test and removed after it.
  final class FaultLibrary {
    let path = "/tmp/mc-fault-\(getpid())-\(UUID().uuidString.prefix(8)).so"
    let log = "/tmp/mc-fault-\(getpid())-\(UUID().uuidString.prefix(8)).log"

    init() throws {
      let source = TestFiles.repository + "/Tests/FaultInjection/fault_inject.c"
      let compilers: [String] = ["/usr/bin/cc", "/usr/bin/gcc", "/usr/bin/clang"]
      let cc = compilers.first { access($0, X_OK) == 0 }
      let compiler = try #require(cc, "no C compiler (cc, gcc or clang) to build the fault library")
      let r = try ChildProcess.run(compiler, ["-shared", "-fPIC", "-O1", "-o", path, source, "-ldl"], timeout: 120)
      try #require(r.status == 0 && !r.signaled, "building the fault library failed: \(r.stderr)")
    }

    /// The environment that makes `calls` fail with `errno` on descriptors whose path
    /// contains `pattern`.
    func environment(calls: String, errno: String, pattern: String? = nil) -> [String: String] {
      var env = ["LD_PRELOAD": path, "MC_FAULT_CALLS": calls, "MC_FAULT_ERRNO": errno, "MC_FAULT_LOG": log]
      if let pattern { env["MC_FAULT_PATH"] = pattern }
      return env
    }

    /// The failures injected so far ("NAME errno" lines), and forgets them.
    func takeLog() -> [String] {
      defer { unlink(log) }
      let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
      return text.split(separator: "\n").map(String.init)
    }

    deinit {
      unlink(path)
      unlink(log)
    }
  }

  struct Outcome {
    var status: Int32
    var signaled: Bool
    var out: String
    var err: String
    var fields: [String: String] { RelSupport.fields(out) }
  }

  /// Runs `binary` with `env` added, stdout into a file (or `stdoutPath`, e.g.
  /// /dev/full), stderr into another.
  static func run(
    _ binary: String, _ args: [String], env: [String: String] = [:], stdoutPath: String? = nil
  ) throws -> Outcome {
    let outPath = stdoutPath ?? "/tmp/mc-fault-out-\(getpid())-\(UUID().uuidString.prefix(8))"
    let errPath = "/tmp/mc-fault-err-\(getpid())-\(UUID().uuidString.prefix(8))"
    if stdoutPath == nil { _ = FileManager.default.createFile(atPath: outPath, contents: nil) }
    _ = FileManager.default.createFile(atPath: errPath, contents: nil)
    defer {
      if stdoutPath == nil { unlink(outPath) }
      unlink(errPath)
    }
    let r = try ChildProcess.run(
      binary, args, environment: env, stdout: .file(outPath), stderr: .file(errPath), timeout: 60)
    let out = stdoutPath == nil ? (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "" : ""
    return Outcome(
      status: r.status, signaled: r.signaled, out: out,
      err: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "")
  }

  static var tool: String { TestFiles.binary("mapped-cache") }
  static func exists(_ path: String) -> Bool {
    var st = stat()
    return lstat(path, &st) == 0
  }

  // MARK: Creation, the one path that writes with system calls

  /// Each call of creation that can see a full or failing disk, failed in turn: the
  /// tool exits 3 saying why (no space, or the I/O error) and leaves no file; the
  /// library throws `diskFull` or `system(EIO)` and leaves no file either (the opener
  /// removes the file its failed creation made).
  @Test func faultsDuringCreationAreClearErrorsAndLeaveNoCache() throws {
    let lib = try FaultLibrary()
    for call in ["pwrite", "posix_fallocate"] {
      for errno in ["ENOSPC", "EIO"] {
        let what = "\(call) \(errno)"
        let path = TestFiles.tempPath("fault-create")
        defer { TestFiles.cleanup(path) }
        let env = lib.environment(calls: call, errno: errno)

        let create = try Self.run(Self.tool, ["create", path, "--capacity", "2M"], env: env)
        #expect(create.status == 3 && !create.signaled, "\(what): \(create.status) \(create.err)")
        let says =
          errno == "ENOSPC"
          ? "no space to reserve 2097152 bytes for \(path)" : "(reserving \(path)): Input/output error (EIO"
        #expect(create.err.contains(says), "\(what): \(create.err)")
        #expect(!Self.exists(path), "\(what): create left a file behind")
        #expect(lib.takeLog().contains("\(call) \(errno == "EIO" ? EIO : ENOSPC)"), "\(what): the fault never fired")

        let helper = try Self.run(RelSupport.helper, ["create", path, "\(2 << 20)"], env: env)
        let expected = errno == "ENOSPC" ? "diskFull" : "system(\(EIO))"
        #expect(!helper.signaled && helper.fields["create"] == expected, "\(what): \(helper.status) \(helper.out)")
        #expect(!lib.takeLog().isEmpty, "\(what): the fault never fired in the library")
        #expect(!Self.exists(path), "\(what): the library left a file behind")
        // The next creation, without faults, makes the cache.
        let again = try Self.run(RelSupport.helper, ["create", path, "\(2 << 20)"])
        #expect(again.fields["create"] == "ok" && again.fields["verify"] == "true", "\(what): \(again.out)")
      }
    }

    // The space reservation fails and so does the truncation after it: the file, with
    // its creation marker, is removed all the same.
    let path = TestFiles.tempPath("fault-marked")
    defer { TestFiles.cleanup(path) }
    let both = try Self.run(
      Self.tool, ["create", path, "--capacity", "2M"],
      env: lib.environment(calls: "posix_fallocate,ftruncate", errno: "ENOSPC"))
    #expect(both.status == 3 && both.err.contains("no space to reserve"), "\(both.err)")
    #expect(Set(lib.takeLog()) == ["posix_fallocate \(ENOSPC)", "ftruncate \(ENOSPC)"])
    #expect(!Self.exists(path), "a marked file was left behind")
    #expect(try Self.run(Self.tool, ["create", path, "--capacity", "2M"]).status == 0)
    #expect(try Self.run(Self.tool, ["verify", path]).status == 0)
  }

  // MARK: After creation: no call that can fail

  /// With every intercepted call on the cache file failing (EIO, then ENOSPC), a
  /// process opens an existing cache, finds all 100 entries, rewrites them, touches,
  /// removes, sweeps and repairs: nothing fails, because none of it makes such a call
  /// (the fault log stays empty), and every entry is there afterwards. The tool's
  /// writing commands the same.
  @Test func writesAfterCreationMakeNoCallThatCanFail() throws {
    let lib = try FaultLibrary()
    let path = TestFiles.tempPath("fault-writes")
    defer { TestFiles.cleanup(path) }
    let name = (path as NSString).lastPathComponent
    for errno in ["EIO", "ENOSPC"] {
      // Version 1 of every entry, written without faults.
      let seed = try Self.run(RelSupport.helper, ["fault-seed", path, "100"])
      #expect(seed.fields["seeded"] == "100", "\(seed.out) \(seed.err)")
      let env = lib.environment(calls: "all", errno: errno, pattern: name)
      let probe = try Self.run(RelSupport.helper, ["fault-probe", path, "100"], env: env)
      let f = probe.fields
      #expect(!probe.signaled && probe.status == 0, "\(errno): \(probe.status) \(probe.err)")
      #expect(f["open"] == "ok" && f["kept"] == "100", "\(errno): \(probe.out)")
      #expect(f["writes"] == "ok" && f["verify"] == "true" && f["after"] == "100", "\(errno): \(probe.out)")
      for args in [
        ["set", path, "k", "v", "--ttl", "1h"], ["get", path, "k"], ["delete", path, "k"], ["sweep", path],
        ["verify", path, "--repair"],
      ] {
        let r = try Self.run(Self.tool, args, env: env)
        #expect(r.status == 0 && !r.signaled, "\(errno) \(args): \(r.status) \(r.err)")
      }
      #expect(lib.takeLog().isEmpty, "\(errno): a call on the cache file was made (and failed)")
    }
    // Without faults: every entry holds the value written under them.
    let check = try Self.run(RelSupport.helper, ["fault-probe", path, "100"])
    #expect(check.fields["after"] == "100" && check.fields["verify"] == "true", "\(check.out)")
  }

  /// Output that cannot be written (stdout on /dev/full, or EIO injected on it) is an
  /// error with exit 3, never a silent success or a signal; the cache is unchanged.
  @Test func toolOutputThatCannotBeWrittenIsAnError() throws {
    let lib = try FaultLibrary()
    let path = TestFiles.tempPath("fault-output")
    defer { TestFiles.cleanup(path) }
    #expect(try Self.run(Self.tool, ["create", path, "--capacity", "1M"]).status == 0)
    #expect(try Self.run(Self.tool, ["set", path, "k", "value"]).status == 0)
    let commands = [
      ["get", path, "k"], ["dump", path, "--values", "--json"], ["info", path], ["stats", path, "--json"],
    ]
    for args in commands {
      let full = try Self.run(Self.tool, args, stdoutPath: "/dev/full")
      #expect(full.status == 3 && !full.signaled, "\(args) > /dev/full: \(full.status) \(full.err)")
      #expect(full.err.contains("No space left on device"), "\(args): \(full.err)")

      let out = "/tmp/mc-fault-stdout-\(getpid())-\(UUID().uuidString.prefix(8))"
      _ = FileManager.default.createFile(atPath: out, contents: nil)
      defer { unlink(out) }
      let env = lib.environment(calls: "write", errno: "EIO", pattern: (out as NSString).lastPathComponent)
      let eio = try Self.run(Self.tool, args, env: env, stdoutPath: out)
      #expect(eio.status == 3 && !eio.signaled, "\(args) with EIO: \(eio.status) \(eio.err)")
      #expect(eio.err.contains("Input/output error"), "\(args): \(eio.err)")
      #expect(lib.takeLog().first == "write \(EIO)", "\(args): the fault never fired")
    }
    let get = try Self.run(Self.tool, ["get", path, "k"])
    #expect(get.status == 0 && get.out == "value")

    // A failure in the middle of a longer output (the third refresh of `stats --watch`,
    // each written as it comes) is reported too, not lost in a silent partial listing.
    let out = "/tmp/mc-fault-stdout-\(getpid())-\(UUID().uuidString.prefix(8))"
    _ = FileManager.default.createFile(atPath: out, contents: nil)
    defer { unlink(out) }
    var env = lib.environment(calls: "write", errno: "EIO", pattern: (out as NSString).lastPathComponent)
    env["MC_FAULT_AFTER"] = "2"
    let watch = try Self.run(Self.tool, ["stats", path, "--watch", "0.05", "--count", "5"], env: env, stdoutPath: out)
    #expect(watch.status == 3 && !watch.signaled && watch.err.contains("Input/output error"), "\(watch.err)")
    #expect(lib.takeLog() == ["write \(EIO)"], "the third write, and only it, failed")
    let written = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
    #expect(written.contains("entries"), "the first two refreshes arrived")
  }

  // MARK: Full file systems (root only)

  /// On a 1 MiB tmpfs, `create` and `set` with creation options larger than the room
  /// exit 3 with the reason and leave no file.
  @Test func theToolOnAFullFileSystem() throws {
    guard let mnt = RelSupport.TmpMount(sizeKiB: 1024) else {
      print("tool on a full fs: mounting a tmpfs needs root; skipped")
      return
    }
    for args in [["create", "CACHE", "--capacity", "2M"], ["set", "CACHE", "k", "v", "--capacity", "2M"]] {
      let path = mnt.dir + "/c.mcache"
      let r = try Self.run(Self.tool, args.map { $0 == "CACHE" ? path : $0 })
      #expect(r.status == 3 && !r.signaled, "\(args): \(r.status) \(r.err)")
      #expect(r.err.contains("no space to reserve 2097152 bytes for \(path)"), "\(args): \(r.err)")
      #expect(!Self.exists(path), "\(args) left a file on the full file system")
    }
  }

  /// A cache whose blocks are holes (copied with `cp --sparse=always`) on a file system
  /// that is then filled: opening it for writing allocates the holes, so on the full
  /// file system it is `diskFull` at open (exit 3 for the tool), not SIGBUS at the first
  /// store; once there is room, it opens, every entry is there, and it is no longer sparse.
  @Test func aSparseCacheOnAFullFileSystemIsDiskFullNotSIGBUS() throws {
    guard let mnt = RelSupport.TmpMount(sizeKiB: 3072) else {
      print("sparse cache on a full fs: mounting a tmpfs needs root; skipped")
      return
    }
    let original = TestFiles.tempPath("fault-sparse")
    defer { TestFiles.cleanup(original) }
    #expect(try Self.run(RelSupport.helper, ["fault-seed", original, "100"]).fields["seeded"] == "100")
    let path = mnt.dir + "/sparse.mcache"
    try #require(RelSupport.tool("/usr/bin/cp", ["--sparse=always", original, path]) == 0)
    var st = stat()
    try #require(stat(path, &st) == 0)
    #expect(Int(st.st_blocks) * 512 < Int(st.st_size), "the copy is not sparse")
    let filler = mnt.dir + "/filler"
    let fd = open(filler, O_CREAT | O_WRONLY, 0o600)
    try #require(fd >= 0)
    let chunk = [UInt8](repeating: 0xAB, count: 4096)
    while chunk.withUnsafeBytes({ write(fd, $0.baseAddress!, $0.count) }) > 0 {}
    close(fd)

    let full = try Self.run(RelSupport.helper, ["fault-probe", path, "100"])
    #expect(!full.signaled && full.status == 0, "status \(full.status) signaled \(full.signaled): \(full.err)")
    #expect(full.fields["open"] == "diskFull", "\(full.out)")
    let set = try Self.run(Self.tool, ["set", path, "k", "v"])
    #expect(set.status == 3 && !set.signaled && set.err.contains("no space to reserve"), "\(set.status) \(set.err)")
    // Reading needs no blocks: the read-only tool still lists what is there.
    #expect(try Self.run(Self.tool, ["get", path, Self.firstKey]).status == 0)

    unlink(filler)
    let room = try Self.run(RelSupport.helper, ["fault-probe", path, "100"])
    #expect(room.fields["open"] == "ok" && room.fields["kept"] == "100", "\(room.out)")
    #expect(room.fields["writes"] == "ok" && room.fields["after"] == "100", "\(room.out)")
    #expect(stat(path, &st) == 0 && Int(st.st_blocks) * 512 >= Int(st.st_size), "still sparse")
  }

  /// `Pattern.key(0)` of the helper.
  static let firstKey = "key-0-"
}
