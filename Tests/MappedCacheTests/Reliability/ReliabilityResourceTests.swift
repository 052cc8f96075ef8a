import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// Full file systems, read-only files, many processes, and leaks.
@Suite(.serialized) struct ReliabilityResourceTests {
  // MARK: Full file system

  /// On a 2 MiB tmpfs: a cache larger than the free space fails at creation with
  /// `diskFull` (and leaves no half-made cache); one that fits keeps working after the
  /// file system fills up, because its blocks were reserved at creation. Every step
  /// runs in a child, so a SIGBUS would show as a signal.
  @Test func fullFileSystemFailsAtCreationNeverLater() throws {
    guard let mnt = RelSupport.TmpMount(sizeKiB: 2048) else {
      print("full-fs: mounting a tmpfs is not permitted here; only the RLIMIT_FSIZE variant runs")
      return
    }
    let big = mnt.dir + "/big.mcache"
    let r1 = try ChildProcess.run(RelSupport.helper, ["create", big, "\(4 << 20)"], timeout: 60)
    #expect(!r1.signaled && r1.status == 0)
    #expect(RelSupport.fields(r1.stdout)["create"] == "diskFull", "\(r1.stdout)")
    var st = stat()
    if stat(big, &st) == 0 { #expect(st.st_size == 0, "a failed creation left \(st.st_size) bytes") }

    let small = mnt.dir + "/small.mcache"
    let r2 = try ChildProcess.run(RelSupport.helper, ["create", small, "\(1 << 20)"], timeout: 120)
    let f2 = RelSupport.fields(r2.stdout)
    #expect(!r2.signaled && r2.status == 0)
    #expect(f2["create"] == "ok" && f2["verify"] == "true", "\(r2.stdout)")

    // Fill the file system to the last block.
    let filler = mnt.dir + "/filler"
    let fd = open(filler, O_CREAT | O_WRONLY, 0o600)
    try #require(fd >= 0)
    let chunk = [UInt8](repeating: 0xAB, count: 4096)
    var written = 0
    var failure: Int32 = 0
    while true {
      let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
      if n <= 0 {
        failure = errno
        break
      }
      written += n
    }
    close(fd)
    #expect(failure == ENOSPC)
    let r3 = try ChildProcess.run(RelSupport.helper, ["fill", small, "1"], timeout: 120)
    let f3 = RelSupport.fields(r3.stdout)
    #expect(
      !r3.signaled && r3.status == 0,
      "writing to a cache on a full file system: status \(r3.status) signaled \(r3.signaled)")
    #expect(f3["wrong"] == "0" && f3["verify"] == "true", "\(r3.stdout)")
    let r4 = try ChildProcess.run(
      RelSupport.helper, ["create", mnt.dir + "/another.mcache", "\(1 << 20)"], timeout: 60)
    #expect(!r4.signaled && RelSupport.fields(r4.stdout)["create"] == "diskFull", "\(r4.stdout)")
    print("full-fs: filler \(written) bytes; writes on the full fs: \(r3.stdout.trimmingCharacters(in: .newlines))")
  }

  /// The same without a mount: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) below
  /// the capacity makes creation fail with `diskFull`.
  @Test func fileSizeLimitFailsAtCreation() throws {
    let path = TestFiles.tempPath("fsize")
    defer { TestFiles.cleanup(path) }
    let r = try ChildProcess.run(RelSupport.helper, ["create", path, "\(4 << 20)", "\(1 << 20)"], timeout: 60)
    #expect(!r.signaled && r.status == 0, "status \(r.status) signaled \(r.signaled)")
    #expect(RelSupport.fields(r.stdout)["create"] == "diskFull", "\(r.stdout)")
  }

  // MARK: Read-only

  func prepareReadOnly(_ path: String) throws {
    let c = try SharedCache<String>(path: path, capacity: 1 << 20)
    for i in 0..<10 { try c.setObject("value-\(i)", forKey: "ro-\(i)") }
  }

  func expectReadOnly(_ r: ChildProcess.Result, _ what: String) {
    let f = RelSupport.fields(r.stdout)
    #expect(!r.signaled && r.status == 0, "\(what): child status \(r.status) signaled \(r.signaled)")
    #expect(f["open"] == "ok" && f["writable"] == "false", "\(what): \(r.stdout)")
    #expect(f["reads"] == "10" && f["readsAfter"] == "10" && f["verify"] == "true", "\(what): \(r.stdout)")
    for op in ["set", "add", "replace", "touch", "remove", "removeAll", "removeExpired", "setLimits", "verifyRepair"] {
      #expect(f[op] == "readOnly", "\(what): \(op) gave \(f[op] ?? "nothing")")
    }
  }

  @Test func readOnlyPolicyReadsAndRefusesWrites() throws {
    let path = TestFiles.tempPath("ro")
    defer { TestFiles.cleanup(path) }
    try prepareReadOnly(path)
    expectReadOnly(
      try ChildProcess.run(RelSupport.helper, ["ro-probe", path, "1"], timeout: 60), "OpenPolicy(readOnly: true)")
  }

  /// A cache on a file system remounted read-only opens (read-only) with the default policy.
  @Test func readOnlyFileSystem() throws {
    guard let mnt = RelSupport.TmpMount(sizeKiB: 4096) else {
      print("read-only fs: mounting a tmpfs is not permitted here; skipped")
      return
    }
    let path = mnt.dir + "/ro.mcache"
    try prepareReadOnly(path)
    try #require(mnt.remount(readOnly: true), "remount,ro failed")
    defer { _ = mnt.remount(readOnly: false) }
    expectReadOnly(
      try ChildProcess.run(RelSupport.helper, ["ro-probe", path, "0"], timeout: 60), "read-only file system")
  }

  /// A 0400 file opened by its (non-root) owner: the default policy falls back to reads.
  @Test func readOnlyPermissionsForNonRoot() throws {
    let setpriv = "/usr/bin/setpriv"
    let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", RelSupport.helper]
    guard getuid() == 0, access(setpriv, X_OK) == 0,
      let ping = try? ChildProcess.run(setpriv, asNobody + ["ping"], timeout: 30), ping.stdout == "pong\n"
    else {
      print("0400 as non-root: needs root and setpriv, and the helper runnable by nobody; skipped")
      return
    }
    let path = TestFiles.tempPath("ro0400")
    defer { TestFiles.cleanup(path) }
    try prepareReadOnly(path)
    #expect(chown(path, 65534, 65534) == 0 && chmod(path, 0o400) == 0)
    expectReadOnly(
      try ChildProcess.run(setpriv, asNobody + ["ro-probe", path, "0"], timeout: 60), "0400 file, non-root owner")
  }

  // MARK: Many processes

  /// 64 processes (on however few cores) mix gets and sets on one cache for 3 s: each
  /// makes progress, no read is wrong, and the file verifies afterwards.
  @Test func sixtyFourProcessesAllMakeProgress() throws {
    let path = TestFiles.tempPath("many")
    defer { TestFiles.cleanup(path) }
    _ = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
    let workers = try (0..<64).map { try ChildProcess(RelSupport.helper, ["hammer", path, "3", "\($0 + 1)"]) }
    var gets: [Int] = []
    var sets: [Int] = []
    for (i, w) in workers.enumerated() {
      let r = w.finish(timeout: 120)
      let f = RelSupport.fields(r.stdout)
      #expect(r.ok, "worker \(i): \(r)")
      #expect(f["wrong"] == "0", "worker \(i) read a wrong value: \(r.stdout)")
      gets.append(Int(f["gets"] ?? "") ?? 0)
      sets.append(Int(f["sets"] ?? "") ?? 0)
    }
    #expect(gets.allSatisfy { $0 > 0 } && sets.allSatisfy { $0 > 0 }, "a worker starved: gets \(gets) sets \(sets)")
    let c = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
    #expect(try c.verify().ok)
    print(
      "64 workers: gets min \(gets.min() ?? 0) max \(gets.max() ?? 0) total \(gets.reduce(0, +)); sets min \(sets.min() ?? 0) max \(sets.max() ?? 0) total \(sets.reduce(0, +))"
    )
  }

  /// Open/close loops (more than the 256 process slots, so registrations must be freed)
  /// leave no descriptor and no mapping behind; a long run of operations keeps
  /// anonymous memory flat.
  @Test func noDescriptorOrMemoryLeaks() throws {
    let path = TestFiles.tempPath("leak")
    defer { TestFiles.cleanup(path) }
    let r = try ChildProcess.run(RelSupport.helper, ["leak-check", path, "300", "100000"], timeout: 240)
    #expect(!r.signaled && r.status == 0, "\(r.stdout) \(r.stderr.suffix(500))")
    let f = RelSupport.fields(r.stdout)
    #expect(f["fd0"] != nil && f["fd0"] == f["fd1"], "descriptors before/after: \(r.stdout)")
    #expect(f["maps0"] != nil && f["maps0"] == f["maps1"], "mappings before/after: \(r.stdout)")
    let rss0 = Int(f["rss0"] ?? "") ?? -1
    let rss1 = Int(f["rss1"] ?? "") ?? -1
    if ProcessInfo.processInfo.environment["ASAN_OPTIONS"] != nil {
      // AddressSanitizer keeps freed blocks in a quarantine (256 MiB by default), so
      // resident memory grows by design there; scripts/sanitizers.sh sets ASAN_OPTIONS.
      print("leaks: memory bound not checked under AddressSanitizer (quarantine)")
    } else {
      #expect(rss0 > 0 && rss1 - rss0 < 2048, "anonymous memory grew from \(rss0) to \(rss1) KiB")
    }
    print("leaks: \(r.stdout.replacingOccurrences(of: "\n", with: " "))")
  }
}
