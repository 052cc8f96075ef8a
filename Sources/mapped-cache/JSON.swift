import Foundation

/// JSON for scripts, written by hand rather than with JSONSerialization: object keys
/// always sorted, so the same data always prints the same bytes; integers exact;
/// non-finite numbers as null; and fast enough to stream a large dump. Field names
/// are snake_case and documented by the commands. Values: String, Int, Double, Bool,
/// NSNull, arrays of these and `[String: Any]` objects.
enum JSON {
  static func string(_ value: Any, pretty: Bool = true) -> String {
    var out: [UInt8] = []
    out.reserveCapacity(256)
    write(value, into: &out, indent: pretty ? 0 : nil)
    return String(decoding: out, as: UTF8.self)
  }

  private static func write(_ value: Any, into out: inout [UInt8], indent: Int?) {
    switch value {
    case let s as String:
      writeString(s, into: &out)
    case let b as Bool:
      out.append(contentsOf: (b ? "true" : "false").utf8)
    case let i as Int:
      out.append(contentsOf: String(i).utf8)
    case let u as UInt64:
      out.append(contentsOf: String(u).utf8)
    case let d as Double:
      out.append(contentsOf: (d.isFinite ? "\(d)" : "null").utf8)
    case let a as [Any]:
      writeContainer(open: UInt8(ascii: "["), close: UInt8(ascii: "]"), a.map { (nil, $0) }, into: &out, indent: indent)
    case let o as [String: Any]:
      writeContainer(
        open: UInt8(ascii: "{"), close: UInt8(ascii: "}"), o.sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
        into: &out, indent: indent)
    default:
      out.append(contentsOf: "null".utf8)  // NSNull, nil
    }
  }

  private static func writeContainer(
    open: UInt8, close: UInt8, _ items: [(String?, Any)],
    into out: inout [UInt8], indent: Int?
  ) {
    out.append(open)
    if items.isEmpty {
      out.append(close)
      return
    }
    let inner = indent.map { $0 + 2 }
    for (n, (key, value)) in items.enumerated() {
      if n > 0 { out.append(UInt8(ascii: ",")) }
      if let inner {
        out.append(UInt8(ascii: "\n"))
        out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: inner))
      }
      if let key {
        writeString(key, into: &out)
        out.append(contentsOf: (indent == nil ? ":" : ": ").utf8)
      }
      write(value, into: &out, indent: inner)
    }
    if let indent {
      out.append(UInt8(ascii: "\n"))
      out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: indent))
    }
    out.append(close)
  }

  private static let hex = Array("0123456789abcdef".utf8)

  private static func writeString(_ s: String, into out: inout [UInt8]) {
    out.append(UInt8(ascii: "\""))
    for c in s.utf8 {
      switch c {
      case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
      case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
      case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
      case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
      case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
      case 0..<0x20:
        out.append(contentsOf: Array("\\u00".utf8))
        out.append(hex[Int(c >> 4)])
        out.append(hex[Int(c & 15)])
      default: out.append(c)
      }
    }
    out.append(UInt8(ascii: "\""))
  }

  /// Bytes as a JSON field: `name` holding the text when the bytes are valid UTF-8,
  /// else `name_base64` holding their Base64.
  static func bytesField(_ name: String, _ b: [UInt8], into dict: inout [String: Any]) {
    if let s = String(validating: b, as: UTF8.self) {
      dict[name] = s
    } else {
      dict[name + "_base64"] = Data(b).base64EncodedString()
    }
  }

  /// A ratio or mean, rounded so that it prints without binary noise.
  static func number(_ d: Double, digits: Int = 6) -> Any {
    guard d.isFinite else { return NSNull() }
    let scale = pow(10.0, Double(digits))
    return (d * scale).rounded() / scale
  }

  /// Writes a JSON array one element per line, as elements arrive (no buffering of
  /// the whole listing).
  struct ArrayWriter {
    private var count = 0
    mutating func append(_ element: Any) {
      Output.out((count == 0 ? "[\n  " : ",\n  ") + JSON.string(element, pretty: false))
      count += 1
    }
    func finish() { Output.out(count == 0 ? "[]\n" : "\n]\n") }
  }
}
