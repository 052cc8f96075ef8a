import Testing

@testable import cache_stress

/// The pieces of `--report` with logic of their own: the per-second timeline the workers
/// keep, the percentile plot's points, the axes' round numbers and the page's escaping.
@Suite struct StressTimelineTests {
  func counters(gets: UInt64, sets: UInt64, hits: UInt64) -> Counters {
    var c = Counters()
    c.getOps = gets
    c.setOps = sets
    c.hits = hits
    c.misses = gets - hits
    return c
  }

  @Test func countsLandInTheSecondOfTheirFlush() {
    var t = Timeline(duration: 2.5)
    #expect(t.bucketSeconds == 1 && t.buckets.count == 3)
    t.add(counters(gets: 10, sets: 1, hits: 9), atNanosecondsSinceStart: -5_000_000)  // before the start: first
    t.add(counters(gets: 5, sets: 2, hits: 5), atNanosecondsSinceStart: 999_999_999)
    t.add(counters(gets: 7, sets: 0, hits: 6), atNanosecondsSinceStart: 1_000_000_000)
    t.add(counters(gets: 1, sets: 1, hits: 1), atNanosecondsSinceStart: 9_000_000_000)  // after the end: last
    #expect(t.buckets == [[15, 3, 14, 1], [7, 0, 6, 1], [1, 1, 1, 0]])
    #expect(t.ops(0) == 18 && t.gets(1) == 7 && t.hits(2) == 1)
    #expect(t.span(0, duration: 2.5) == 1 && t.span(2, duration: 2.5) == 0.5)
  }

  @Test func longRunsUseLongerBuckets() {
    let day = Timeline(duration: 86_400)
    #expect(day.bucketSeconds == 144 && day.buckets.count == 600)
    let short = Timeline(duration: 0.1)
    #expect(short.bucketSeconds == 1 && short.buckets.count == 1)
    var t = Timeline(duration: 1000)
    #expect(t.bucketSeconds == 2 && t.buckets.count == 500)
    t.add(counters(gets: 1, sets: 0, hits: 1), atNanosecondsSinceStart: 3_500_000_000)
    #expect(t.gets(1) == 1)
  }

  @Test func mergeAddsOnlyTimelinesOfTheSameRun() {
    var a = Timeline(duration: 3)
    var b = Timeline(duration: 3)
    a.add(counters(gets: 2, sets: 1, hits: 2), atNanosecondsSinceStart: 0)
    b.add(counters(gets: 3, sets: 4, hits: 1), atNanosecondsSinceStart: 2_100_000_000)
    a.merge(b)
    #expect(a.buckets == [[2, 1, 2, 0], [0, 0, 0, 0], [3, 4, 1, 2]])
    var other = Timeline(duration: 5)
    other.add(counters(gets: 9, sets: 9, hits: 9), atNanosecondsSinceStart: 0)
    a.merge(other)  // another run's shape: ignored, never a trap
    var malformed = Timeline(duration: 3)
    malformed.buckets[1] = [1]
    a.merge(malformed)
    #expect(a.buckets == [[2, 1, 2, 0], [0, 0, 0, 0], [3, 4, 1, 2]])
  }

  @Test func percentilePointsRiseAndEndAtTheSamples() {
    var h = LatencyHistogram()
    for v: UInt64 in [100, 100, 200, 400, 800, 1600, 5000, 90_000] { h.record(v) }
    for _ in 0..<992 { h.record(150) }
    let points = HTMLReport.percentilePoints(h)
    #expect(points.first?.0 == 0)
    #expect(zip(points, points.dropFirst()).allSatisfy { $0.0 <= $1.0 && $0.1 <= $1.1 })
    #expect(points.last?.1 == Double(LatencyHistogram.lowerBound(LatencyHistogram.bucket(90_000))))
    #expect(points.allSatisfy { $0.0 <= 3 + 1e-9 }, "1,000 samples resolve three nines, no more")
    #expect(HTMLReport.percentilePoints(LatencyHistogram()).isEmpty)
  }

  @Test func axesAndText() {
    #expect((0...4).map(HTMLReport.percentileLabel) == ["0%", "90%", "99%", "99.9%", "99.99%"])
    #expect(HTMLReport.niceCeiling(255_000) == 300_000)
    #expect(HTMLReport.niceCeiling(0) == 1)
    #expect(HTMLReport.niceCeiling(.infinity) == 1)
    #expect(
      HTMLReport.decade(1000) == "1 µs" && HTMLReport.decade(100) == "100 ns" && HTMLReport.decade(1e7) == "10 ms")
    #expect(esc("a&b<c>\"d'") == "a&amp;b&lt;c&gt;&quot;d&#39;")
  }
}
