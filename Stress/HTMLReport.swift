import CacheTools
import Foundation
import MappedCache
import SystemCalls

/// `--report FILE.html`: the run as one self-contained page that any browser shows
/// offline: no scripts, no external files, charts drawn here as inline SVG. The page is
/// well-formed XML (XHTML served as HTML), so tools can parse it too.
///
/// Sections, each a `<section id=…>`: `verdict` (in words), `parameters`, `results`,
/// `throughput` (operations per second, chaos kills marked), `latency` (percentile plots
/// of gets and sets on a log axis), `hit-ratio` (per second), `processes` (per-process
/// throughput) and `data` (the per-second numbers behind the charts, as a table).
struct HTMLReport {
  let report: RunReport

  init(_ report: RunReport) { self.report = report }

  func write(to path: String) throws {
    guard FileManager.default.createFile(atPath: path, contents: Data(page().utf8)) else {
      throw StressFailure(Errno.current.message)
    }
  }

  // MARK: The page

  func page() -> String {
    let r = report
    let passed = r.failureReasons.isEmpty
    var h = """
      <!DOCTYPE html>
      <html xmlns="http://www.w3.org/1999/xhtml" lang="en">
      <head>
      <meta charset="utf-8"/>
      <meta name="viewport" content="width=device-width, initial-scale=1"/>
      <title>cache-stress: \(passed ? "PASS" : "FAIL"), \(esc(Fmt.count(r.opsPerSecond))) ops/s</title>
      <style>\(Self.css)</style>
      </head>
      <body>
      <h1>cache-stress report</h1>
      <p class="sub">\(esc(runLine)) · \(esc(ToolVersion.line(tool: "cache-stress")))</p>

      """
    h += verdictSection()
    h += parametersSection()
    h += resultsSection()
    h += throughputSection()
    h += latencySection()
    h += hitRatioSection()
    h += processesSection()
    h += dataSection()
    h += "</body>\n</html>\n"
    return h
  }

  private var runLine: String {
    let o = report.options
    return "\(o.procs) process\(o.procs == 1 ? "" : "es") × \(o.threads) thread\(o.threads == 1 ? "" : "s"), "
      + String(format: "%.1f s", o.duration) + ", seed \(o.seed ?? 0)"
  }

  // MARK: Sections

  private func verdictSection() -> String {
    let passed = report.failureReasons.isEmpty
    var s = "<section id=\"verdict\" class=\"\(passed ? "pass" : "fail")\">\n"
    s += "<h2>Verdict: \(passed ? "PASS" : "FAIL")</h2>\n"
    for p in verdictWords() { s += "<p>\(esc(p))</p>\n" }
    return s + "</section>\n"
  }

  /// The verdict in sentences: what was checked, what was found, and what that means.
  func verdictWords() -> [String] {
    let r = report
    let o = r.options
    let m = r.merged
    var out: [String] = []
    let checked =
      o.checkEvery == 1
      ? "every hit was checked whole (every byte regenerated from its header)"
      : "every hit was checked for its key, length and writer, and 1 in \(o.checkEvery) whole"
    var freshness = "No reader saw a value older than one it had already seen from the same writer (wrong_values 0)"
    if o.trackEvery > 1 { freshness += "; freshness was tracked for 1 key in \(o.trackEvery)" }
    if o.valueMin < ValueFormat.trackedMinimumSize {
      freshness +=
        "; values under \(ValueFormat.trackedMinimumSize) bytes carry no sequence number, so their freshness was not tracked"
    }
    if r.failureReasons.isEmpty && m.getOps == 0 {
      out.append(
        "The cache passed, but no value was read back: the run did no gets (--read-pct \(o.readPct)). "
          + "None of the \(Fmt.grouped(r.ops)) operations failed, and the file verified clean after the run.")
    } else if r.failureReasons.isEmpty {
      out.append(
        "The cache passed. Of \(Fmt.grouped(m.getOps)) gets, \(Fmt.grouped(m.hits)) hit; \(checked), "
          + "and none was torn or of another key (corrupt_reads 0). \(freshness). None of the \(Fmt.grouped(r.ops)) operations failed, and the file verified clean after the run."
      )
    } else {
      out += failureWords(checked: checked)
    }
    if let kills = killWords() { out.append(kills) }
    return out
  }

  /// What a failed run found, and the first of its messages.
  private func failureWords(checked: String) -> [String] {
    let r = report
    let m = r.merged
    var what: [String] = []
    if m.corruptReads > 0 {
      what.append(
        "\(Fmt.grouped(m.corruptReads)) read\(m.corruptReads == 1 ? " was" : "s were") not a whole value of the key asked for (corrupt_reads)"
      )
    }
    if m.wrongValues > 0 {
      what.append(
        "\(Fmt.grouped(m.wrongValues)) read\(m.wrongValues == 1 ? "" : "s") went back in time: a value older than one the same reader had seen (wrong_values)"
      )
    }
    if r.errors > 0 {
      what.append(
        "\(Fmt.grouped(r.errors)) operation\(r.errors == 1 ? "" : "s") or worker\(r.errors == 1 ? "" : "s") failed (errors)"
      )
    }
    if !r.verifyOK { what.append("the file did not verify after the run") }
    var out = [
      "The run FAILED: " + what.joined(separator: "; ") + ". \(checked.prefix(1).uppercased() + checked.dropFirst())."
    ]
    for p in r.verifyProblems.prefix(5) { out.append("verify: \(p)") }
    for msg in m.messages.prefix(5) { out.append(msg) }
    return out
  }

  /// The chaos kills and what they caught; nil without kills.
  private func killWords() -> String? {
    let r = report
    guard r.kills > 0 else { return nil }
    let recoveries = max(0, r.after.recoveries - r.before.recoveries)
    let caught =
      recoveries == 0
      ? "No kill caught its victim holding the write lock"
      : "\(recoveries) of them caught the victim holding the write lock, and \(recoveries == 1 ? "" : "each time ")"
        + "the next writer took the lock over and repaired what the victim left"
    return "\(r.kills) worker\(r.kills == 1 ? " was" : "s were") killed with SIGKILL during the run and restarted "
      + "(marked on the timelines). \(caught) (recoveries \(recoveries))."
  }

  private func parametersSection() -> String {
    let o = report.options
    var rows: [(String, String)] = [
      ("processes × threads", "\(o.procs) × \(o.threads)"),
      ("duration", String(format: "%.1f s", o.duration)),
      ("keys", "\(Fmt.grouped(UInt64(o.keys))), \(o.dist == .zipf ? "zipf (theta \(o.zipfTheta))" : "uniform")"),
      ("key size", "\(o.keySize) B"),
      ("value size", "\(o.valueSizeText) B"),
      ("operations", "\(o.readPct) % gets, \(100 - o.readPct) % sets" + (o.readThrough ? ", read-through" : "")),
      ("expiry", o.ttl.map { "\($0) s" } ?? "none"),
      ("prefill", o.prefill ? String(format: "yes (%.2f s)", report.prefillSeconds) : "no"),
      ("capacity", Fmt.bytes(report.after.capacity)),
      ("lock", o.lock.rawValue),
      (
        "checks",
        (o.checkEvery == 1 ? "every read checked whole" : "every read's header, 1 read in \(o.checkEvery) whole")
          + (o.trackEvery == 1
            ? "; freshness tracked for every key" : "; freshness tracked for 1 key in \(o.trackEvery)")
      ),
      ("chaos kills", "\(o.chaosKills)"),
      ("seed", "\(o.seed ?? 0)"),
    ]
    if let p = report.path { rows.append(("file", p)) }
    return section("parameters", "Parameters", table(rows))
  }

  private func resultsSection() -> String {
    let r = report
    let m = r.merged
    let g = m.getHist
    let t = m.setHist
    func d(_ a: Int, _ b: Int) -> String { Fmt.grouped(UInt64(max(0, a - b))) }
    let rows: [(String, String)] = [
      ("operations", "\(Fmt.grouped(r.ops)) (\(Fmt.count(r.opsPerSecond)) ops/s)"),
      (
        "gets",
        "\(Fmt.grouped(m.getOps)): \(Fmt.grouped(m.hits)) hits, \(Fmt.grouped(m.misses)) misses, hit ratio "
          + String(format: "%.2f %%", r.hitRatio * 100)
      ),
      ("sets", Fmt.grouped(m.setOps)),
      ("get latency", Self.latencyLine(g)),
      ("set latency", Self.latencyLine(t)),
      ("cache after", "\(Fmt.grouped(UInt64(r.after.entries))) entries, \(Fmt.bytes(r.after.liveBytes)) live"),
      (
        "during the run",
        "evictions \(d(r.after.evictions, r.before.evictions)), expirations \(d(r.after.expirations, r.before.expirations)), recoveries \(d(r.after.recoveries, r.before.recoveries)), lock takeovers \(d(r.after.lockTakeovers, r.before.lockTakeovers))"
      ),
      (
        "checks",
        "corrupt_reads \(m.corruptReads), wrong_values \(m.wrongValues), errors \(r.errors), verify \(r.verifyOK ? "ok" : "FAILED")"
      ),
    ]
    return section("results", "Results", table(rows))
  }

  private func throughputSection() -> String {
    let tl = report.merged.timeline
    let duration = report.options.duration
    var total: [(Double, Double)] = []
    var gets: [(Double, Double)] = []
    var sets: [(Double, Double)] = []
    for i in tl.buckets.indices {
      let x = Double(i * tl.bucketSeconds) + tl.span(i, duration: duration) / 2
      let span = tl.span(i, duration: duration)
      total.append((x, Double(tl.ops(i)) / span))
      gets.append((x, Double(tl.gets(i)) / span))
      sets.append((x, Double(tl.sets(i)) / span))
    }
    let peak = total.map(\.1).max() ?? 0
    var chart = LineChart(id: "throughput-chart", xRange: 0...max(duration, 0.001), yRange: 0...Self.niceCeiling(peak))
    chart.xLabel = "seconds since the start"
    chart.yLabel = "operations per second"
    chart.yFormat = { Fmt.count($0) }
    chart.series = [
      Series(name: "all operations", cssClass: "s-total", points: total),
      Series(name: "gets", cssClass: "s-get", points: gets),
      Series(name: "sets", cssClass: "s-set", points: sets),
    ]
    chart.markers = killMarkers + growthMarkers
    var note =
      "Operations done in each \(tl.bucketSeconds == 1 ? "second" : "\(tl.bucketSeconds) s"), summed over every process (counted when a worker flushes its results, every \(WorkerTiming.flushInterval) s)."
    if !report.killEvents.isEmpty { note += " Red dashed lines: chaos kills (SIGKILL of a worker, restarted at once)." }
    if !report.growthEvents.isEmpty { note += " Lines marked \"grow\": growths of the cache (--grow-every)." }
    return section("throughput", "Throughput over the run", chart.svg() + "<p class=\"note\">\(esc(note))</p>\n")
  }

  private var growthMarkers: [Marker] {
    report.growthEvents.enumerated().map { i, g in
      Marker(
        x: g.seconds, label: "grow \(i + 1)",
        title: String(
          format: "growth %d at %.2f s: %@ to %@ in %.3f s, %d entries moved%@", i + 1, g.seconds,
          Fmt.bytes(g.fromCapacity), Fmt.bytes(g.toCapacity), g.took, g.movedEntries,
          g.killed ? " (\(GrowthEvent.killedNote))" : ""))
    }
  }

  private var killMarkers: [Marker] {
    report.killEvents.enumerated().map { i, k in
      Marker(
        x: k.seconds, label: "kill \(i + 1)",
        title: String(format: "kill %d at %.2f s: worker %d (pid %d), restarted", i + 1, k.seconds, k.worker, k.pid))
    }
  }

  private func latencySection() -> String {
    let g = report.merged.getHist
    let t = report.merged.setHist
    let gp = Self.percentilePoints(g)
    let sp = Self.percentilePoints(t)
    let all = gp + sp
    let nines = max(3, Int(((all.map(\.0).max() ?? 3)).rounded(.up)))
    let lo = max(1, all.map(\.1).min() ?? 10)
    let hi = max(lo * 10, all.map(\.1).max() ?? 1000)
    var chart = LineChart(
      id: "latency-chart", xRange: 0...Double(nines),
      yRange: pow(10, floor(log10(lo)))...pow(10, ceil(log10(hi))))
    chart.yLog = true
    chart.xLabel = "percentile (log scale of 1 / (1 − p))"
    chart.yLabel = "latency"
    chart.yFormat = { Self.decade($0) }
    chart.xTicks = (0...nines).map { n in (Double(n), Self.percentileLabel(n)) }
    chart.steps = true
    chart.series = [
      Series(name: "get", cssClass: "s-get", points: gp),
      Series(name: "set", cssClass: "s-set", points: sp),
    ]
    var rows =
      "<table class=\"numbers\"><tr><th></th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>p99.99</th><th>max</th><th>samples</th></tr>\n"
    for (name, h) in [("get", g), ("set", t)] {
      rows += "<tr><th>\(name)</th>"
      for f in [0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
        rows += "<td>\(h.total == 0 ? "–" : esc(Fmt.ns(h.percentile(f))))</td>"
      }
      rows += "<td>\(Fmt.grouped(h.total))</td></tr>\n"
    }
    rows += "</table>\n"
    let note =
      "1 operation in \(WorkerTiming.sampleEvery) is timed; the histograms of every thread and process are merged, so percentiles come from all samples. Each point is a histogram bucket (about 3 % wide) at the share of samples at or below it."
    return section("latency", "Latency distribution", chart.svg() + rows + "<p class=\"note\">\(esc(note))</p>\n")
  }

  private func hitRatioSection() -> String {
    let tl = report.merged.timeline
    let duration = report.options.duration
    var points: [(Double, Double)] = []
    for i in tl.buckets.indices where tl.gets(i) > 0 {
      points.append(
        (
          Double(i * tl.bucketSeconds) + tl.span(i, duration: duration) / 2,
          100 * Double(tl.hits(i)) / Double(tl.gets(i))
        ))
    }
    var chart = LineChart(id: "hit-ratio-chart", xRange: 0...max(duration, 0.001), yRange: 0...100)
    chart.xLabel = "seconds since the start"
    chart.yLabel = "hits per get (%)"
    chart.yFormat = { String(format: "%.0f %%", $0) }
    chart.series = [Series(name: "hit ratio", cssClass: "s-hit", points: points)]
    if points.isEmpty { chart.emptyText = "no gets in this run" }
    chart.markers = killMarkers
    let note =
      points.isEmpty
      ? "There is no ratio to draw without gets."
      : report.options.prefill && report.options.ttl == nil
        ? "Every key was prefilled and nothing expires: a miss is a read that found its slot mid-write for too long, or an entry evicted for room."
        : "Hits per get in each interval; misses are keys not yet set, expired or evicted."
    return section("hit-ratio", "Hit ratio over time", chart.svg() + "<p class=\"note\">\(esc(note))</p>\n")
  }

  private func processesSection() -> String {
    let duration = report.options.duration
    var bars: [Bar] = []
    for (w, c) in report.merged.perWorker.enumerated() {
      let inc = w < report.incarnations.count ? report.incarnations[w] : 0
      let label = "worker \(w)" + (inc > 0 ? " (\(inc + 1) incarnations)" : "")
      bars.append(
        Bar(
          label: label, value: Double(c.getOps + c.setOps) / duration,
          title:
            "worker \(w): \(Fmt.grouped(c.getOps)) gets, \(Fmt.grouped(c.setOps)) sets, \(Fmt.grouped(c.hits)) hits"))
    }
    let chart = BarChart(id: "processes-chart", bars: bars, format: { Fmt.count($0) + " ops/s" })
    let note =
      "Average operations per second of each worker process over the whole run, all its incarnations together (a killed incarnation counts up to its last flush)."
    return section("processes", "Throughput per process", chart.svg() + "<p class=\"note\">\(esc(note))</p>\n")
  }

  private func dataSection() -> String {
    let tl = report.merged.timeline
    let duration = report.options.duration
    var s =
      "<details><summary>Numbers behind the charts (per \(tl.bucketSeconds == 1 ? "second" : "\(tl.bucketSeconds) s"))</summary>\n"
    s +=
      "<table id=\"timeline-table\" class=\"numbers\">\n<tr><th>from (s)</th><th>seconds</th><th>gets</th><th>sets</th><th>hits</th><th>misses</th><th>ops/s</th></tr>\n"
    for i in tl.buckets.indices {
      let span = tl.span(i, duration: duration)
      s +=
        "<tr><td>\(i * tl.bucketSeconds)</td><td>\(String(format: "%.3g", span))</td><td>\(tl.gets(i))</td><td>\(tl.sets(i))</td>"
        + "<td>\(tl.hits(i))</td><td>\(tl.buckets[i][3])</td><td>\(Int((Double(tl.ops(i)) / span).rounded()))</td></tr>\n"
    }
    s += "</table>\n</details>\n"
    return section("data", "Data", s)
  }

  // MARK: Helpers

  private func section(_ id: String, _ title: String, _ body: String) -> String {
    "<section id=\"\(id)\">\n<h2>\(esc(title))</h2>\n\(body)</section>\n"
  }

  private func table(_ rows: [(String, String)]) -> String {
    var s = "<table class=\"kv\">\n"
    for (k, v) in rows { s += "<tr><th>\(esc(k))</th><td>\(esc(v))</td></tr>\n" }
    return s + "</table>\n"
  }

  /// Points of a percentile plot: for each non-empty bucket, x = log10(1 / (1 − p)) where
  /// p is the share of samples up to and including it (the last bucket, p = 1, is put one
  /// decade past the one before it, at most at the resolution the samples allow), y its
  /// lower bound in ns.
  static func percentilePoints(_ h: LatencyHistogram) -> [(Double, Double)] {
    let total = h.total
    guard total > 0 else { return [] }
    let limit = log10(Double(total))
    var points: [(Double, Double)] = [(0, Double(max(1, firstNonEmpty(h))))]
    var acc: UInt64 = 0
    for (b, c) in h.counts.enumerated() where c > 0 {
      acc &+= c
      let rest = Double(total - acc) / Double(total)
      let x = rest > 0 ? min(log10(1 / rest), limit) : max(limit, (points.last?.0 ?? 0))
      points.append((x, Double(max(1, LatencyHistogram.lowerBound(b)))))
    }
    return points
  }

  private static func firstNonEmpty(_ h: LatencyHistogram) -> UInt64 {
    for (b, c) in h.counts.enumerated() where c > 0 { return LatencyHistogram.lowerBound(b) }
    return 1
  }

  /// "p50 912ns, p99 1856ns, p99.9 18.9µs (9,585 samples)", or "no samples".
  static func latencyLine(_ h: LatencyHistogram) -> String {
    guard h.total > 0 else { return "no samples" }
    return "p50 \(Fmt.ns(h.percentile(0.5))), p99 \(Fmt.ns(h.percentile(0.99))), p99.9 \(Fmt.ns(h.percentile(0.999))) "
      + "(\(Fmt.grouped(h.total)) samples)"
  }

  /// A power of ten of nanoseconds: 1 ns, 10 ns, … 1 µs, … 1 s, 10 s.
  static func decade(_ ns: Double) -> String {
    let e = Int(log10(max(1, ns)).rounded())
    let units = ["ns", "µs", "ms", "s"]
    let u = min(e / 3, units.count - 1)
    let mantissa = pow(10, Double(e - 3 * u))
    return "\(Int(mantissa.rounded())) \(units[u])"
  }

  /// 0 → "0%", 1 → "90%", 2 → "99%", 3 → "99.9%", …
  static func percentileLabel(_ nines: Int) -> String {
    switch nines {
    case 0: return "0%"
    case 1: return "90%"
    case 2: return "99%"
    default: return "99." + String(repeating: "9", count: nines - 2) + "%"
    }
  }

  /// A round number at or above `v` (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of
  /// ten), so that the highest point fills most of the chart.
  static func niceCeiling(_ v: Double) -> Double {
    guard v > 0, v.isFinite else { return 1 }
    let p = pow(10, floor(log10(v)))
    for m in [1.0, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10] where m * p >= v * 1.05 { return m * p }
    return 10 * p
  }

  static let css = """
    body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px auto;max-width:880px;color:#1a202c;background:#fff;padding:0 16px}
    h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:0 0 10px}
    .sub{color:#4a5568;margin:0 0 20px}
    section{margin:0 0 28px}
    #verdict{border-radius:8px;padding:14px 18px}
    #verdict.pass{background:#f0fff4;border:2px solid #38a169}#verdict.fail{background:#fff5f5;border:2px solid #c53030}
    #verdict.pass h2{color:#276749}#verdict.fail h2{color:#9b2c2c}
    #verdict p{margin:6px 0;line-height:1.45}
    table{border-collapse:collapse;font-size:14px}
    table.kv th{text-align:left;font-weight:600;padding:3px 18px 3px 0;vertical-align:top;white-space:nowrap}
    table.kv td{padding:3px 0}
    table.numbers{margin-top:8px}
    table.numbers th,table.numbers td{padding:3px 10px;text-align:right;border-bottom:1px solid #e2e8f0}
    .note{color:#4a5568;font-size:13px;line-height:1.4;margin:6px 0 0}
    svg{display:block;max-width:100%;height:auto}
    svg text{font-family:inherit;font-size:12px;fill:#2d3748}
    .grid{stroke:#e2e8f0;stroke-width:1}.axis{stroke:#4a5568;stroke-width:1}
    polyline.line{fill:none;stroke-width:2;stroke-linejoin:round}
    .s-total{stroke:#2b6cb0;fill:#2b6cb0}.s-get{stroke:#38a169;fill:#38a169}.s-set{stroke:#dd6b20;fill:#dd6b20}.s-hit{stroke:#6b46c1;fill:#6b46c1}
    .kill{stroke:#c53030;stroke-width:1.5;stroke-dasharray:5 4}text.kill-label{fill:#c53030;font-size:11px}
    .bar{fill:#2b6cb0}text.empty{fill:#718096;font-size:15px}
    details summary{cursor:pointer;color:#2b6cb0}
    """
}

/// One line of a chart.
struct Series {
  var name: String
  var cssClass: String
  var points: [(Double, Double)]
}

/// A vertical line across a chart at `x`, labelled (the chaos kills).
struct Marker {
  var x: Double
  var label: String
  var title: String
}

/// A line chart as an SVG element: linear x; linear or log y; gridlines, ticks and labels,
/// a legend, vertical markers. Values outside the ranges are clamped to the plot area.
struct LineChart {
  let id: String
  var xRange: ClosedRange<Double>
  var yRange: ClosedRange<Double>
  var yLog = false
  /// Draw each series as steps (a histogram's percentile plot) rather than straight lines.
  var steps = false
  var series: [Series] = []
  var markers: [Marker] = []
  var xLabel = ""
  var yLabel = ""
  var xTicks: [(Double, String)]? = nil
  /// Written across an empty plot.
  var emptyText: String? = nil
  var yFormat: (Double) -> String = { String(format: "%g", $0) }

  let width = 840.0, height = 300.0
  let left = 78.0, right = 34.0, top = 30.0, bottom = 46.0

  init(id: String, xRange: ClosedRange<Double>, yRange: ClosedRange<Double>) {
    self.id = id
    self.xRange = xRange
    self.yRange = yRange.lowerBound < yRange.upperBound ? yRange : yRange.lowerBound...(yRange.lowerBound + 1)
  }

  func px(_ x: Double) -> Double {
    let f = (x - xRange.lowerBound) / max(1e-12, xRange.upperBound - xRange.lowerBound)
    return left + min(1, max(0, f)) * (width - left - right)
  }

  func py(_ y: Double) -> Double {
    let f: Double
    if yLog {
      let lo = log10(max(1e-12, yRange.lowerBound))
      let hi = log10(max(1e-12, yRange.upperBound))
      f = (log10(max(1e-12, y)) - lo) / max(1e-12, hi - lo)
    } else {
      f = (y - yRange.lowerBound) / max(1e-12, yRange.upperBound - yRange.lowerBound)
    }
    return top + (1 - min(1, max(0, f))) * (height - top - bottom)
  }

  private var yTicks: [Double] {
    if yLog {
      var t: [Double] = []
      var v = yRange.lowerBound
      while v <= yRange.upperBound * 1.0001 {
        t.append(v)
        v *= 10
      }
      return t
    }
    let step = niceStep(yRange.upperBound - yRange.lowerBound, count: 5)
    return stride(from: yRange.lowerBound, through: yRange.upperBound + step * 1e-9, by: step).map { $0 }
  }

  private var xTickList: [(Double, String)] {
    if let xTicks { return xTicks }
    let step = niceStep(xRange.upperBound - xRange.lowerBound, count: 10)
    let decimals = max(0, Int(-floor(log10(step) + 1e-9)))
    return stride(from: xRange.lowerBound, through: xRange.upperBound + step * 1e-9, by: step).map {
      ($0, String(format: "%.\(decimals)f", $0))
    }
  }

  func svg() -> String {
    var s =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"\(id)\" class=\"chart\" viewBox=\"0 0 \(f(width)) \(f(height))\" width=\"\(f(width))\" height=\"\(f(height))\" role=\"img\">\n"
    s += "<title>\(esc(yLabel)) against \(esc(xLabel))</title>\n"
    s += axes() + markerLines() + seriesLines() + legend()
    return s + "</svg>\n"
  }

  /// The plot area's corners: x0 ... x1 left to right, y0 ... y1 top to bottom.
  private var x0: Double { left }
  private var x1: Double { width - right }
  private var y0: Double { top }
  private var y1: Double { height - bottom }

  /// Grid lines and ticks, both axes and their labels, and the text of an empty chart.
  private func axes() -> String {
    var s = ""
    for t in yTicks {
      let y = py(t)
      s += "<line class=\"grid\" x1=\"\(f(x0))\" y1=\"\(f(y))\" x2=\"\(f(x1))\" y2=\"\(f(y))\"/>"
      s += "<text x=\"\(f(x0 - 6))\" y=\"\(f(y + 4))\" text-anchor=\"end\">\(esc(yFormat(t)))</text>\n"
    }
    for (v, label) in xTickList {
      let x = px(v)
      s += "<line class=\"axis\" x1=\"\(f(x))\" y1=\"\(f(y1))\" x2=\"\(f(x))\" y2=\"\(f(y1 + 5))\"/>"
      s += "<text x=\"\(f(x))\" y=\"\(f(y1 + 18))\" text-anchor=\"middle\">\(esc(label))</text>\n"
    }
    s += "<line class=\"axis\" x1=\"\(f(x0))\" y1=\"\(f(y1))\" x2=\"\(f(x1))\" y2=\"\(f(y1))\"/>\n"
    s += "<line class=\"axis\" x1=\"\(f(x0))\" y1=\"\(f(y0))\" x2=\"\(f(x0))\" y2=\"\(f(y1))\"/>\n"
    s += "<text x=\"\(f((x0 + x1) / 2))\" y=\"\(f(height - 6))\" text-anchor=\"middle\">\(esc(xLabel))</text>\n"
    s +=
      "<text x=\"14\" y=\"\(f((y0 + y1) / 2))\" text-anchor=\"middle\" transform=\"rotate(-90 14 \(f((y0 + y1) / 2)))\">\(esc(yLabel))</text>\n"
    if let emptyText {
      s +=
        "<text class=\"empty\" x=\"\(f((x0 + x1) / 2))\" y=\"\(f((y0 + y1) / 2))\" text-anchor=\"middle\">\(esc(emptyText))</text>\n"
    }
    return s
  }

  /// A vertical line per marker (a chaos kill), with its tooltip and label.
  private func markerLines() -> String {
    var s = ""
    for (i, m) in markers.enumerated() {
      let x = px(m.x)
      let labelY = y0 + 10 + 12 * Double(i % 3)  // staggered, so that close kills' labels do not overlap
      s += "<g class=\"marker\"><title>\(esc(m.title))</title>"
      s += "<line class=\"kill\" x1=\"\(f(x))\" y1=\"\(f(y0))\" x2=\"\(f(x))\" y2=\"\(f(y1))\"/>"
      // Labels only while they fit; a crowded timeline keeps its lines and their tooltips.
      if markers.count <= 12 {
        s += "<text class=\"kill-label\" x=\"\(f(x + 3))\" y=\"\(f(labelY))\">\(esc(m.label))</text>"
      }
      s += "</g>\n"
    }
    return s
  }

  /// A polyline per series (its points circled when there are few).
  private func seriesLines() -> String {
    var s = ""
    for series in series where !series.points.isEmpty {
      var pts: [(Double, Double)] = []
      for (i, p) in series.points.enumerated() {
        // Steps: the samples between the previous point's share and this one's are this
        // point's latency, so the line rises at the previous x, then runs to this one.
        if steps && i > 0 { pts.append((px(series.points[i - 1].0), py(p.1))) }
        pts.append((px(p.0), py(p.1)))
      }
      let list = pts.map { "\(f($0.0)),\(f($0.1))" }.joined(separator: " ")
      s +=
        "<polyline class=\"line \(series.cssClass)\" data-series=\"\(esc(series.name))\" data-count=\"\(series.points.count)\" points=\"\(list)\"><title>\(esc(series.name))</title></polyline>\n"
      if series.points.count <= 120 && !steps {
        for p in series.points {
          s +=
            "<circle class=\"\(series.cssClass)\" cx=\"\(f(px(p.0)))\" cy=\"\(f(py(p.1)))\" r=\"2.5\"><title>\(esc(series.name)): \(esc(yFormat(p.1))) at \(String(format: "%.1f", p.0)) s</title></circle>\n"
        }
      }
    }
    return s
  }

  /// The legend, top right.
  private func legend() -> String {
    var s = ""
    var lx = x1 - 8
    for series in series.reversed() {
      let w = Double(series.name.count) * 7 + 26
      lx -= w
      s +=
        "<g class=\"legend\"><rect class=\"\(series.cssClass)\" x=\"\(f(lx))\" y=\"\(f(8))\" width=\"14\" height=\"4\"/>"
      s += "<text x=\"\(f(lx + 18))\" y=\"\(f(14))\">\(esc(series.name))</text></g>\n"
    }
    return s
  }
}

/// One bar of a horizontal bar chart.
struct Bar {
  var label: String
  var value: Double
  var title: String
}

/// Horizontal bars (one per worker process), each labelled with its value.
struct BarChart {
  let id: String
  var bars: [Bar]
  var format: (Double) -> String

  func svg() -> String {
    let rowHeight = 26.0
    let left = 190.0
    let width = 840.0
    let right = 110.0
    let top = 8.0
    let height = top * 2 + rowHeight * Double(max(1, bars.count))
    let peak = max(bars.map(\.value).max() ?? 0, 1e-9)
    var s =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"\(id)\" class=\"chart\" viewBox=\"0 0 \(f(width)) \(f(height))\" width=\"\(f(width))\" height=\"\(f(height))\" role=\"img\">\n"
    s += "<title>operations per second per worker process</title>\n"
    for (i, b) in bars.enumerated() {
      let y = top + Double(i) * rowHeight
      let w = max(1, (width - left - right) * b.value / peak)
      s += "<g><title>\(esc(b.title))</title>"
      s += "<text x=\"\(f(left - 8))\" y=\"\(f(y + 17))\" text-anchor=\"end\">\(esc(b.label))</text>"
      s +=
        "<rect class=\"bar\" data-value=\"\(f(b.value))\" x=\"\(f(left))\" y=\"\(f(y + 4))\" width=\"\(f(w))\" height=\"\(f(rowHeight - 8))\"/>"
      s += "<text x=\"\(f(left + w + 6))\" y=\"\(f(y + 17))\">\(esc(format(b.value)))</text></g>\n"
    }
    return s + "</svg>\n"
  }
}

/// A step for about `count` ticks over `span`: 1, 2 or 5 times a power of ten.
private func niceStep(_ span: Double, count: Int) -> Double {
  guard span > 0, span.isFinite else { return 1 }
  let raw = span / Double(max(1, count))
  let p = pow(10, floor(log10(raw)))
  for m in [1.0, 2, 5, 10] where m * p >= raw { return m * p }
  return 10 * p
}

/// A coordinate with at most one decimal.
private func f(_ v: Double) -> String {
  let r = (v * 10).rounded() / 10
  return r == r.rounded() ? String(Int(r)) : String(r)
}

/// Text for XML: the five characters XML reserves, escaped.
func esc(_ s: String) -> String {
  var out = ""
  out.reserveCapacity(s.utf8.count)
  for c in s {
    switch c {
    case "&": out += "&amp;"
    case "<": out += "&lt;"
    case ">": out += "&gt;"
    case "\"": out += "&quot;"
    case "'": out += "&#39;"
    default: out.append(c)
    }
  }
  return out
}
