import Foundation
import TestSupport
import Testing

@testable import MappedCache

@Suite struct SmokeTests {
  @Test func setGetRemove() throws {
    let path = TestFiles.tempPath("smoke")
    defer { TestFiles.cleanup(path) }
    let cache = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    try cache.setObject([1, 2, 3], forKey: "k")
    #expect(try cache.object(forKey: "k") == [1, 2, 3])
    #expect(try cache.removeObject(forKey: "k"))
    #expect(try cache.object(forKey: "k") == nil)
  }

  @Test func helperBinaryRuns() throws {
    let r = try ChildProcess.run(TestFiles.binary("mc-test-helper"), ["ping"])
    #expect(r.status == 0)
    #expect(r.stdout == "pong\n")
  }
}
