/// A run's operations over time, in buckets of whole seconds from the run's start: per
/// bucket the gets, sets, hits and misses done in it. Each worker incarnation keeps one
/// (every result flush adds what its threads did since the last flush to the bucket of
/// the flush's time, so counts land within a flush interval of when they happened); the
/// coordinator adds them up for the run and per worker. Runs longer than
/// `maxBuckets` seconds use longer buckets, so result files stay small.
struct Timeline: Codable, Equatable {
  static let maxBuckets = 600
  /// The length of each bucket, in seconds.
  var bucketSeconds: Int
  /// Per bucket: [gets, sets, hits, misses].
  var buckets: [[UInt64]]
  /// Per bucket: [get p99, get max, set p99, set max] in nanoseconds, each the worst of
  /// the flush intervals (of any worker) ending in the bucket: what a growth or a kill
  /// did to latency, second by second (nil in results of older versions).
  var latency: [[UInt64]]? = nil

  init(duration: Double) {
    let seconds = max(1, Int((duration / Double(Self.maxBuckets)).rounded(.up)))
    bucketSeconds = seconds
    buckets = Array(repeating: [0, 0, 0, 0], count: max(1, Int((duration / Double(seconds)).rounded(.up))))
  }

  /// Adds `c` to the bucket holding `ns` nanoseconds after the start (before it: the first
  /// bucket; after the end: the last).
  mutating func add(_ c: Counters, atNanosecondsSinceStart ns: Int64) {
    let b = min(max(0, Int(ns / 1_000_000_000) / bucketSeconds), buckets.count - 1)
    buckets[b][0] &+= c.getOps
    buckets[b][1] &+= c.setOps
    buckets[b][2] &+= c.hits
    buckets[b][3] &+= c.misses
  }

  /// Notes the latency of a flush interval ending `ns` nanoseconds after the start:
  /// `get` and `set` hold only that interval's samples.
  mutating func addLatency(get: LatencyHistogram, set: LatencyHistogram, atNanosecondsSinceStart ns: Int64) {
    let b = min(max(0, Int(ns / 1_000_000_000) / bucketSeconds), buckets.count - 1)
    if latency == nil { latency = Array(repeating: [0, 0, 0, 0], count: buckets.count) }
    let row = [get.percentile(0.99), get.percentile(1), set.percentile(0.99), set.percentile(1)]
    for j in 0..<4 { latency![b][j] = max(latency![b][j], row[j]) }
  }

  /// Adds another timeline of the same run (bucket by bucket; a malformed one is ignored).
  mutating func merge(_ o: Timeline) {
    guard o.bucketSeconds == bucketSeconds, o.buckets.count == buckets.count else { return }
    for (i, row) in o.buckets.enumerated() where row.count == 4 {
      for j in 0..<4 { buckets[i][j] &+= row[j] }
    }
    guard let other = o.latency, other.count == buckets.count else { return }
    if latency == nil { latency = Array(repeating: [0, 0, 0, 0], count: buckets.count) }
    for (i, row) in other.enumerated() where row.count == 4 {
      for j in 0..<4 { latency![i][j] = max(latency![i][j], row[j]) }
    }
  }

  /// The worst [get p99, get max, set p99, set max] over the buckets `range` covers.
  func worstLatency(buckets range: Range<Int>) -> [UInt64] {
    var w: [UInt64] = [0, 0, 0, 0]
    guard let latency else { return w }
    for i in range where latency.indices.contains(i) && latency[i].count == 4 {
      for j in 0..<4 { w[j] = max(w[j], latency[i][j]) }
    }
    return w
  }

  /// The bucket holding `seconds` after the start.
  func bucket(atSeconds seconds: Double) -> Int {
    min(max(0, Int(seconds) / bucketSeconds), buckets.count - 1)
  }

  /// The seconds bucket `i` covers within a run of `duration` seconds (the last may be short).
  func span(_ i: Int, duration: Double) -> Double {
    max(0.001, min(Double(bucketSeconds), duration - Double(i * bucketSeconds)))
  }

  func gets(_ i: Int) -> UInt64 { buckets[i][0] }
  func sets(_ i: Int) -> UInt64 { buckets[i][1] }
  func hits(_ i: Int) -> UInt64 { buckets[i][2] }
  func ops(_ i: Int) -> UInt64 { buckets[i][0] &+ buckets[i][1] }
}
