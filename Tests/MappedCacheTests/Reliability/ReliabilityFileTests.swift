import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// Foreign, truncated, extended and replaced files, and the security rules of `open`:
/// mode 0600, O_NOFOLLOW, O_CLOEXEC, other owners and group/world-writable files.
@Suite struct ReliabilityFileTests {
  // MARK: Foreign files

  @Test func foreignFilesAreNeverModified() throws {
    var magicThenGarbage = RelSupport.randomBytes(1 << 20, seed: 3)
    for i in 0..<8 { magicThenGarbage[i] = UInt8(truncatingIfNeeded: Format.magic >> (8 * UInt64(i))) }
    let samples: [(String, [UInt8])] = [
      ("text", Array("not a cache, just some text\n".utf8)),
      ("one byte", [0x4D]),
      ("100 random bytes", RelSupport.randomBytes(100, seed: 1)),
      ("4097 random bytes", RelSupport.randomBytes(4097, seed: 2)),
      ("1 MiB random", RelSupport.randomBytes(1 << 20, seed: 4)),
      ("1 MiB zeros", [UInt8](repeating: 0, count: 1 << 20)),
      ("1 MiB 0xFF", [UInt8](repeating: 0xFF, count: 1 << 20)),
      ("our magic, then garbage", magicThenGarbage),
    ]
    for (name, bytes) in samples {
      let path = TestFiles.tempPath("foreign")
      defer { TestFiles.cleanup(path) }
      RelSupport.writeFile(path, bytes)
      RelSupport.backdate(path)
      let before = try #require(RelSupport.image(path))
      for policy in [OpenPolicy(), OpenPolicy(readOnly: true), OpenPolicy(create: false)] {
        do {
          _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: policy)
          Issue.record("\(name): a foreign file opened as a cache")
        } catch let e as CacheError {
          switch e {
          case .notACacheFile, .corrupted, .incompatibleFormat: break
          default: Issue.record("\(name): unexpected error \(e)")
          }
        }
        _ = try? SharedCache<String>(path: path, capacity: 4 << 20, policy: policy)
      }
      #expect(RelSupport.image(path) == before, "\(name): the file changed")
    }
  }

  // MARK: Truncated, extended and replaced files

  /// A truncated file is refused; an extended one opens with everything in it (what a
  /// grower killed after extending the file leaves: the extra bytes are unused until the
  /// next growth lays them out).
  @Test func truncatedOrExtendedFileIsRefusedAtOpen() throws {
    for newSize in [0, 100, 4096, 512 << 10, (1 << 20) - 8, (1 << 20) + 4096] {
      let path = TestFiles.tempPath("trunc")
      defer { TestFiles.cleanup(path) }
      do {
        let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
        try c.setObject([1, 2, 3], forKey: "k")
      }
      #expect(truncate(path, off_t(newSize)) == 0)
      let before = try #require(RelSupport.image(path))
      do {
        let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(create: false))
        // Only an empty file is (re)created: it holds nothing to lose.
        if newSize > 1 << 20 {
          #expect(try c.object(forKey: "k") == [1, 2, 3], "the extended file lost its entry")
          #expect(try c.verify().ok)
          continue
        }
        #expect(newSize == 0, "a \(newSize)-byte file opened")
        #expect(try c.object(forKey: "k") == nil)
        continue
      } catch let e as CacheError {
        switch e {
        case .corrupted(_, let why): #expect(newSize > 256 && why.contains("bytes"), "\(why)")
        case .notACacheFile: #expect(newSize < 256 || newSize == 0)
        default: Issue.record("size \(newSize): unexpected error \(e)")
        }
      }
      #expect(RelSupport.image(path) == before, "a refused open changed the \(newSize)-byte file")
    }
  }

  @Test func replacedFileIsNoticed() throws {
    let path = TestFiles.tempPath("replaced")
    let other = TestFiles.tempPath("replacement")
    defer { TestFiles.cleanup(path, other) }
    let a = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    try a.setObject([1], forKey: "old")
    #expect(!a.isReplaced)
    do {
      let b = try SharedCache<[UInt8]>(path: other, capacity: 1 << 20)
      try b.setObject([2], forKey: "new")
    }
    #expect(rename(other, path) == 0)
    #expect(a.isReplaced, "a new inode at the path went unnoticed")
    // The old mapping stays valid (the old inode lives while mapped): no crash, old data.
    #expect(try a.object(forKey: "old") == [1])
    let fresh = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    #expect(!fresh.isReplaced)
    #expect(try fresh.object(forKey: "new") == [2])
    #expect(unlink(path) == 0)
    #expect(fresh.isReplaced, "a deleted file went unnoticed")
  }

  // MARK: Security

  @Test func newFilesAreOwnerOnlyAndCloseOnExec() throws {
    let path = TestFiles.tempPath("mode")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    var st = stat()
    #expect(stat(path, &st) == 0)
    #expect(st.st_mode & 0o777 == 0o600)
    var found = 0
    for name in try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
      guard let fd = Int32(name),
        let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
        target == path
      else { continue }
      found += 1
      #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0, "descriptor \(fd) of the cache lacks O_CLOEXEC")
    }
    #expect(found >= 1)
    _ = c
  }

  @Test func symlinkAtThePathIsRefused() throws {
    let path = TestFiles.tempPath("link")
    let victim = TestFiles.tempPath("victim")
    let missing = TestFiles.tempPath("missing")
    defer { TestFiles.cleanup(path, victim, missing) }
    // A valid cache as the target: following the link would open it happily.
    do { try SharedCache<[UInt8]>(path: victim, capacity: 1 << 20).setObject([9], forKey: "k") }
    RelSupport.backdate(victim)
    let before = try #require(RelSupport.image(victim))
    #expect(symlink(victim, path) == 0)
    for policy in [
      OpenPolicy(), OpenPolicy(readOnly: true), OpenPolicy(allowOtherOwner: true, allowGroupOrWorldWritable: true),
    ] {
      #expect {
        _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: policy)
      } throws: { e in
        if case CacheError.unsafeFile = e { return true }
        return false
      }
    }
    #expect(RelSupport.image(victim) == before, "the link's target changed")
    // A dangling link: open must not create its target.
    unlink(path)
    #expect(symlink(missing, path) == 0)
    #expect(throws: CacheError.self) { _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20) }
    #expect(access(missing, F_OK) != 0, "a dangling link's target was created")
  }

  @Test func otherOwnerIsRefusedUnlessAllowed() throws {
    let path = TestFiles.tempPath("owner")
    defer { TestFiles.cleanup(path) }
    do { try SharedCache<[UInt8]>(path: path, capacity: 1 << 20).setObject([1], forKey: "k") }
    try #require(chown(path, 65534, 65534) == 0, "chown needs root")
    #expect {
      _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    } throws: { e in
      if case CacheError.unsafeFile(_, let why) = e { return why.contains("owned") }
      return false
    }
    let allowed = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: OpenPolicy(allowOtherOwner: true))
    #expect(try allowed.object(forKey: "k") == [1])
  }

  @Test func groupOrWorldWritableIsRefusedUnlessAllowed() throws {
    for mode: mode_t in [0o666, 0o620, 0o602] {
      let path = TestFiles.tempPath("writable")
      defer { TestFiles.cleanup(path) }
      do { try SharedCache<[UInt8]>(path: path, capacity: 1 << 20).setObject([1], forKey: "k") }
      #expect(chmod(path, mode) == 0)
      for policy in [OpenPolicy(), OpenPolicy(readOnly: true)] {
        #expect {
          _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: policy)
        } throws: { e in
          if case CacheError.unsafeFile(_, let why) = e { return why.contains("write") }
          return false
        }
      }
      let allowed = try SharedCache<[UInt8]>(
        path: path, capacity: 1 << 20,
        policy: OpenPolicy(allowGroupOrWorldWritable: true))
      #expect(try allowed.object(forKey: "k") == [1])
    }
  }

  /// A FIFO or a directory at the path: a clear error, in bounded time (opening a FIFO
  /// for reading blocks until a writer comes, so this runs in a child with a timeout).
  @Test func specialFilesAtThePathAreRefused() throws {
    let fifo = TestFiles.tempPath("fifo")
    let dir = TestFiles.tempPath("dir")
    defer {
      TestFiles.cleanup(fifo)
      rmdir(dir)
    }
    #expect(mkfifo(fifo, 0o600) == 0)
    #expect(mkdir(dir, 0o700) == 0)
    for path in [fifo, dir] {
      for ro in ["0", "1"] {
        let r = try ChildProcess.run(RelSupport.helper, ["open-only", path, ro], timeout: 20)
        #expect(
          !r.signaled && r.status == 0, "\(path) readOnly=\(ro): status \(r.status) (a hang is killed after 20 s)")
        let open = RelSupport.fields(r.stdout)["open"] ?? "none"
        #expect(open == "notACacheFile" || open.hasPrefix("system"), "\(path) readOnly=\(ro): open=\(open)")
      }
    }
  }
}
