import Foundation

/// SplitMix64: a small, fast, seedable generator (Steele, Lea, Flood 2014).
struct SplitMix64 {
  var state: UInt64

  init(seed: UInt64) { state = seed }

  @inline(__always)
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  /// Uniform in [0, 1).
  @inline(__always)
  mutating func nextDouble() -> Double { Double(next() >> 11) * (1.0 / 9_007_199_254_740_992.0) }

  /// Uniform in 0..<n (n > 0); the modulo bias is below 2^-32 for the n used here.
  @inline(__always)
  mutating func next(below n: Int) -> Int { Int(next() % UInt64(n)) }

  /// A seed for a sub-stream, so that (seed, a, b, c) always names the same sequence.
  static func derive(_ seed: UInt64, _ parts: UInt64...) -> UInt64 {
    var g = SplitMix64(seed: seed)
    var s = g.next()
    for p in parts {
      g = SplitMix64(seed: s ^ (p &* 0xD6E8_FEB8_6659_FD93))
      s = g.next()
    }
    return s
  }
}

/// Zipf ranks by the generator of Gray et al., "Quickly generating billion-record
/// synthetic databases" (SIGMOD 1994), as YCSB uses it: rank 0 is the hottest, rank r
/// is drawn with probability proportional to 1 / (r + 1)^theta. Requires 0 < theta < 1.
struct ZipfGenerator {
  let n: Int
  let theta: Double
  private let alpha: Double
  private let zetan: Double
  private let eta: Double
  private let zeta2: Double

  init(n: Int, theta: Double) {
    precondition(n >= 1 && theta > 0 && theta < 1, "Zipf needs n >= 1 and 0 < theta < 1")
    self.n = n
    self.theta = theta
    var z = 0.0
    for i in 1...n { z += 1.0 / pow(Double(i), theta) }
    zetan = z
    zeta2 = 1.0 + pow(0.5, theta)
    alpha = 1.0 / (1.0 - theta)
    eta = n < 2 ? 0 : (1.0 - pow(2.0 / Double(n), 1.0 - theta)) / (1.0 - zeta2 / zetan)
  }

  /// The rank for a uniform draw `u` in [0, 1).
  func rank(_ u: Double) -> Int {
    let uz = u * zetan
    if uz < 1.0 { return 0 }
    if uz < zeta2 { return min(1, n - 1) }
    let r = Int(Double(n) * pow(eta * u - eta + 1.0, alpha))
    return min(max(r, 0), n - 1)
  }
}

/// Spreads ranks over the key space with a fixed bijection, so the hot keys are not
/// neighbours (in the index, or in the key order): key = (rank · m + c) mod n, with m
/// coprime to n.
struct RankScrambler {
  let n: UInt64
  let multiplier: UInt64
  let offset: UInt64

  init(n: Int) {
    self.n = UInt64(n)
    var m = n == 1 ? 1 : UInt64(2_654_435_761) % UInt64(n)
    if m == 0 { m = 1 }
    while Self.gcd(m, UInt64(n)) != 1 { m += 1 }
    multiplier = m
    offset = UInt64(0x5BD1_E995) % UInt64(n)
  }

  /// Safe: rank < n ≤ 2^31 and multiplier < n, so the product fits in 63 bits.
  @inline(__always)
  func key(forRank rank: Int) -> Int { Int((UInt64(rank) &* multiplier &+ offset) % n) }

  private static func gcd(_ a: UInt64, _ b: UInt64) -> UInt64 { b == 0 ? a : gcd(b, a % b) }
}

/// A precomputed, cycled stream of operations for one thread (as the peer benchmarks
/// do), so drawing the next key costs an array read, not a `pow`. Each entry is a key
/// index, with `writeBit` set for a set.
struct OpStream {
  static let writeBit: UInt32 = 1 << 31
  static let length = 1 << 20

  let ops: [UInt32]

  init(keys: Int, zipf: ZipfGenerator?, scrambler: RankScrambler, readPct: Int, seed: UInt64) {
    var rng = SplitMix64(seed: seed)
    var ops = [UInt32](repeating: 0, count: Self.length)
    for i in 0..<Self.length {
      let k: Int
      if let zipf {
        k = scrambler.key(forRank: zipf.rank(rng.nextDouble()))
      } else {
        k = rng.next(below: keys)
      }
      let write = rng.next(below: 100) >= readPct
      ops[i] = UInt32(k) | (write ? Self.writeBit : 0)
    }
    self.ops = ops
  }
}
