import Foundation
import TestSupport
import Testing

/// Heap allocations on the read path, counted in a child process whose malloc family is
/// interposed (Tests/AllocCounter): a closure read, a copy-out read, a typed `Int` read
/// and a miss allocate nothing; a value read allocates only the returned value (one
/// array per read).
@Suite struct CoreAllocationTests {
  @Test func readsAllocateOnlyTheReturnedValue() throws {
    let path = TestFiles.tempPath("allocs")
    defer { TestFiles.cleanup(path) }
    let n = 10_000
    let r = try ChildProcess.run(TestFiles.binary("mc-test-helper"), ["count-allocs", path, String(n)])
    #expect(r.status == 0, "\(r.stderr)")
    // Sanitizer builds replace malloc themselves, so the helper cannot count there.
    if r.stdout.hasPrefix("unavailable") { return }
    let fields = Dictionary(
      uniqueKeysWithValues: r.stdout.split(separator: " ").compactMap { part -> (String, Int)? in
        let kv = part.split(separator: "=")
        guard kv.count == 2, let v = Int(kv[1].trimmingCharacters(in: .whitespacesAndNewlines)) else { return nil }
        return (String(kv[0]), v)
      })
    #expect(fields["closure"] == 0, "closure reads allocated: \(r.stdout)")
    #expect(fields["miss"] == 0, "misses allocated: \(r.stdout)")
    #expect(fields["object"] == n, "value reads should allocate exactly the returned array: \(r.stdout)")
    #expect(fields["copy"] == 0 && fields["copyBytesKey"] == 0, "copy-out reads allocated: \(r.stdout)")
    #expect(fields["int"] == 0, "typed Int reads allocated: \(r.stdout)")
  }
}
