/// A `StressOptions` field an option row fills: `Parsed` is what the flag's value parses
/// to (the field's own type, or what an optional field wraps), `argument` what the
/// coordinator passes on to its workers (nil: leave the flag out).
protocol OptionValue: Sendable {
  associatedtype Parsed
  static func from(_ parsed: Parsed) -> Self
  var argument: String? { get }
}

extension OptionValue where Parsed == Self {
  static func from(_ parsed: Self) -> Self { parsed }
}

extension Int: OptionValue {
  typealias Parsed = Int
  var argument: String? { "\(self)" }
}

extension Double: OptionValue {
  typealias Parsed = Double
  var argument: String? { "\(self)" }
}

extension String: OptionValue {
  typealias Parsed = String
  var argument: String? { self }
}

/// A switch is passed on (as a bare flag) only when it is on.
extension Bool: OptionValue {
  typealias Parsed = Bool
  var argument: String? { self ? "" : nil }
}

/// An optional field stays nil, and its flag out of the workers' arguments, until given.
extension Optional: OptionValue where Wrapped: OptionValue, Wrapped.Parsed == Wrapped {
  static func from(_ parsed: Wrapped) -> Self { parsed }
  var argument: String? { self?.argument }
}

extension StressOptions.Distribution: OptionValue {
  typealias Parsed = Self
  var argument: String? { rawValue }
}

extension StressOptions.LockChoice: OptionValue {
  typealias Parsed = Self
  var argument: String? { rawValue }
}

/// The kinds of option row: each parses its value one way and checks it one way.
extension OptionSpec {
  typealias Field<T> = WritableKeyPath<StressOptions, T> & Sendable

  /// An integer in `range`.
  static func integer<T: OptionValue>(
    _ flag: String, _ valueName: String, defaultText: String, help: String, in range: ClosedRange<Int>,
    _ field: Field<T>, hidden: Bool = false, passedOn: Bool = true
  ) -> OptionSpec where T.Parsed == Int {
    value(flag, valueName, defaultText, help, field, hidden, passedOn) { v throws(UsageError) in
      try OptionTable.parseInt(v, flag: flag, in: range)
    }
  }

  /// A power of two from 1 to 2^20.
  static func powerOfTwo(
    _ flag: String, _ valueName: String, defaultText: String, help: String, _ field: Field<Int>
  ) -> OptionSpec {
    value(flag, valueName, defaultText, help, field, false, true) { v throws(UsageError) in
      try OptionTable.parsePowerOfTwo(v, flag: flag)
    }
  }

  /// A time in seconds (with a unit, or none for seconds) from `min` to `max`.
  static func duration<T: OptionValue>(
    _ flag: String, _ valueName: String, defaultText: String, help: String, min: Double, max: Double,
    _ field: Field<T>, passedOn: Bool = true
  ) -> OptionSpec where T.Parsed == Double {
    value(flag, valueName, defaultText, help, field, false, passedOn) { v throws(UsageError) in
      try OptionTable.parseDuration(v, flag: flag, min: min, max: max)
    }
  }

  /// A byte size (powers of 1024), in `range` where one is given; `rangeText` names its
  /// ends in the error.
  static func size<T: OptionValue>(
    _ flag: String, _ valueName: String, defaultText: String, help: String,
    in range: (bytes: ClosedRange<Int>, text: String)? = nil, _ field: Field<T>, hidden: Bool = false,
    passedOn: Bool = true
  ) -> OptionSpec where T.Parsed == Int {
    value(flag, valueName, defaultText, help, field, hidden, passedOn) { v throws(UsageError) in
      let n = try OptionTable.parseSize(v, flag: flag)
      if let range, !range.bytes.contains(n) {
        throw UsageError("\(flag) must be between \(range.text), not \(v)")
      }
      return n
    }
  }

  /// A file name, not empty.
  static func fileName(
    _ flag: String, _ valueName: String, defaultText: String, help: String, _ field: Field<String?>,
    passedOn: Bool = true
  ) -> OptionSpec {
    value(flag, valueName, defaultText, help, field, false, passedOn) { v throws(UsageError) in
      guard !v.isEmpty else { throw UsageError("\(flag) needs a file name") }
      return v
    }
  }

  /// One of an enumeration's cases, by name.
  static func choice<T: OptionValue & CaseIterable & RawRepresentable>(
    _ flag: String, _ valueName: String, defaultText: String, help: String, _ field: Field<T>
  ) -> OptionSpec where T.Parsed == T, T.RawValue == String {
    value(flag, valueName, defaultText, help, field, false, true) { v throws(UsageError) in
      guard let c = T(rawValue: v) else {
        throw UsageError("\(flag) must be \(T.allCases.map(\.rawValue).joined(separator: " or ")), not \(v)")
      }
      return c
    }
  }

  /// A switch, which takes no value: given, it turns `field` on.
  static func toggle(
    _ flag: String, defaultText: String = "off", help: String, _ field: Field<Bool>, hidden: Bool = false,
    passedOn: Bool = true
  ) -> OptionSpec {
    OptionSpec(
      flag: flag, valueName: nil, defaultText: defaultText, help: help, hidden: hidden,
      apply: { o, _ in o[keyPath: field] = true },
      passOn: { o in passedOn ? o[keyPath: field].argument : nil })
  }

  private static func value<T: OptionValue>(
    _ flag: String, _ valueName: String, _ defaultText: String, _ help: String, _ field: Field<T>,
    _ hidden: Bool, _ passedOn: Bool, parse: @escaping @Sendable (String) throws(UsageError) -> T.Parsed
  ) -> OptionSpec {
    OptionSpec(
      flag: flag, valueName: valueName, defaultText: defaultText, help: help, hidden: hidden,
      apply: { o, v throws(UsageError) in o[keyPath: field] = .from(try parse(v)) },
      passOn: { o in passedOn ? o[keyPath: field].argument : nil })
  }
}
