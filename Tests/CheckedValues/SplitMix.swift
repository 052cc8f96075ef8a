/// The tests' one random generator, SplitMix64 (Steele, Lea and Flood, 2014): a seed
/// reproduces a run, in the test process and in the helper processes alike (and, as a
/// `RandomNumberGenerator`, the standard library's `random(in:using:)` draws).
public struct SplitMix: RandomNumberGenerator, Sendable {
  public var state: UInt64

  public init(_ seed: UInt64) { state = seed }

  public mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  /// Uniform in 0..<n; 0 when n ≤ 0.
  public mutating func below(_ n: Int) -> Int { n <= 0 ? 0 : Int(next() % UInt64(n)) }

  /// Uniform in `r`.
  public mutating func inRange(_ r: ClosedRange<Int>) -> Int { r.lowerBound + below(r.count) }
}
