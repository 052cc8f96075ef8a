import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// Issue 21, item 3: what `withBytes` guarantees while another process overwrites or
/// removes the entry. The closure's buffer is a private copy, taken whole under the
/// slot's seqlock before the closure runs: it holds a value some set wrote whole for
/// this key and never changes while the closure runs, whatever others do meanwhile.
@Suite(.serialized) struct ReliabilityReadViewTests {
  /// The counter at the start of an `overwrite-loop` value, or nil when the bytes are
  /// not one whole value of `size` bytes.
  static func counter(_ b: some Collection<UInt8>, size: Int) -> UInt64? {
    let v = Array(b)
    guard v.count == size else { return nil }
    var n: UInt64 = 0
    for i in 0..<8 { n |= UInt64(v[i]) << (8 * UInt64(i)) }
    return v[8...].allSatisfy { $0 == UInt8(truncatingIfNeeded: n) } ? n : nil
  }

  /// Inline (48 bytes, in the slot) and in a record (3,000 bytes): inside `withBytes`,
  /// the reader waits until another read shows the entry overwritten, and then until
  /// it shows it removed; its own buffer stays exactly as it was throughout.
  @Test func aReaderInsideWithBytesKeepsItsCopyWhileTheEntryIsOverwrittenAndRemoved() throws {
    for size in [48, 3_000] {
      let path = TestFiles.tempPath("view-\(size)")
      defer { TestFiles.cleanup(path) }
      let cache = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
      try cache.setObject(FaultValue.make(0, size: size), forKey: "k")
      // Bounded (30 s) by itself; `finish` below stops it sooner.
      let writer = try ChildProcess(RelSupport.helper, ["overwrite-loop", path, "k", "\(size)", "30"])

      var holds = 0
      var sawOverwrite = 0
      var sawRemoval = 0
      var changed = 0
      var torn = 0
      let deadline = Date().addingTimeInterval(20)
      while holds < 5 && Date() < deadline {
        _ = try cache.withBytes(forKey: "k") { buffer in
          holds += 1
          let copy = Array(buffer)
          guard let mine = Self.counter(copy, size: size) else {
            torn += 1
            return
          }
          // Hold the buffer until the shared entry has moved on twice: overwritten
          // by a newer value, then removed (the writer removes every fourth round).
          var overwritten = false
          var removed = false
          while !(overwritten && removed) && Date() < deadline {
            let now = try cache.object(forKey: "k")
            if let now, let n = Self.counter(now, size: size), n != mine { overwritten = true }
            if now == nil { removed = true }
            if !buffer.elementsEqual(copy) { changed += 1 }
          }
          if overwritten { sawOverwrite += 1 }
          if removed { sawRemoval += 1 }
          if !buffer.elementsEqual(copy) || Self.counter(buffer, size: size) != mine { changed += 1 }
        }
      }
      let done = writer.finish(timeout: 0.1)
      #expect(done.signaled, "the writer stopped before it was killed: \(done)")
      #expect(holds == 5, "\(size) B: the entry was missing every time (\(holds) holds)")
      #expect(torn == 0 && changed == 0, "\(size) B: \(torn) torn copies, \(changed) changes under the closure")
      #expect(
        sawOverwrite == holds && sawRemoval == holds,
        "\(size) B: overwritten \(sawOverwrite), removed \(sawRemoval) of \(holds)")
      // The writer was SIGKILLed, perhaps mid-write holding the lock (a slot left odd):
      // the next write takes the dead holder's lock over and repairs, as any would.
      try cache.setObject([1], forKey: "after-the-writer")
      let report = try cache.verify()
      #expect(report.ok, "\(report)")
    }
  }
}

/// The values `mc-test-helper overwrite-loop` writes (see `FaultOps.value`).
enum FaultValue {
  static func make(_ n: UInt64, size: Int) -> [UInt8] {
    var v = [UInt8](repeating: UInt8(truncatingIfNeeded: n), count: size)
    for b in 0..<8 { v[b] = UInt8(truncatingIfNeeded: n >> (8 * UInt64(b))) }
    return v
  }
}
