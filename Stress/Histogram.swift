/// A log-linear latency histogram (as HdrHistogram, and the peer benchmarks' ~3 %
/// buckets): values below 64 ns have a bucket each; above, every power of two is split
/// into 32 buckets. Histograms from any number of threads and processes merge by adding
/// counts, so percentiles come from all samples, never from averaged percentiles.
///
///     bucket(v) = v                                   for v < 64
///               = 64 + (e − 6)·32 + (v >> (e − 5)) & 31   for v ≥ 64, e = ⌊log2 v⌋
struct LatencyHistogram: Equatable {
  static let bucketCount = 2048

  var counts: [UInt64]

  init() { counts = [UInt64](repeating: 0, count: Self.bucketCount) }

  @inline(__always)
  static func bucket(_ v: UInt64) -> Int {
    if v < 64 { return Int(v) }
    let e = 63 - v.leadingZeroBitCount  // >= 6
    let b = 64 + (e - 6) * 32 + Int((v >> UInt64(e - 5)) & 31)
    return min(b, bucketCount - 1)
  }

  /// The smallest value that falls in bucket `b`.
  static func lowerBound(_ b: Int) -> UInt64 {
    if b < 64 { return UInt64(b) }
    let e = (b - 64) / 32 + 6
    let sub = (b - 64) % 32
    return UInt64(32 + sub) << UInt64(e - 5)
  }

  @inline(__always)
  mutating func record(_ ns: UInt64) { counts[Self.bucket(ns)] &+= 1 }

  var total: UInt64 { counts.reduce(0, &+) }

  mutating func merge(_ other: LatencyHistogram) {
    for i in 0..<Self.bucketCount { counts[i] &+= other.counts[i] }
  }

  /// The samples of this histogram not in `earlier`, an earlier state of it.
  func minus(_ earlier: LatencyHistogram) -> LatencyHistogram {
    var d = LatencyHistogram()
    for i in 0..<Self.bucketCount { d.counts[i] = counts[i] &- min(counts[i], earlier.counts[i]) }
    return d
  }

  /// The value below which `fraction` of the samples fall (the lower bound of the bucket
  /// holding that sample, as the peers report it); 0 without samples.
  func percentile(_ fraction: Double) -> UInt64 {
    let n = total
    guard n > 0 else { return 0 }
    let want = max(1, UInt64((Double(n) * fraction).rounded(.up)))
    var acc: UInt64 = 0
    for (b, c) in counts.enumerated() where c > 0 {
      acc &+= c
      if acc >= want { return Self.lowerBound(b) }
    }
    return Self.lowerBound(Self.bucketCount - 1)
  }

  /// Non-empty buckets as [bucket, count] pairs (for result files).
  var sparse: [[UInt64]] {
    counts.enumerated().compactMap { $0.element == 0 ? nil : [UInt64($0.offset), $0.element] }
  }

  init(sparse: [[UInt64]]) {
    self.init()
    for pair in sparse where pair.count == 2 && pair[0] < UInt64(Self.bucketCount) {
      counts[Int(pair[0])] &+= pair[1]
    }
  }
}
