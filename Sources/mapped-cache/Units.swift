import Foundation
import Glibc
import SystemCalls

/// Printing of quantities for people: sizes in B/KiB/MiB/GiB, counts with thousands
/// separators, percentages, seconds, dates, and keys with unprintable bytes escaped.
/// (Parsing is CacheTools' `ByteSize` and `DurationText`, shared with `cache-stress`.)
enum Units {
  // MARK: Printing

  /// 1023 → "1023 B", 1536 → "1.5 KiB", 67108864 → "64.0 MiB".
  static func bytes(_ n: Int) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    if abs(n) < 1024 { return "\(n) B" }
    var v = Double(n)
    var u = 0
    while abs(v) >= 1024 && u < units.count - 1 {
      v /= 1024
      u += 1
    }
    return String(format: "%.1f %@", v, units[u])
  }

  /// 1234567 → "1,234,567".
  static func count(_ n: Int) -> String {
    let digits = String(n.magnitude)
    var out = ""
    for (i, c) in digits.enumerated() {
      if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
      out.append(c)
    }
    return n < 0 ? "-" + out : out
  }

  /// 0.9312 → "93.1 %".
  static func percent(_ ratio: Double) -> String {
    guard ratio.isFinite else { return "-" }
    return String(format: "%.1f %%", ratio * 100)
  }

  /// 12.345 → "12.3 s".
  static func seconds(_ s: Double) -> String {
    guard s.isFinite else { return "-" }
    return String(format: "%.1f s", s)
  }

  /// A rate: 1234.5 → "1,234.5/s".
  static func rate(_ perSecond: Double) -> String {
    guard perSecond.isFinite else { return "-" }
    let whole = Int(perSecond.rounded(.down))
    let tenth = Int(((perSecond - Double(whole)) * 10).rounded(.down))
    return "\(count(whole)).\(max(0, min(9, tenth)))/s"
  }

  /// ISO 8601 in UTC to the second, `YYYY-MM-DDThh:mm:ssZ`.
  static func date(_ d: Date) -> String {
    guard let tm = SystemCall.utcTime(Int(d.timeIntervalSince1970.rounded(.down))) else { return "-" }
    func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
    return
      "\(tm.tm_year + 1900)-\(two(tm.tm_mon + 1))-\(two(tm.tm_mday))T\(two(tm.tm_hour)):\(two(tm.tm_min)):\(two(tm.tm_sec))Z"
  }

  /// "3 h ago", "12 s ago", "in 5 s".
  static func age(_ d: Date, now: Date = Date()) -> String {
    let s = now.timeIntervalSince(d)
    let a = abs(s)
    let text: String
    switch a {
    case ..<120: text = "\(Int(a)) s"
    case ..<7200: text = "\(Int(a / 60)) min"
    case ..<172800: text = "\(Int(a / 3600)) h"
    default: text = "\(Int(a / 86400)) days"
    }
    return s >= 0 ? "\(text) ago" : "in \(text)"
  }

  /// Key or value bytes for a terminal: printable ASCII and valid multi-byte UTF-8
  /// as is (except C1 controls); backslash and control bytes escaped (\\, \n, \t,
  /// \r, \xNN); bytes of invalid UTF-8 as \xNN.
  static func printable(_ b: [UInt8]) -> String {
    var out: [UInt8] = []
    out.reserveCapacity(b.count)
    let hexDigits = Array("0123456789abcdef".utf8)
    func escape(_ x: UInt8) {
      out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "x"), hexDigits[Int(x >> 4)], hexDigits[Int(x & 15)]])
    }
    var i = 0
    while i < b.count {
      let c = b[i]
      if c < 0x80 {
        switch c {
        case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
        case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
        case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
        case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
        case 0x20..<0x7F: out.append(c)
        default: escape(c)
        }
        i += 1
        continue
      }
      let len = utf8SequenceLength(b, at: i)
      // Keep a well-formed sequence, unless it is a C1 control (U+0080...U+009F).
      if len > 1 && !(len == 2 && c == 0xC2 && b[i + 1] < 0xA0) {
        out.append(contentsOf: b[i..<(i + len)])
        i += len
      } else {
        escape(c)
        i += 1
      }
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// Length of the well-formed UTF-8 sequence starting at `i`, or 0 (RFC 3629 table).
  private static func utf8SequenceLength(_ b: [UInt8], at i: Int) -> Int {
    let c = b[i]
    func cont(_ k: Int, _ lo: UInt8 = 0x80, _ hi: UInt8 = 0xBF) -> Bool {
      i + k < b.count && (lo...hi).contains(b[i + k])
    }
    switch c {
    case 0xC2...0xDF: return cont(1) ? 2 : 0
    case 0xE0: return cont(1, 0xA0) && cont(2) ? 3 : 0
    case 0xE1...0xEC, 0xEE...0xEF: return cont(1) && cont(2) ? 3 : 0
    case 0xED: return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0
    case 0xF0: return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0
    case 0xF1...0xF3: return cont(1) && cont(2) && cont(3) ? 4 : 0
    case 0xF4: return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0
    default: return 0
    }
  }
}

/// An aligned text table: columns separated by two spaces, numbers right-aligned.
struct TextTable {
  enum Align { case left, right }
  var header: [String]?
  var align: [Align]
  var rows: [[String]] = []

  init(header: [String]? = nil, align: [Align]) {
    self.header = header
    self.align = align
  }

  mutating func add(_ row: [String]) { rows.append(row) }

  func render() -> String {
    let all = (header.map { [$0] } ?? []) + rows
    var widths = [Int](repeating: 0, count: align.count)
    // A left-aligned last cell is never padded: its width is not needed (and a value
    // there may be long: counting its characters would cost more than printing it).
    for r in all {
      for (i, c) in r.enumerated() where i < widths.count && (i < r.count - 1 || align[i] == .right) {
        widths[i] = max(widths[i], c.count)
      }
    }
    var out = ""
    for r in all {
      var cells: [String] = []
      for (i, c) in r.enumerated() {
        let a = i < align.count ? align[i] : .left
        if i == r.count - 1 && a == .left {
          cells.append(c)
          continue
        }
        let width = i < widths.count ? widths[i] : 0
        let pad = String(repeating: " ", count: max(0, width - c.count))
        cells.append(a == .right ? pad + c : c + pad)
      }
      var line = cells.joined(separator: "  ")
      while line.last == " " { line.removeLast() }
      out += line + "\n"
    }
    return out
  }
}
