import Foundation
import TestSupport
import Testing

#if canImport(FoundationXML)
  import FoundationXML
#endif

/// `cache-stress --report FILE.html`: a short run with chaos kills writes a page that
/// parses as XML, has every section, draws its charts from the run's own numbers (the
/// per-second table adds up to the JSON report's totals, one kill marker per kill, one bar
/// per process), and loads nothing from elsewhere. With Chromium installed, the page is
/// also rendered to a PNG by scripts/report-screenshot.sh.
@Suite(.serialized) struct StressReportTests {
  /// An element as the parser saw it: its name, attributes, text, and the ids of the
  /// section and the svg it sits in.
  struct Element {
    var name: String
    var attributes: [String: String]
    var text = ""
    var section: String?
    var svg: String?
  }

  final class Collector: NSObject, XMLParserDelegate {
    var elements: [Element] = []
    var open: [Int] = []
    var sections: [String?] = []
    var svgs: [String?] = []

    func parser(
      _ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
      attributes: [String: String] = [:]
    ) {
      if name == "section" { sections.append(attributes["id"]) }
      if name == "svg" { svgs.append(attributes["id"]) }
      elements.append(Element(name: name, attributes: attributes, section: sections.last ?? nil, svg: svgs.last ?? nil))
      open.append(elements.count - 1)
    }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
      if name == "section" { sections.removeLast() }
      if name == "svg" { svgs.removeLast() }
      open.removeLast()
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
      for i in open { elements[i].text += string }
    }
  }

  nonisolated(unsafe) static let page:
    (html: String, json: [String: Any], elements: [Element], parsed: Bool, error: String)? = {
      let dir = NSTemporaryDirectory() + "stress-report-\(getpid())-\(UUID().uuidString.prefix(8))"
      try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
      let file = dir + "/run.html"
      let path = TestFiles.tempPath("report")
      defer { TestFiles.cleanup(path) }
      guard
        let r = try? ChildProcess.run(
          TestFiles.binary("cache-stress"),
          [
            "--path", path, "--procs", "2", "--threads", "2", "--duration", "2.5", "--keys", "3000", "--capacity",
            "4MiB",
            "--value-size", "16-100", "--read-pct", "80", "--chaos-kills", "2", "--seed", "9", "--report", file,
            "--json",
          ],
          timeout: 120), r.status == 0,
        let json = try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any],
        let data = FileManager.default.contents(atPath: file)
      else { return nil }
      let parser = XMLParser(data: data)
      let collector = Collector()
      parser.delegate = collector
      let ok = parser.parse()
      return (
        String(decoding: data, as: UTF8.self), json, collector.elements, ok,
        parser.parserError.map { "\($0)" } ?? ""
      )
    }()

  func page() throws -> (html: String, json: [String: Any], elements: [Element]) {
    let p = try #require(Self.page, "cache-stress --report did not run")
    #expect(p.parsed, "the page is not well-formed XML: \(p.error)")
    return (p.html, p.json, p.elements)
  }

  func int(_ j: [String: Any], _ key: String) -> Int { (j[key] as? NSNumber)?.intValue ?? -1 }

  @Test func thePageHasEverySectionAndChart() throws {
    let (html, json, elements) = try page()
    #expect(html.hasPrefix("<!DOCTYPE html>"))
    let sections = elements.filter { $0.name == "section" }.compactMap { $0.attributes["id"] }
    #expect(
      sections == ["verdict", "parameters", "results", "throughput", "latency", "hit-ratio", "processes", "data"])
    let charts = elements.filter { $0.name == "svg" }.compactMap { $0.attributes["id"] }
    #expect(charts == ["throughput-chart", "latency-chart", "hit-ratio-chart", "processes-chart"])
    let verdict = try #require(elements.first { $0.name == "section" && $0.attributes["id"] == "verdict" })
    #expect(verdict.attributes["class"] == "pass")
    #expect(json["passed"] as? Bool == true)
    #expect(verdict.text.contains("Verdict: PASS"))
    #expect(verdict.text.contains("corrupt_reads 0") && verdict.text.contains("wrong_values 0"))
    #expect(verdict.text.contains("\(int(json, "kills")) workers were killed with SIGKILL"))
    let params = try #require(elements.first { $0.name == "section" && $0.attributes["id"] == "parameters" })
    for text in ["2 × 2", "2.5 s", "16-100 B", "80 % gets", "seed", "9"] {
      #expect(params.text.contains(text), "\(text)")
    }
  }

  /// Nothing is loaded from elsewhere: no script, no stylesheet or image by URL, no link
  /// but the XML namespaces.
  @Test func thePageIsSelfContained() throws {
    let (html, _, elements) = try page()
    #expect(!elements.contains { ["script", "link", "img", "iframe", "object", "embed"].contains($0.name) })
    #expect(!elements.contains { $0.attributes["src"] != nil || $0.attributes["href"] != nil })
    let urls = html.components(separatedBy: "http").count - 1
    #expect(urls == html.components(separatedBy: "http://www.w3.org/").count - 1, "only namespace URIs")
    #expect(!html.contains("url("))
  }

  /// The charts are the run's numbers: the per-second table sums to the JSON totals, the
  /// throughput line has one point per second, every point inside the plot; one kill
  /// marker per kill on both timelines; one bar per process, adding up to the run's rate.
  @Test func theChartsCarryTheRunsNumbers() throws {
    let (_, json, elements) = try page()
    let rows = elements.filter { $0.name == "tr" && $0.section == "data" }.dropFirst()
    #expect(rows.count == 3, "2.5 s: buckets of 0-1, 1-2 and 2-2.5 s")
    var sums = [0, 0, 0, 0]
    let cells = elements.filter { $0.name == "td" && $0.section == "data" }.map(\.text)
    #expect(cells.count == rows.count * 7)
    for r in 0..<rows.count {
      for c in 0..<4 { sums[c] += Int(cells[r * 7 + 2 + c]) ?? -1_000_000_000 }
    }
    #expect(sums[0] == int(json, "get_ops"))
    #expect(sums[1] == int(json, "set_ops"))
    #expect(sums[2] == int(json, "hits"))
    #expect(sums[3] == int(json, "misses"))

    let svg = try #require(elements.first { $0.name == "svg" && $0.attributes["id"] == "throughput-chart" })
    let box = (svg.attributes["viewBox"] ?? "").split(separator: " ").compactMap { Double($0) }
    #expect(box.count == 4)
    let lines = elements.filter { $0.name == "polyline" && $0.svg == "throughput-chart" }
    #expect(lines.map { $0.attributes["data-series"] ?? "" } == ["all operations", "gets", "sets"])
    for line in lines {
      let points = (line.attributes["points"] ?? "").split(separator: " ").map { p in
        p.split(separator: ",").compactMap { Double($0) }
      }
      #expect(points.count == 3 && points.allSatisfy { $0.count == 2 })
      #expect(points.allSatisfy { $0[0] >= 0 && $0[0] <= box[2] && $0[1] >= 0 && $0[1] <= box[3] })
      #expect(zip(points, points.dropFirst()).allSatisfy { $0[0] < $1[0] }, "time runs left to right")
    }
    // Operations per second: the "all operations" line is never below the gets line (SVG y
    // grows downwards), and above it where sets were done (a second in which the kills left
    // no worker running may have neither).
    let all = (lines[0].attributes["points"] ?? "").split(separator: " ").map { Double($0.split(separator: ",")[1])! }
    let gets = (lines[1].attributes["points"] ?? "").split(separator: " ").map { Double($0.split(separator: ",")[1])! }
    #expect(zip(all, gets).allSatisfy { $0 <= $1 })
    #expect(zip(all, gets).contains { $0 < $1 })

    let kills = int(json, "kills")
    #expect(kills == 2)
    for chart in ["throughput-chart", "hit-ratio-chart"] {
      let markers = elements.filter { $0.name == "line" && $0.svg == chart && $0.attributes["class"] == "kill" }
      #expect(markers.count == kills, "\(chart)")
    }

    let bars = elements.filter { $0.name == "rect" && $0.svg == "processes-chart" && $0.attributes["class"] == "bar" }
    #expect(bars.count == 2)
    let rate = bars.compactMap { Double($0.attributes["data-value"] ?? "") }.reduce(0, +)
    let opsPerSecond = Double(int(json, "ops")) / 2.5
    #expect(abs(rate - opsPerSecond) <= 1, "bars add up to \(rate), the run did \(opsPerSecond) ops/s")
  }

  /// The latency plot: a line per operation whose latency never falls as the percentile
  /// rises, and a table of percentiles that agrees with the JSON report.
  @Test func theLatencyPlotRisesWithThePercentile() throws {
    let (_, json, elements) = try page()
    let lines = elements.filter { $0.name == "polyline" && $0.svg == "latency-chart" }
    #expect(lines.map { $0.attributes["data-series"] ?? "" } == ["get", "set"])
    for line in lines {
      let points = (line.attributes["points"] ?? "").split(separator: " ").map { p in
        p.split(separator: ",").compactMap { Double($0) }
      }
      #expect(points.count >= 3, "\(line.attributes["data-series"] ?? "")")
      #expect(
        zip(points, points.dropFirst()).allSatisfy { $0[0] <= $1[0] && $0[1] >= $1[1] },
        "x and latency never fall (SVG y grows downwards)")
    }
    let ticks = elements.filter { $0.name == "text" && $0.svg == "latency-chart" }.map(\.text)
    for label in ["0%", "90%", "99%", "99.9%"] { #expect(ticks.contains(label), "\(label)") }
    let cells = elements.filter { $0.name == "td" && $0.section == "latency" }.map(\.text)
    #expect(cells.count == 14)
    #expect(Int(cells[6].replacingOccurrences(of: ",", with: "")) == int(json, "get_samples"))
    #expect(Int(cells[13].replacingOccurrences(of: ",", with: "")) == int(json, "set_samples"))
  }

  static let chromium: String? = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
    .first { FileManager.default.isExecutableFile(atPath: $0) }

  /// The page as a browser shows it: scripts/report-screenshot.sh renders it with headless
  /// Chromium to a PNG of the size asked for. (.ci/run installs Chromium.)
  @Test(.enabled(if: chromium != nil, "Chromium is not installed (apt-get install -y chromium); .ci/run installs it"))
  func chromiumRendersThePage() throws {
    let p = try #require(Self.page)
    let dir = NSTemporaryDirectory() + "stress-shot-\(getpid())-\(UUID().uuidString.prefix(8))"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    try Data(p.html.utf8).write(to: URL(fileURLWithPath: dir + "/run.html"))
    let script = TestFiles.repository + "/scripts/report-screenshot.sh"
    let r = try ChildProcess.run(
      "/bin/bash", [script, dir + "/run.html", dir + "/run.png", "900", "1200"], timeout: 120)
    #expect(r.status == 0, "\(r.stderr)")
    let png = try #require(FileManager.default.contents(atPath: dir + "/run.png"))
    #expect(png.count > 10_000, "a page of charts, not a blank image: \(png.count) bytes")
    let bytes = [UInt8](png.prefix(24))
    #expect(bytes.prefix(8) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], "a PNG")
    func u32(_ o: Int) -> Int { bytes[o..<(o + 4)].reduce(0) { $0 << 8 | Int($1) } }
    #expect(u32(16) == 900 && u32(20) == 1200, "IHDR \(u32(16))×\(u32(20))")
  }
}
