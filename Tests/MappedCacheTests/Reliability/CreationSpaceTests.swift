import Foundation
import Glibc
import SystemCalls
import TestSupport
import Testing

@testable import MappedCache

/// A creation that fails for want of space, as in a container whose /dev/shm is Docker's
/// default 64 MiB: it leaves no file, whoever asked (library, tool), and its message says
/// how large the file system is and, under /dev/shm, what sizes it. The tmpfs tests mount
/// one (root only: skipped otherwise, except under CI=true, where they must run).
@Suite(.serialized) struct CreationSpaceTests {
  static let canMount = geteuid() == 0 || ProcessInfo.processInfo.environment["CI"] == "true"

  /// A tmpfs of `megabytes` MiB mounted on a fresh directory, unmounted by `unmount`.
  final class SmallTmpfs {
    let directory: String

    init(megabytes: Int) throws {
      directory = try SystemCall.makeTemporaryDirectory(prefix: "/tmp/mctest-small-")
      let r = try ChildProcess.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", directory])
      if r.status != 0 {
        rmdir(directory)
        throw CacheError.invalidArgument("mount -t tmpfs failed: \(r.stderr)")
      }
    }

    func unmount() {
      _ = try? ChildProcess.run("/bin/umount", [directory])
      rmdir(directory)
    }

    var entries: [String] { (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? ["?"] }
  }

  /// The message names the file system's size, and under /dev/shm Docker's and
  /// Kubernetes' settings; elsewhere not those.
  @Test func diskFullSaysHowBigTheFileSystemIsAndWhatSizesDevShm() {
    let shm = CacheError.diskFull(path: "/dev/shm/app.mcache", bytes: 64 << 20).description
    #expect(shm.hasPrefix("no space to reserve 67108864 bytes for /dev/shm/app.mcache (the file system there holds "))
    #expect(shm.contains("--shm-size") && shm.contains("medium: Memory") && shm.contains("emptyDir"), "\(shm)")
    let tmp = CacheError.diskFull(path: "/tmp/app.mcache", bytes: 1 << 20).description
    #expect(tmp.contains("holds") && !tmp.contains("shm-size"), "\(tmp)")
    #expect(CacheError.roughBytes(32 << 20) == "32 MiB" && CacheError.roughBytes(9000) == "9000 bytes")
  }

  /// On a 32 MiB tmpfs: the default 64 MiB capacity is `diskFull` from the library and
  /// exit 3 from the tool, neither leaving a file; 16 MiB fits and works.
  @Test(.enabled(if: canMount, "mounting a tmpfs needs root"))
  func creationWithoutRoomLeavesNoFile() throws {
    let fs = try SmallTmpfs(megabytes: 32)
    defer { fs.unmount() }
    let path = fs.directory + "/cache"
    do {
      _ = try SharedCache<[UInt8]>(path: path)
      Issue.record("a 64 MiB cache was created on a 32 MiB file system")
    } catch let error as CacheError {
      #expect(error == .diskFull(path: path, bytes: 64 << 20))
      #expect(error.description.contains("(the file system there holds 32 MiB"), "\(error)")
    }
    #expect(fs.entries.isEmpty, "the library left \(fs.entries)")
    let tool = try ChildProcess.run(TestFiles.binary("mapped-cache"), ["create", path])
    #expect(tool.status == 3 && tool.stderr.contains("no space to reserve 67108864 bytes"), "\(tool.stderr)")
    #expect(fs.entries.isEmpty, "the tool left \(fs.entries)")
    let fits = try SharedCache<[UInt8]>(path: path, capacity: 16 << 20)
    try fits.setObject([1], forKey: "k")
    #expect(try fits.object(forKey: "k") == [1] && (try fits.verify().ok))
  }

  /// An opener waiting for the creation lock while the creator fails for space: the
  /// creator removes the file, and the waiter, finding the path gone, opens again and
  /// makes its own (smaller) cache there, at the path, not in the removed file.
  @Test(.enabled(if: canMount, "mounting a tmpfs needs root"))
  func anOpenerWaitingOnAFailingCreatorMakesTheCacheAtThePath() throws {
    let fs = try SmallTmpfs(megabytes: 32)
    defer { fs.unmount() }
    let path = fs.directory + "/cache"
    let creator = try ChildProcess(
      TestFiles.binary("mapped-cache"), ["create", path, "--capacity", "64M"],
      environment: ["MC_TEST_CREATE_PAUSE": "marked"], stdout: .discarded, stderr: .discarded)
    defer {
      creator.kill()
      creator.wait()
    }
    let deadline = Date().addingTimeInterval(30)
    while !creator.isStopped {
      try #require(creator.isRunning && Date() < deadline, "the creator never stopped with its marker written")
      usleep(2000)
    }
    let waiter = try ChildProcess(RelSupport.helper, ["create", path, "\(8 << 20)"])
    usleep(300_000)
    #expect(waiter.isRunning, "the opener waits on the creation lock")
    creator.kill(SIGCONT)
    #expect(creator.wait().status == 3, "the creator fails for space")
    let made = waiter.finish(timeout: 60)
    #expect(made.ok && RelSupport.fields(made.stdout)["create"] == "ok", "\(made)")
    let info = try ChildProcess.run(TestFiles.binary("mapped-cache"), ["info", path])
    #expect(info.status == 0 && info.stdout.contains("8.0 MiB"), "\(info.stdout) \(info.stderr)")
    #expect(fs.entries == ["cache"])
  }
}
