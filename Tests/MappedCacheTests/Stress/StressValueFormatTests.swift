import CheckedValues
import Foundation
import Testing

@testable import cache_stress

/// `cache-stress`'s self-checking values, by themselves: every size from the compact
/// forms' 8 bytes up round-trips, and a value torn between two versions, of another key,
/// of another length or from an unknown writer is judged corrupt.
@Suite struct StressValueFormatTests {
  static let writers: UInt32 = 6
  static let sizes = Array(ValueFormat.minimumSize...72) + [100, 255, 1000]

  func make(_ n: Int, key: UInt32, writer: UInt32, seq: UInt64) -> [UInt8] {
    var b = [UInt8](repeating: 0, count: n)
    b.withUnsafeMutableBytes { ValueFormat.write(into: $0, key: key, writer: writer, seq: seq) }
    return b
  }

  func judge(_ b: [UInt8], key: UInt32, writers: UInt32 = writers, whole: Bool = true) -> ValueFormat.Verdict {
    b.withUnsafeBytes { ValueFormat.check($0, key: key, writers: writers, whole: whole) }
  }

  /// What a whole value of `n` bytes from (writer, seq) reads as.
  func expected(_ n: Int, writer: UInt32, seq: UInt64) -> ValueFormat.Verdict {
    n < ValueFormat.trackedMinimumSize ? .untracked(writer: writer) : .whole(writer: writer, seq: seq)
  }

  @Test func everySizeRoundTrips() {
    var g = SplitMix(7)
    for n in Self.sizes {
      for _ in 0..<20 {
        let key = UInt32(truncatingIfNeeded: g.next() % 100_000_000)
        let writer = g.below(4) == 0 ? ValueFormat.prefillWriter : UInt32(g.below(Int(Self.writers)))
        let seq = UInt64(g.below(1000)) << 40 | (g.next() & 0xFF_FFFF_FFFF)
        let v = make(n, key: key, writer: writer, seq: seq)
        #expect(judge(v, key: key) == expected(n, writer: writer, seq: seq), "\(n) bytes")
        #expect(judge(v, key: key, whole: false) == expected(n, writer: writer, seq: seq), "\(n) bytes, header check")
      }
    }
  }

  /// Successive versions of one key by one writer differ (else a tear between them could
  /// not be seen), in every form.
  @Test func successiveVersionsDiffer() {
    for n in Self.sizes {
      var seen = Set<[UInt8]>()
      for seq in UInt64(1)...300 { seen.insert(make(n, key: 42, writer: 1, seq: seq)) }
      for inc in UInt64(1)...50 { seen.insert(make(n, key: 42, writer: 1, seq: inc << 40 | 1)) }
      #expect(seen.count == 350, "\(n) bytes: \(350 - seen.count) repeated versions")
    }
  }

  @Test func aValueOfAnotherKeyIsCorrupt() {
    for n in Self.sizes {
      for key in UInt32(0)..<50 {
        let v = make(n, key: key, writer: 2, seq: 77)
        for other in [key ^ 1, key + 1000, key &* 7 &+ 3, UInt32.max - key] where other != key {
          #expect(judge(v, key: other) == .corrupt, "\(n) bytes, key \(key) read as \(other)")
        }
      }
    }
  }

  /// A copy torn between two versions (the first bytes of one, the rest of the other, at
  /// every split), and a random byte-by-byte mix of them.
  @Test func aTornValueIsCorrupt() {
    var g = SplitMix(11)
    for n in Self.sizes {
      let versions: [(UInt32, UInt64)] = [(1, 5), (1, 6), (3, 5), (ValueFormat.prefillWriter, 0), (1, 1 << 40 | 5)]
      for (i, a) in versions.enumerated() {
        for b in versions[(i + 1)...] {
          let x = make(n, key: 9, writer: a.0, seq: a.1)
          let y = make(n, key: 9, writer: b.0, seq: b.1)
          for cut in 1..<n where x[cut...] != y[cut...] && x[..<cut] != y[..<cut] {
            let torn = Array(x[..<cut] + y[cut...])
            #expect(judge(torn, key: 9) == .corrupt, "\(n) bytes, \(a) then \(b) from byte \(cut)")
          }
          for _ in 0..<20 {
            let mix = (0..<n).map { g.below(2) == 0 ? x[$0] : y[$0] }
            if mix != x && mix != y { #expect(judge(mix, key: 9) == .corrupt, "\(n) bytes, mixed \(a) and \(b)") }
          }
        }
      }
    }
  }

  /// Any one flipped bit, a wrong length (cut short or extended) and a writer the run
  /// does not have are corrupt too; so is anything shorter than the smallest form.
  @Test func damagedLengthAndWriterAreCorrupt() {
    for n in Self.sizes {
      let v = make(n, key: 5, writer: 4, seq: 123)
      for bit in 0..<(8 * min(n, 40)) {
        var d = v
        d[bit / 8] ^= 1 << UInt8(bit % 8)
        #expect(judge(d, key: 5) == .corrupt, "\(n) bytes, bit \(bit) flipped")
      }
      if n > ValueFormat.minimumSize { #expect(judge(Array(v.dropLast()), key: 5) == .corrupt, "\(n) bytes cut") }
      #expect(judge(v + [0], key: 5) == .corrupt, "\(n) bytes extended")
      #expect(judge(v + Array(v.prefix(8)), key: 5) == .corrupt, "\(n) bytes extended by a word")
      #expect(judge(v, key: 5, writers: 4) == .corrupt, "\(n) bytes: writer 4 of 4")
      var spoiled = v
      spoiled.withUnsafeMutableBytes { ValueFormat.spoil($0) }
      #expect(judge(spoiled, key: 5) == .corrupt, "\(n) bytes spoiled")
    }
    for n in 0..<ValueFormat.minimumSize {
      #expect(judge([UInt8](repeating: 0, count: n), key: 0) == .corrupt)
      #expect(judge([UInt8](repeating: 0xFF, count: n), key: 0) == .corrupt)
    }
    #expect(judge([UInt8](repeating: 0, count: 8), key: 0) == .corrupt, "zeroes are not a value")
  }
}

/// `cache-stress`'s keys: `KeySet.write` puts key `i` together in registers, by a shorter
/// path when every index is under 10^8 and the key has 9 to 16 bytes; every shape gives
/// the zero-padded index, behind "key:" when there is room, exactly `size` bytes.
@Suite struct StressKeySetTests {
  @Test func keysAreTheZeroPaddedIndexWithTheirPrefix() {
    for (count, size) in [
      (1000, 3), (1000, 7), (1000, 8), (1000, 9), (1000, 12), (100_000, 12), (100_000_000, 12), (99_999, 16),
      (100_000, 15), (100_000_001, 12), (200_000_000, 16), (100_000, 17), (1000, 40),
    ] {
      let keys = KeySet(count: count, size: size)
      let digits = String(count - 1).count
      for i in [0, 1, 7, 42, 999, count / 2, count - 1] where i < count {
        let n = String(i)
        let padded = String(repeating: "0", count: max(0, size - n.count)) + n
        let expected =
          size >= digits + 4 ? "key:" + padded.dropFirst(4) : Substring(padded.suffix(size))
        #expect(keys[i] == String(expected), "count \(count), size \(size), key \(i)")
      }
    }
  }
}
