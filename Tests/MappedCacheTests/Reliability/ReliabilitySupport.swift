import Foundation
import Glibc
import TestSupport

@testable import MappedCache

/// Helpers shared by the reliability suites: `key=value` parsing of a child's output,
/// file fingerprints, and tmpfs mounts.
enum RelSupport {
  static var helper: String { TestFiles.binary("mc-test-helper") }

  /// `key=value` pairs from a child's output (later lines win).
  static func fields(_ output: String) -> [String: String] {
    var f: [String: String] = [:]
    for word in output.split(whereSeparator: { $0 == "\n" || $0 == " " }) {
      let kv = word.split(separator: "=", maxSplits: 1)
      if kv.count == 2 { f[String(kv[0])] = String(kv[1]) }
    }
    return f
  }

  static func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
  }

  /// Waits until `path` exists (true) or `timeout` passes (false).
  static func waitForFile(_ path: String, timeout: TimeInterval) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while access(path, F_OK) != 0 {
      if Date() > deadline { return false }
      usleep(2_000)
    }
    return true
  }

  /// Bytes, size, mode, owner and modification time of a file, to prove it untouched.
  struct FileImage: Equatable {
    var bytes: [UInt8]
    var size: Int
    var mode: UInt32
    var uid: UInt32
    var mtimeSec: Int
    var mtimeNsec: Int
    var inode: UInt64
  }

  static func image(_ path: String) -> FileImage? {
    var st = stat()
    guard lstat(path, &st) == 0 else { return nil }
    let bytes = (try? [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))) ?? []
    return FileImage(
      bytes: bytes, size: Int(st.st_size), mode: UInt32(st.st_mode), uid: st.st_uid,
      mtimeSec: st.st_mtim.tv_sec, mtimeNsec: st.st_mtim.tv_nsec, inode: UInt64(st.st_ino))
  }

  /// Sets a file's times to a fixed moment in the past, so any write would show.
  static func backdate(_ path: String) {
    var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
    _ = utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW)
  }

  static func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) {
    precondition(tryWriteFile(path, bytes, mode: mode), "cannot write \(path)")
  }

  /// Writes `bytes` to a fresh file at `path`; false when it cannot be created.
  static func tryWriteFile(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) -> Bool {
    let fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, mode)
    guard fd >= 0 else { return false }
    var done = 0
    bytes.withUnsafeBytes { b in
      while done < b.count {
        let n = write(fd, b.baseAddress! + done, b.count - done)
        if n <= 0 { break }
        done += n
      }
    }
    close(fd)
    return true
  }

  static func randomBytes(_ n: Int, seed: UInt64) -> [UInt8] {
    var s = seed
    return (0..<n).map { _ in
      s = s &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      return UInt8(truncatingIfNeeded: s >> 33)
    }
  }

  /// Runs a system tool (mount, umount, setpriv); returns its exit status.
  @discardableResult
  static func tool(_ path: String, _ args: [String]) -> Int32 {
    guard let r = try? ChildProcess.run(path, args, timeout: 30) else { return -1 }
    return r.signaled ? -1 : r.status
  }

  /// A small tmpfs mounted at a fresh directory (nil when mounting is not permitted).
  final class TmpMount {
    let dir: String
    private(set) var mounted = false

    init?(sizeKiB: Int) {
      var template = Array("/tmp/mc-rel-mnt-XXXXXX".utf8CString)
      guard let p = mkdtemp(&template) else { return nil }
      dir = String(cString: p)
      guard RelSupport.tool("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=\(sizeKiB)k,mode=0755", "tmpfs", dir]) == 0
      else {
        rmdir(dir)
        return nil
      }
      mounted = true
    }

    func remount(readOnly: Bool) -> Bool {
      RelSupport.tool("/usr/bin/mount", ["-o", readOnly ? "remount,ro" : "remount,rw", dir]) == 0
    }

    deinit {
      if mounted, RelSupport.tool("/usr/bin/umount", [dir]) != 0 { RelSupport.tool("/usr/bin/umount", ["-l", dir]) }
      rmdir(dir)
    }
  }
}
