import MappedCache

// RESP3 (and RESP2) for MappedCacheRedis: the reply parser, the command encoder, and an
// encoder of replies (for tests and fake servers). Pure functions of bytes, no I/O: a
// libFuzzer target can drive `RESPParser` directly.

/// One key-value pair of a RESP3 map or attribute.
public struct RESPPair: Equatable, Sendable {
  /// The pair's key.
  public var key: RESPValue
  /// The pair's value.
  public var value: RESPValue
  /// A pair of `key` and `value`.
  public init(_ key: RESPValue, _ value: RESPValue) {
    self.key = key
    self.value = value
  }
}

/// A reply (or push) of a Redis server: every RESP3 type, and the RESP2 ones (which are
/// a subset: `+ - : $ *`, with `$-1` and `*-1` read as `.null`).
public indirect enum RESPValue: Equatable, Sendable {
  /// `+OK`
  case simpleString(String)
  /// `-ERR message` (the whole line after `-`).
  case error(String)
  /// `:42`
  case integer(Int64)
  /// `$3\r\nabc`
  case bulkString([UInt8])
  /// `_`, and RESP2's `$-1` and `*-1`.
  case null
  /// `#t` / `#f`
  case boolean(Bool)
  /// `,3.14` (also `inf`, `-inf`, `nan`)
  case double(Double)
  /// `(3492890328409238509324850943850943825024385` (kept as its digits).
  case bigNumber(String)
  /// `!21\r\nSYNTAX invalid syntax`
  case blobError([UInt8])
  /// `=15\r\ntxt:Some string` (`format` is the 3 bytes before the colon).
  case verbatim(format: String, text: [UInt8])
  /// `*2 …`
  case array([RESPValue])
  /// `%1 …`
  case map([RESPPair])
  /// `~2 …`
  case set([RESPValue])
  /// `>2 …`: out-of-band data (invalidations, pub/sub) between replies.
  case push([RESPValue])
  /// `|1 …` followed by the value it describes.
  case attributed(attributes: [RESPPair], value: RESPValue)

  /// The value without any attributes wrapped around it.
  public var withoutAttributes: RESPValue {
    if case .attributed(_, let v) = self { return v.withoutAttributes }
    return self
  }

  /// The bytes of a bulk, simple or verbatim string; nil for other types.
  public var bytes: [UInt8]? {
    switch self {
    case .bulkString(let b): return b
    case .simpleString(let s): return Array(s.utf8)
    case .verbatim(_, let t): return t
    case .attributed(_, let v): return v.bytes
    default: return nil
    }
  }

  /// The text of a string reply; nil for other types.
  public var string: String? { bytes.map { String(decoding: $0, as: UTF8.self) } }

  /// The message of an error reply (simple or blob); nil for other types.
  public var errorMessage: String? {
    switch self {
    case .error(let s): return s
    case .blobError(let b): return String(decoding: b, as: UTF8.self)
    case .attributed(_, let v): return v.errorMessage
    default: return nil
    }
  }

  /// The elements of an array, set or push; nil for other types (`.null` included).
  public var elements: [RESPValue]? {
    switch self {
    case .array(let a), .set(let a), .push(let a): return a
    case .attributed(_, let v): return v.elements
    default: return nil
    }
  }
}

/// The limits a parser enforces on what a server sends. Anything past them is a thrown
/// `CacheError.protocolViolation`, checked before any memory is reserved for it.
public struct RESPLimits: Sendable, Equatable {
  /// Deepest nesting of aggregates (arrays, maps, sets, pushes, attributes).
  public var maxDepth: Int
  /// Most elements in one aggregate (a map of n pairs counts 2n).
  public var maxAggregateCount: Int
  /// Longest bulk string, blob error or verbatim string, in bytes.
  public var maxBulkLength: Int
  /// Longest header or simple line (`+…`, `-…`, `:…`, lengths), in bytes.
  public var maxLineLength: Int
  /// Most values (scalars and aggregates, at any depth) in one reply: without it, nested
  /// aggregates within the other limits could still grow without bound.
  public var maxReplyElements: Int
  /// Most bytes in one reply (raised to at least `maxBulkLength` + 64 KiB).
  public var maxReplyBytes: Int

  /// Limits with the defaults shown (generous for caches; lower them for fuzzing).
  public init(
    maxDepth: Int = 32, maxAggregateCount: Int = 1 << 20, maxBulkLength: Int = 64 << 20,
    maxLineLength: Int = 64 << 10, maxReplyElements: Int = 4 << 20, maxReplyBytes: Int = 256 << 20
  ) {
    self.maxDepth = maxDepth
    self.maxAggregateCount = maxAggregateCount
    self.maxBulkLength = maxBulkLength
    self.maxLineLength = maxLineLength
    self.maxReplyElements = maxReplyElements
    self.maxReplyBytes = max(maxReplyBytes, maxBulkLength + (64 << 10))
  }
}

/// An incremental RESP3/RESP2 parser: feed it bytes as they arrive, in pieces split
/// anywhere, and take whole values out.
///
/// ```swift
/// var p = RESPParser()
/// p.append(bytes)
/// while let v = try p.next() { … }
/// ```
///
/// State: `buffer[start..<buffer.count]` holds bytes not yet consumed; `stack` holds the
/// aggregates opened but not yet complete (never deeper than `limits.maxDepth`). A value
/// is consumed only when whole, so a scalar split across appends is parsed again from its
/// first byte when more arrive (at most one line or one bulk, both bounded by limits).
/// After a thrown error the parser is poisoned: every later `next()` throws the same.
public struct RESPParser: Sendable {
  /// What the parser accepts.
  public let limits: RESPLimits
  /// Named in errors (the server's address).
  public var endpoint: String

  private var buffer: [UInt8] = []
  private var start = 0
  private var stack: [Frame] = []
  private var failure: CacheError?
  /// Values and bytes consumed so far by the reply being parsed.
  private var replyElements = 0
  private var replyBytes = 0

  private enum Kind: Sendable { case array, set, push, map, attribute }

  private struct Frame: Sendable {
    var kind: Kind
    /// Elements the aggregate holds when complete (an attribute: its pairs and the value).
    var count: Int
    var items: [RESPValue]
  }

  /// A parser with nothing buffered.
  public init(limits: RESPLimits = RESPLimits(), endpoint: String = "server") {
    self.limits = limits
    self.endpoint = endpoint
  }

  /// Bytes received but not yet consumed into a whole value.
  public var bufferedByteCount: Int { buffer.count - start }

  /// Whether a value is partly parsed (bytes buffered or aggregates open).
  public var isMidValue: Bool { bufferedByteCount > 0 || !stack.isEmpty }

  /// Adds bytes received from the server.
  public mutating func append<C: Collection>(_ bytes: C) where C.Element == UInt8 {
    if start > 0 && start >= buffer.count / 2 {
      buffer.removeSubrange(0..<start)
      start = 0
    }
    buffer.append(contentsOf: bytes)
  }

  /// Adds bytes received from the server.
  public mutating func append(_ bytes: UnsafeRawBufferPointer) {
    append(bytes.bindMemory(to: UInt8.self))
  }

  /// The next whole value, or nil when more bytes are needed.
  public mutating func next() throws -> RESPValue? {
    if let failure { throw failure }
    do {
      return try parseNext()
    } catch let e as CacheError {
      failure = e
      throw e
    }
  }

  /// Parses every value in `bytes` (which must end on a value boundary): for tests and fuzzing.
  public static func parseAll(_ bytes: [UInt8], limits: RESPLimits = RESPLimits()) throws -> [RESPValue] {
    var p = RESPParser(limits: limits)
    p.append(bytes)
    var out: [RESPValue] = []
    while let v = try p.next() { out.append(v) }
    if p.isMidValue { throw p.violation("the input ends inside a value") }
    return out
  }

  // MARK: Parsing

  private func violation(_ reason: String) -> CacheError {
    .protocolViolation(endpoint: endpoint, reason: reason)
  }

  private mutating func parseNext() throws -> RESPValue? {
    while true {
      let before = start
      guard let scalarOrOpen = try parseOne() else { return nil }
      replyElements += 1
      replyBytes += start - before
      guard replyElements <= limits.maxReplyElements else {
        throw violation("a reply of more than \(limits.maxReplyElements) values")
      }
      guard replyBytes <= limits.maxReplyBytes else {
        throw violation("a reply of more than \(limits.maxReplyBytes) bytes")
      }
      if stack.isEmpty && scalarOrOpen != nil {
        replyElements = 0
        replyBytes = 0
      }
      guard var value = scalarOrOpen else { continue }  // an aggregate was opened
      // Close every aggregate this value completes.
      while var top = stack.popLast() {
        top.items.append(value)
        if top.items.count < top.count {
          stack.append(top)
          value = .null
          break
        }
        value = Self.close(top)
        if stack.isEmpty {
          replyElements = 0
          replyBytes = 0
          return value
        }
      }
      if stack.isEmpty { return value }
    }
  }

  /// The next scalar (`.some(.some(v))`), an aggregate opened or completed empty
  /// (`.some(nil)` after pushing or handling it), or nil when more bytes are needed.
  private mutating func parseOne() throws -> RESPValue?? {
    guard start < buffer.count else { return nil }
    guard let lineEnd = try findLineEnd(from: start + 1) else { return nil }
    let type = buffer[start]
    switch type {
    case UInt8(ascii: "$"), UInt8(ascii: "!"), UInt8(ascii: "="):
      return try parseBlob(type, lineEnd: lineEnd).map { .some($0) }
    case UInt8(ascii: "*"), UInt8(ascii: "%"), UInt8(ascii: "~"), UInt8(ascii: ">"), UInt8(ascii: "|"):
      return .some(try parseAggregate(type, lineEnd: lineEnd))
    default:
      let value = try parseLine(type, lineEnd: lineEnd)
      start = lineEnd + 2
      return .some(.some(value))
    }
  }

  /// A value held in its header line: `+ - : _ # , (` (the caller consumes the line).
  private func parseLine(_ type: UInt8, lineEnd: Int) throws -> RESPValue {
    let lineStart = start + 1
    switch type {
    case UInt8(ascii: "+"): return .simpleString(text(lineStart, lineEnd))
    case UInt8(ascii: "-"): return .error(text(lineStart, lineEnd))
    case UInt8(ascii: ":"): return .integer(try integer(lineStart, lineEnd))
    case UInt8(ascii: "_"):
      guard lineStart == lineEnd else { throw violation("a null (_) with content") }
      return .null
    case UInt8(ascii: "#"):
      let b = buffer[lineStart]
      guard lineEnd == lineStart + 1, b == UInt8(ascii: "t") || b == UInt8(ascii: "f") else {
        throw violation("a boolean (#) that is not t or f")
      }
      return .boolean(b == UInt8(ascii: "t"))
    case UInt8(ascii: ","): return .double(try double(lineStart, lineEnd))
    case UInt8(ascii: "("):
      let s = text(lineStart, lineEnd)
      let digits = s.hasPrefix("-") || s.hasPrefix("+") ? s.dropFirst() : Substring(s)
      guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else {
        throw violation("a big number (() that is not an integer")
      }
      return .bigNumber(s)
    default:
      throw violation("an unknown type byte 0x\(String(buffer[start], radix: 16))")
    }
  }

  /// A length-prefixed value (`$` bulk, `!` blob error, `=` verbatim), consumed when
  /// whole; nil when its bytes have not all arrived.
  private mutating func parseBlob(_ type: UInt8, lineEnd: Int) throws -> RESPValue? {
    let lineStart = start + 1
    let after = lineEnd + 2
    if lineEnd == lineStart + 1 && buffer[lineStart] == UInt8(ascii: "?") {
      throw violation("streamed strings ($?) are not supported")
    }
    let n = try integer(lineStart, lineEnd)
    if n == -1 && type == UInt8(ascii: "$") {
      start = after
      return .null
    }
    guard n >= 0 else { throw violation("a negative length \(n)") }
    guard n <= Int64(limits.maxBulkLength) else {
      throw violation("a bulk of \(n) bytes exceeds the limit of \(limits.maxBulkLength)")
    }
    let len = Int(n)
    guard buffer.count - after >= len + 2 else { return nil }
    guard buffer[after + len] == 13 && buffer[after + len + 1] == 10 else {
      throw violation("a bulk of \(len) bytes not followed by CRLF")
    }
    let body = Array(buffer[after..<(after + len)])
    start = after + len + 2
    switch type {
    case UInt8(ascii: "$"): return .bulkString(body)
    case UInt8(ascii: "!"): return .blobError(body)
    default:
      guard len >= 4 && body[3] == UInt8(ascii: ":") else { throw violation("a verbatim string without its format") }
      // The format is three printable ASCII bytes (`txt`, `mkd`): anything else could not
      // be kept as the `String` the value carries, byte for byte.
      guard body[0..<3].allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }) else {
        throw violation("a verbatim string whose format is not three printable ASCII bytes")
      }
      return .verbatim(format: String(decoding: body[0..<3], as: UTF8.self), text: Array(body[4...]))
    }
  }

  /// An aggregate's header (`* % ~ > |`): the aggregate is opened on the stack (nil), or
  /// returned whole when it is empty (or RESP2's null array).
  private mutating func parseAggregate(_ type: UInt8, lineEnd: Int) throws -> RESPValue? {
    let lineStart = start + 1
    if lineEnd == lineStart + 1 && buffer[lineStart] == UInt8(ascii: "?") {
      throw violation("streamed aggregates are not supported")
    }
    let n = try integer(lineStart, lineEnd)
    if n == -1 && type == UInt8(ascii: "*") {
      start = lineEnd + 2
      return .null
    }
    guard n >= 0 else { throw violation("a negative aggregate count \(n)") }
    let pairs = type == UInt8(ascii: "%") || type == UInt8(ascii: "|")
    let limit = Int64(limits.maxAggregateCount)
    guard n <= (pairs ? limit / 2 : limit) else {
      throw violation(
        "an aggregate of \(n)\(pairs ? " pairs" : " elements") exceeds the limit of \(limits.maxAggregateCount) elements"
      )
    }
    guard stack.count < limits.maxDepth else { throw violation("nesting deeper than \(limits.maxDepth)") }
    let kind: Kind
    switch type {
    case UInt8(ascii: "*"): kind = .array
    case UInt8(ascii: "%"): kind = .map
    case UInt8(ascii: "~"): kind = .set
    case UInt8(ascii: ">"): kind = .push
    default: kind = .attribute
    }
    let count = Int(n) * (pairs ? 2 : 1) + (kind == .attribute ? 1 : 0)
    start = lineEnd + 2
    let frame = Frame(kind: kind, count: count, items: [])
    // An empty aggregate is a whole value at once.
    if count == 0 { return Self.close(frame) }
    stack.append(frame)
    return nil
  }

  private static func close(_ f: Frame) -> RESPValue {
    switch f.kind {
    case .array: return .array(f.items)
    case .set: return .set(f.items)
    case .push: return .push(f.items)
    case .map: return .map(pairs(f.items[...]))
    case .attribute: return .attributed(attributes: pairs(f.items.dropLast()), value: f.items[f.items.count - 1])
    }
  }

  private static func pairs(_ items: ArraySlice<RESPValue>) -> [RESPPair] {
    var out: [RESPPair] = []
    out.reserveCapacity(items.count / 2)
    var i = items.startIndex
    while i + 1 < items.endIndex {
      out.append(RESPPair(items[i], items[i + 1]))
      i += 2
    }
    return out
  }

  /// The index of the CR of the first CRLF at or after `from`; nil when not yet received.
  private func findLineEnd(from: Int) throws -> Int? {
    var i = from
    let end = min(buffer.count, from + limits.maxLineLength + 1)
    while i < end {
      if buffer[i] == 13 {
        guard i + 1 < buffer.count else { return nil }
        guard buffer[i + 1] == 10 else { throw violation("a CR not followed by LF in a line") }
        return i
      }
      if buffer[i] == 10 { throw violation("a LF without CR in a line") }
      i += 1
    }
    if buffer.count - from > limits.maxLineLength {
      throw violation("a line longer than \(limits.maxLineLength) bytes")
    }
    return nil
  }

  private func text(_ a: Int, _ b: Int) -> String { String(decoding: buffer[a..<b], as: UTF8.self) }

  private func integer(_ a: Int, _ b: Int) throws -> Int64 {
    var i = a
    var negative = false
    if i < b && (buffer[i] == UInt8(ascii: "-") || buffer[i] == UInt8(ascii: "+")) {
      negative = buffer[i] == UInt8(ascii: "-")
      i += 1
    }
    guard i < b, b - i <= 19 else { throw violation("an integer that is empty or too long") }
    var n: Int64 = 0
    while i < b {
      let d = buffer[i]
      guard d >= 48 && d <= 57 else { throw violation("an integer with a non-digit") }
      // Accumulated as a negative number, whose range reaches Int64.min.
      let (m, o1) = n.multipliedReportingOverflow(by: 10)
      let (s, o2) = m.subtractingReportingOverflow(Int64(d - 48))
      guard !o1 && !o2 else { throw violation("an integer out of 64-bit range") }
      n = s
      i += 1
    }
    if negative { return n }
    guard n != Int64.min else { throw violation("an integer out of 64-bit range") }
    return -n
  }

  private func double(_ a: Int, _ b: Int) throws -> Double {
    let s = text(a, b)
    switch s {
    case "inf", "+inf": return .infinity
    case "-inf": return -.infinity
    case "nan", "-nan": return .nan
    default: break
    }
    guard !s.isEmpty,
      s.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || $0 == 46 || $0 == 45 || $0 == 43 || $0 == 101 || $0 == 69 }),
      let d = Double(s), d.isFinite
    else {
      throw violation("a double (,) that is not a number")
    }
    return d
  }
}

// MARK: Encoding

/// Encodes commands as a server expects them: an array of bulk strings.
public enum RESPEncoder {
  /// Appends the command `args` (each a bulk string) to `out`.
  public static func appendCommand(_ args: [[UInt8]], to out: inout [UInt8]) {
    out.append(UInt8(ascii: "*"))
    appendDecimal(args.count, to: &out)
    for a in args {
      out.append(UInt8(ascii: "$"))
      appendDecimal(a.count, to: &out)
      out.append(contentsOf: a)
      out.append(13)
      out.append(10)
    }
  }

  /// The bytes of the command `args`.
  public static func command(_ args: [[UInt8]]) -> [UInt8] {
    var out: [UInt8] = []
    appendCommand(args, to: &out)
    return out
  }

  /// The bytes of the command `args` given as strings.
  public static func command(_ args: String...) -> [UInt8] { command(args.map { Array($0.utf8) }) }

  static func appendDecimal<T: BinaryInteger>(_ n: T, to out: inout [UInt8]) {
    out.append(contentsOf: Array(String(n).utf8))
    out.append(13)
    out.append(10)
  }
}

extension RESPValue {
  /// The value in RESP3 as a server sends it (RESP2 for `.null` with `resp2`: `$-1`).
  /// For tests and fake servers.
  public func encoded(resp2: Bool = false) -> [UInt8] {
    var out: [UInt8] = []
    encode(into: &out, resp2: resp2)
    return out
  }

  /// Appends the value as a server sends it to `out` (see `encoded(resp2:)`).
  public func encode(into out: inout [UInt8], resp2: Bool = false) {
    func line(_ type: Character, _ s: String) {
      out.append(contentsOf: Array(String(type).utf8))
      out.append(contentsOf: Array(s.utf8))
      out.append(13)
      out.append(10)
    }
    func blob(_ type: Character, _ b: [UInt8]) {
      line(type, String(b.count))
      out.append(contentsOf: b)
      out.append(13)
      out.append(10)
    }
    func aggregate(_ type: Character, _ items: [RESPValue]) {
      line(type, String(items.count))
      for v in items { v.encode(into: &out, resp2: resp2) }
    }
    func pairs(_ type: Character, _ ps: [RESPPair]) {
      line(type, String(ps.count))
      for p in ps {
        p.key.encode(into: &out, resp2: resp2)
        p.value.encode(into: &out, resp2: resp2)
      }
    }
    switch self {
    case .simpleString(let s): line("+", s)
    case .error(let s): line("-", s)
    case .integer(let n): line(":", String(n))
    case .bulkString(let b): blob("$", b)
    case .null: if resp2 { line("$", "-1") } else { line("_", "") }
    case .boolean(let b): line("#", b ? "t" : "f")
    case .double(let d):
      line(",", d.isNaN ? "nan" : d == .infinity ? "inf" : d == -.infinity ? "-inf" : "\(d)")
    case .bigNumber(let s): line("(", s)
    case .blobError(let b): blob("!", b)
    case .verbatim(let f, let t): blob("=", Array((f + ":").utf8) + t)
    case .array(let a): aggregate("*", a)
    case .map(let ps): pairs("%", ps)
    case .set(let a): aggregate("~", a)
    case .push(let a): aggregate(">", a)
    case .attributed(let ps, let v):
      pairs("|", ps)
      v.encode(into: &out, resp2: resp2)
    }
  }
}
