import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// What README's "Compatibility" promises about an upgrade: a file of another format is
/// refused and left untouched (by the library and by `mapped-cache`), and a process that
/// has a file open goes on with it after the path is given a new file.
@Suite struct UpgradeTests {
  @Test func aFileOfAnotherFormatIsRefusedAndLeftAsItIs() throws {
    let path = TestFiles.tempPath("upgrade-format")
    defer { TestFiles.cleanup(path) }
    do {
      let c = try SharedCache<String>(path: path, capacity: 1 << 20)
      try c.setObject("v", forKey: "k")
    }
    var bytes = try #require(FileManager.default.contents(atPath: path))
    let older = UInt8(MappedCacheVersion.fileFormat - 1)
    bytes[Format.HeaderOffset.version] = older
    #expect(FileManager.default.createFile(atPath: path, contents: bytes, attributes: [.posixPermissions: 0o600]))
    #expect {
      _ = try SharedCache<String>(path: path, capacity: 1 << 20)
    } throws: { error in
      guard case .incompatibleFormat(_, let reason)? = error as? CacheError else { return false }
      return reason.contains("format version \(older)") && reason.contains("reads \(MappedCacheVersion.fileFormat)")
    }
    let r = try ChildProcess.run(TestFiles.binary("mapped-cache"), ["info", path], timeout: 30)
    #expect(r.status == 2)
    #expect(r.stderr.contains("format version \(older)"))
    #expect(r.stderr.contains("this library reads \(MappedCacheVersion.fileFormat)"))
    #expect(r.stderr.contains("mapped-cache migrate"), "names the way to keep the entries")
    #expect(FileManager.default.contents(atPath: path) == bytes, "a refused file is not rewritten")
  }

  /// "Remove the file": the old handle keeps its mapping and its entries, sees that the
  /// path was replaced, and a new handle at the path starts from an empty cache.
  @Test func aRunningHandleKeepsItsFileWhenThePathIsRemoved() throws {
    let path = TestFiles.tempPath("upgrade-remove")
    defer { TestFiles.cleanup(path) }
    let old = try SharedCache<String>(path: path, capacity: 1 << 20)
    try old.setObject("old", forKey: "k")
    #expect(unlink(path) == 0)
    let new = try SharedCache<String>(path: path, capacity: 1 << 20)
    #expect(try new.object(forKey: "k") == nil)
    #expect(old.isReplaced)
    #expect(!new.isReplaced)
    #expect(try old.object(forKey: "k") == "old")
    try old.setObject("still old", forKey: "k")
    #expect(try new.object(forKey: "k") == nil, "the old file's writes reach no one new")
  }
}
