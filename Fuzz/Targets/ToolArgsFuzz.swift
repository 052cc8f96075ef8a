// libFuzzer target (c, first half): the command-line parser of `mapped-cache`, compiled
// together with the tool's own sources (all but main.swift, which runs the tool and
// exits). Built by scripts/fuzz-guided.sh; see docs/fuzzing.md.
//
// The input is an argument vector: arguments separated by NUL bytes (invalid UTF-8 is
// repaired as the shell's `String(cString:)` would). The first argument picks the
// command by name, or else by its first byte. Oracle: `Invocation.parse` and every typed
// accessor a command uses either return or throw a `CLIFailure`; the help and usage
// texts render; a parse that succeeds has every required argument and only known
// options; a size, duration or mode that parses is in range; and the tool's printing
// of bytes read from a cache file (keys and values: `Units.printable`, `JSON`) takes
// any bytes.
import CacheTools
import Foundation

@testable import MappedCache

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
  let raw = UnsafeRawBufferPointer(start: start, count: count)
  let parts = raw.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
  guard let first = parts.first else { return 0 }
  let commands = CommandTable.commands
  let command = CommandTable.command(named: first) ?? commands[Int(first.utf8.first ?? 0) % commands.count]
  let args = Array(parts.dropFirst())

  _ = Usage.line(for: command)
  do {
    guard let inv = try Invocation.parse(args, for: command) else {
      guard args.contains(where: { $0 == "-h" || $0 == "--help" }) else {
        fatalError("parse returned nil without -h/--help")
      }
      _ = Usage.help(for: command)
      return 0
    }
    // What a successful parse promises the commands (they force-unwrap PATH and KEY).
    for spec in command.arguments where !spec.optional {
      guard inv.argument(spec.name) != nil else { fatalError("parse accepted \(args) without \(spec.name)") }
    }
    for name in inv.values.keys where !command.options.contains(where: { $0.name == name && $0.value != nil }) {
      fatalError("parse accepted an unknown valued option \(name)")
    }
    for name in inv.flags where !command.options.contains(where: { $0.name == name && $0.value == nil }) {
      fatalError("parse accepted an unknown flag \(name)")
    }
    // Every typed accessor, on every valued option, as the commands call them.
    for spec in command.options where spec.value != nil {
      if let n = try? inv.integer(spec.name, in: 1...4096), !(1...4096).contains(n) {
        fatalError("integer out of range")
      }
      if let n = try? inv.integer(spec.name, in: 0...Int.max), n < 0 { fatalError("integer out of range") }
      if let s = try? inv.size(spec.name) {
        guard s >= 0 else { fatalError("negative size \(s)") }
        _ = Units.bytes(s)
        var o = CacheOptions(capacity: s)  // what `create` hands the library
        o.maxValueSize = s
        o.averageEntrySize = s
        _ = try? Layout(options: o)
      }
      for allowZero in [true, false] {
        if let d = try? inv.seconds(spec.name, allowZero: allowZero) {
          guard d.isFinite, allowZero ? d >= 0 : d > 0 else { fatalError("bad duration \(d)") }
          _ = Units.seconds(d)
          _ = CacheExpiry.seconds(d).milliseconds(now: 1_700_000_000_000)
        }
      }
      if let m = try? inv.mode(spec.name), m > 0o777 { fatalError("mode \(m) out of range") }
    }
  } catch {
    _ = "\(error)"
  }

  // Sizes and durations from any argument; then bytes as a cache file may hold them.
  for a in parts {
    // The parsers both tools share (CacheTools): a value they accept is in range.
    if let s = try? ByteSize.parse(a), s < 0 { fatalError("negative size from \(a)") }
    if let d = try? DurationText.parse(a), !(d.isFinite && d >= 0) { fatalError("bad duration from \(a)") }
  }
  let bytes = Array(raw)
  let shown = Units.printable(bytes)
  if shown.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) { fatalError("printable() let a control byte through") }
  var dict: [String: Any] = [:]
  JSON.bytesField("key", bytes, into: &dict)
  dict["count"] = bytes.count
  dict["nested"] = [parts, ["ratio": JSON.number(Double(bytes.count) / 7)]] as [Any]
  let json = JSON.string(dict)
  guard (try? JSONSerialization.jsonObject(with: Data(json.utf8))) != nil else {
    fatalError("the tool's JSON does not parse: \(json.prefix(200))")
  }
  _ = JSON.string(dict, pretty: false)
  return 0
}
