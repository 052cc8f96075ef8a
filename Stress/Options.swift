import CacheTools
import Foundation
import MappedCache

/// Everything `cache-stress` can be told. One table (`OptionTable.all`) drives parsing,
/// `--help`, and the arguments the coordinator passes on to the workers it starts.
struct StressOptions: Sendable {
  enum Distribution: String { case uniform, zipf }
  enum LockChoice: String { case word, flock }

  var path: String? = nil
  var capacity = 256 << 20
  var procs = max(1, ProcessInfo.processInfo.activeProcessorCount)
  var threads = 1
  var duration = 10.0
  var keys = 100_000
  var keySize = 12
  var valueMin = 64
  var valueMax = 64
  var readPct = 90
  var dist = Distribution.zipf
  var zipfTheta = 0.99
  var ttl: Double? = nil
  var readThrough = false
  var noPrefill = false
  var chaosKills = 0
  var seed: UInt64? = nil
  var json = false
  /// Where `--report` writes its HTML page.
  var reportPath: String? = nil
  var lock = LockChoice.word
  /// Freshness (`wrong_values`) is tracked for keys whose index is a multiple of this
  /// (a power of two; 1 = every key). Wholeness (`corrupt_reads`) is checked on every read.
  var trackEvery = 1
  /// 1 read in `checkEvery` checks the whole value (tag and every byte regenerated from
  /// its header); every read checks its header.
  var checkEvery = 1
  /// Gets per call: up to this many consecutive gets of a thread's stream go to one
  /// batch read (`copyBytes(forKeys:into:lengths:)`); 1 = one `copyBytes` per get.
  var mget = 1
  var help = false
  var version = false

  // Hidden: test-only and coordinator → worker.
  /// One worker writes a value whose last byte is wrong (through the normal API),
  /// so a run can prove that the checker detects bad values.
  var plantCorruption = false
  /// `CacheOptions.averageEntrySize` for a new file (nil: key size + average value size).
  var averageEntrySize: Int? = nil
  var workerID: Int? = nil
  var incarnation = 0
  var controlDir: String? = nil
  var coordinatorPID: Int32 = 0

  var prefill: Bool { !noPrefill && !readThrough }
  var lockMode: LockMode { lock == .flock ? .flock : .sharedWord }
  var writers: Int { procs * threads }
  var valueSizeText: String { valueMin == valueMax ? "\(valueMin)" : "\(valueMin)-\(valueMax)" }
  var averageValueSize: Int { (valueMin + valueMax) / 2 }

  /// Cache creation options sized to this workload (the index is sized from the
  /// average entry, so small entries do not run out of slots before the logs fill).
  var cacheOptions: CacheOptions {
    var o = CacheOptions(capacity: capacity)
    o.averageEntrySize = averageEntrySize ?? min(max(16, keySize + averageValueSize), 1 << 24)
    return o
  }
}

/// A bad flag or value: printed as `error: ...` with the usage line, exit 64.
struct UsageError: Error, CustomStringConvertible {
  var description: String
  init(_ s: String) { description = s }
}

/// One row of the option table: flag, value name, default (for `--help`), help text, and
/// how it applies its value.
struct OptionSpec: Sendable {
  var flag: String
  /// nil for a switch that takes no value.
  var valueName: String?
  var defaultText: String
  var help: String
  var hidden = false
  var apply: @Sendable (inout StressOptions, String) throws(UsageError) -> Void
  /// The value to pass on to a worker (nil: omit the flag).
  var passOn: @Sendable (StressOptions) -> String?
}

enum OptionTable {
  static let all: [OptionSpec] = [
    OptionSpec(
      flag: "--path", valueName: "P", defaultText: "a fresh file under /dev/shm, removed at the end",
      help: "cache file to use, created if absent (an existing one keeps its capacity and is kept)",
      apply: { o, v throws(UsageError) in
        guard !v.isEmpty else { throw UsageError("--path needs a file name") }
        o.path = v
      }, passOn: { $0.path }),
    OptionSpec(
      flag: "--capacity", valueName: "SIZE", defaultText: "256MiB",
      help: "cache file size, 1MiB to 64TiB, e.g. 64M, 1GiB, 1600KiB (powers of 1024; KB, MB, GB are refused)",
      apply: { o, v throws(UsageError) in
        o.capacity = try parseSize(v, flag: "--capacity")
        guard o.capacity >= 1 << 20, o.capacity <= 1 << 46 else {
          throw UsageError("--capacity must be between 1MiB and 64TiB, not \(v)")
        }
      }, passOn: { "\($0.capacity)" }),
    OptionSpec(
      flag: "--procs", valueName: "N", defaultText: "the number of cores",
      help: "worker processes, 1 to 128",
      apply: { o, v throws(UsageError) in
        o.procs = try parseInt(v, flag: "--procs", in: 1...128)
      }, passOn: { "\($0.procs)" }),
    OptionSpec(
      flag: "--threads", valueName: "T", defaultText: "1",
      help: "threads per worker process, 1 to 256",
      apply: { o, v throws(UsageError) in
        o.threads = try parseInt(v, flag: "--threads", in: 1...256)
      }, passOn: { "\($0.threads)" }),
    OptionSpec(
      flag: "--duration", valueName: "TIME", defaultText: "10s",
      help: "length of the measured run, 100ms to 1d (no unit: seconds; ms, s, m, h, d)",
      apply: { o, v throws(UsageError) in
        o.duration = try parseDuration(v, flag: "--duration", min: 0.1, max: 86_400)
      }, passOn: { "\($0.duration)" }),
    OptionSpec(
      flag: "--keys", valueName: "K", defaultText: "100000",
      help: "distinct keys, 1 to 100000000",
      apply: { o, v throws(UsageError) in
        o.keys = try parseInt(v, flag: "--keys", in: 1...100_000_000)
      }, passOn: { "\($0.keys)" }),
    OptionSpec(
      flag: "--key-size", valueName: "B", defaultText: "12",
      help: "bytes per key, from the digits of the largest key index to 250",
      apply: { o, v throws(UsageError) in
        o.keySize = try parseInt(v, flag: "--key-size", in: 1...4096)
      }, passOn: { "\($0.keySize)" }),
    OptionSpec(
      flag: "--value-size", valueName: "B|MIN-MAX", defaultText: "64",
      help:
        "bytes per value, \(ValueFormat.minimumSize) to 1MiB (a unit is allowed: 4K); MIN-MAX: a random size per write. Values under \(ValueFormat.headerSize) bytes use a compact checked form; under \(ValueFormat.trackedMinimumSize) their freshness (wrong_values) is not tracked",
      apply: { o, v throws(UsageError) in
        let parts = v.split(separator: "-", omittingEmptySubsequences: false)
        func size(_ text: Substring) throws(UsageError) -> Int {
          let n = try parseSize(String(text), flag: "--value-size")
          guard (ValueFormat.minimumSize...(1 << 20)).contains(n) else {
            throw UsageError(
              "--value-size must be between \(ValueFormat.minimumSize) and 1048576 bytes (1MiB), not \(text)")
          }
          return n
        }
        if parts.count == 1 {
          o.valueMin = try size(parts[0])
          o.valueMax = o.valueMin
        } else if parts.count == 2 {
          o.valueMin = try size(parts[0])
          o.valueMax = try size(parts[1])
          guard o.valueMin <= o.valueMax else { throw UsageError("--value-size \(v): MIN exceeds MAX") }
        } else {
          throw UsageError("--value-size wants B or MIN-MAX, e.g. 64 or 8-200, not \(v)")
        }
      }, passOn: { $0.valueSizeText }),
    OptionSpec(
      flag: "--read-pct", valueName: "R", defaultText: "90",
      help: "percent of operations that are gets, 0 to 100",
      apply: { o, v throws(UsageError) in
        o.readPct = try parseInt(v, flag: "--read-pct", in: 0...100)
      }, passOn: { "\($0.readPct)" }),
    OptionSpec(
      flag: "--dist", valueName: "uniform|zipf", defaultText: "zipf",
      help: "key distribution: uniform, or zipf (a few hot keys, as in YCSB)",
      apply: { o, v throws(UsageError) in
        guard let d = StressOptions.Distribution(rawValue: v) else {
          throw UsageError("--dist must be uniform or zipf, not \(v)")
        }
        o.dist = d
      }, passOn: { $0.dist.rawValue }),
    OptionSpec(
      flag: "--zipf-theta", valueName: "X", defaultText: "0.99",
      help: "Zipf skew, 0.01 to 0.999 (higher: hotter hot keys)",
      apply: { o, v throws(UsageError) in
        o.zipfTheta = try parseDouble(v, flag: "--zipf-theta", min: 0.01, max: 0.999)
      }, passOn: { "\($0.zipfTheta)" }),
    OptionSpec(
      flag: "--ttl", valueName: "TIME", defaultText: "none: entries never expire",
      help: "expiry of every set and of the prefill, 1ms to 10^9 s (no unit: seconds; ms, s, m, h, d)",
      apply: { o, v throws(UsageError) in
        o.ttl = try parseDuration(v, flag: "--ttl", min: 0.001, max: 1e9)
      }, passOn: { $0.ttl.map { "\($0)" } }),
    OptionSpec(
      flag: "--read-through", valueName: nil, defaultText: "off",
      help: "on a miss, set the key (measures hit ratio; implies --no-prefill)",
      apply: { o, _ in o.readThrough = true }, passOn: { $0.readThrough ? "" : nil }),
    OptionSpec(
      flag: "--no-prefill", valueName: nil, defaultText: "prefill on",
      help: "skip setting every key before the timed run",
      apply: { o, _ in o.noPrefill = true }, passOn: { $0.noPrefill ? "" : nil }),
    OptionSpec(
      flag: "--chaos-kills", valueName: "N", defaultText: "0",
      help: "SIGKILL N random workers during the run (0 to 10000) and restart them",
      apply: { o, v throws(UsageError) in
        o.chaosKills = try parseInt(v, flag: "--chaos-kills", in: 0...10_000)
      }, passOn: { "\($0.chaosKills)" }),
    OptionSpec(
      flag: "--seed", valueName: "N", defaultText: "random, printed in the report",
      help: "for repeatable key sequences, 0 to 18446744073709551615",
      apply: { o, v throws(UsageError) in
        guard let s = UInt64(v) else {
          throw UsageError("--seed wants an integer from 0 to \(UInt64.max), not \(v.isEmpty ? "nothing" : v)")
        }
        o.seed = s
      }, passOn: { $0.seed.map { "\($0)" } }),
    OptionSpec(
      flag: "--lock", valueName: "word|flock", defaultText: "word",
      help: "write lock across processes: shared lock word + futex, or flock",
      apply: { o, v throws(UsageError) in
        guard let l = StressOptions.LockChoice(rawValue: v) else {
          throw UsageError("--lock must be word or flock, not \(v)")
        }
        o.lock = l
      }, passOn: { $0.lock.rawValue }),
    OptionSpec(
      flag: "--track-every", valueName: "N", defaultText: "1",
      help:
        "track freshness (wrong_values) for 1 key in N (a power of two, 1 to 1048576), so that the readers' table of sequence numbers stays in the CPU cache; every read is still checked",
      apply: { o, v throws(UsageError) in
        o.trackEvery = try parsePowerOfTwo(v, flag: "--track-every")
      }, passOn: { "\($0.trackEvery)" }),
    OptionSpec(
      flag: "--check-every", valueName: "N", defaultText: "1",
      help:
        "check the whole value (every byte regenerated from its header) on 1 read in N (a power of two, 1 to 1048576); every read checks the value's key, length and writer. 64 is the peers' policy (length and key digits on every read, the whole value on 1 in 64)",
      apply: { o, v throws(UsageError) in
        o.checkEvery = try parsePowerOfTwo(v, flag: "--check-every")
      }, passOn: { "\($0.checkEvery)" }),
    OptionSpec(
      flag: "--mget", valueName: "N", defaultText: "1",
      help:
        "gets per call, 1 to 64: up to N consecutive gets of a thread's stream go to one batch read (a set ends a batch), each value checked as a single get's is",
      apply: { o, v throws(UsageError) in
        o.mget = try parseInt(v, flag: "--mget", in: 1...64)
      }, passOn: { "\($0.mget)" }),
    OptionSpec(
      flag: "--json", valueName: nil, defaultText: "off",
      help: "print one JSON object instead of the table",
      apply: { o, _ in o.json = true }, passOn: { _ in nil }),
    OptionSpec(
      flag: "--report", valueName: "FILE.html", defaultText: "none",
      help:
        "also write the run as one self-contained HTML page (charts in inline SVG, no scripts): parameters, throughput per second with the chaos kills, latency percentiles, hit ratio over time, per-process throughput, the verdict",
      apply: { o, v throws(UsageError) in
        guard !v.isEmpty else { throw UsageError("--report needs a file name") }
        o.reportPath = v
      }, passOn: { _ in nil }),
    OptionSpec(
      flag: "--help", valueName: nil, defaultText: "",
      help: "print this help (also -h)", apply: { o, _ in o.help = true }, passOn: { _ in nil }),
    OptionSpec(
      flag: "--version", valueName: nil, defaultText: "",
      help: "print the version and the file format version", apply: { o, _ in o.version = true },
      passOn: { _ in nil }),

    // Hidden.
    OptionSpec(
      flag: "--plant-corruption", valueName: nil, defaultText: "", help: "test only: write one bad value",
      hidden: true, apply: { o, _ in o.plantCorruption = true }, passOn: { $0.plantCorruption ? "" : nil }),
    OptionSpec(
      flag: "--average-entry-size", valueName: "B", defaultText: "key size + average value size",
      help: "sizes the index of a new file (CacheOptions.averageEntrySize)", hidden: true,
      apply: { o, v throws(UsageError) in
        o.averageEntrySize = try parseInt(v, flag: "--average-entry-size", in: 16...(1 << 24))
      },
      passOn: { $0.averageEntrySize.map { "\($0)" } }),
    OptionSpec(
      flag: "--worker-id", valueName: "N", defaultText: "", help: "internal", hidden: true,
      apply: { o, v throws(UsageError) in o.workerID = try parseInt(v, flag: "--worker-id", in: 0...10_000) },
      passOn: { _ in nil }),
    OptionSpec(
      flag: "--incarnation", valueName: "N", defaultText: "", help: "internal", hidden: true,
      apply: { o, v throws(UsageError) in o.incarnation = try parseInt(v, flag: "--incarnation", in: 0...1_000_000) },
      passOn: { _ in nil }),
    OptionSpec(
      flag: "--control-dir", valueName: "D", defaultText: "", help: "internal", hidden: true,
      apply: { o, v in o.controlDir = v }, passOn: { _ in nil }),
    OptionSpec(
      flag: "--coordinator-pid", valueName: "PID", defaultText: "", help: "internal", hidden: true,
      apply: { o, v throws(UsageError) in
        o.coordinatorPID = Int32(try parseInt(v, flag: "--coordinator-pid", in: 1...Int(Int32.max)))
      },
      passOn: { _ in nil }),
  ]

  static var usageLine: String {
    let parts = all.filter { !$0.hidden && $0.flag != "--help" && $0.flag != "--version" }.map { spec in
      spec.valueName.map { "[\(spec.flag) \($0)]" } ?? "[\(spec.flag)]"
    }
    return "usage: cache-stress " + parts.joined(separator: " ")
  }

  static var helpText: String {
    var s = """
      cache-stress: many processes hammer one MappedCache file; every value read is checked.

      \(usageLine)

      OPTIONS:

      """
    let rows = all.filter { !$0.hidden }
    let left = rows.map { spec in spec.valueName.map { "\(spec.flag) \($0)" } ?? spec.flag }
    let width = (left.map(\.count).max() ?? 0) + 2
    for (spec, l) in zip(rows, left) {
      var text = spec.help
      // "(default:" stays with the first word of its value (a line never ends in it).
      if !spec.defaultText.isEmpty { text += " (default:\u{1}\(spec.defaultText))" }
      let lines = wrap(text, width: max(40, 100 - 2 - width)).map { $0.replacingOccurrences(of: "\u{1}", with: " ") }
      s += "  " + l.padding(toLength: width, withPad: " ", startingAt: 0) + lines[0] + "\n"
      for more in lines.dropFirst() { s += String(repeating: " ", count: 2 + width) + more + "\n" }
    }
    s += """

      Every value carries its key, its writer, the writer's sequence number, a tag, and bytes
      that its header regenerates (values under \(ValueFormat.headerSize) bytes: the same packed into a
      compact form; under \(ValueFormat.trackedMinimumSize), without the sequence number). Every read is
      checked: corrupt_reads counts values not whole or of another key, wrong_values counts
      values older than one the same reader saw from the same writer.
      Latencies: 1 operation in \(WorkerTiming.sampleEvery) is timed; histograms of all threads
      and processes are merged. With --chaos-kills, a killed worker's operations count up to
      its last result flush (every \(WorkerTiming.flushInterval) s); its next incarnation goes on.
      After the run the file is verified (as `mapped-cache verify` does).

      Exit status: 0 when no read was corrupt or went back in time, no operation failed and the
      file verified; 1 otherwise (the report says which); 64 for bad flags.

      """
    return s
  }

  /// `text` in lines of at most `width` characters, broken at spaces (a longer word gets
  /// a line of its own).
  static func wrap(_ text: String, width: Int) -> [String] {
    var lines: [String] = []
    var line = ""
    for word in text.split(separator: " ") {
      if !line.isEmpty && line.count + 1 + word.count > width {
        lines.append(line)
        line = ""
      }
      line += line.isEmpty ? String(word) : " " + word
    }
    return lines + [line]
  }

  /// Parses `args` (without the program name). `--flag value` and `--flag=value` both work.
  static func parse(_ args: [String]) throws(UsageError) -> StressOptions {
    var o = StressOptions()
    var i = 0
    while i < args.count {
      let arg = args[i]
      var name = arg
      var inline: String? = nil
      if let eq = arg.firstIndex(of: "="), arg.hasPrefix("--") {
        name = String(arg[..<eq])
        inline = String(arg[arg.index(after: eq)...])
      }
      if name == "-h" { name = "--help" }
      guard let spec = all.first(where: { $0.flag == name }) else {
        throw UsageError(arg.hasPrefix("-") ? "unknown option \(arg)" : "unexpected argument \(arg)")
      }
      if spec.valueName == nil {
        if inline != nil { throw UsageError("\(name) takes no value") }
        try spec.apply(&o, "")
      } else if let inline {
        try spec.apply(&o, inline)
      } else {
        guard i + 1 < args.count else { throw UsageError("\(name) needs a value (\(spec.valueName!))") }
        i += 1
        try spec.apply(&o, args[i])
      }
      i += 1
    }
    try validate(o)
    return o
  }

  /// Checks the options against each other.
  static func validate(_ o: StressOptions) throws(UsageError) {
    if o.valueMin < ValueFormat.minimumSize {
      throw UsageError("--value-size must be between \(ValueFormat.minimumSize) and 1048576 bytes, not \(o.valueMin)")
    }
    let digits = String(o.keys - 1).count
    if o.keySize < digits {
      throw UsageError(
        "--key-size must be between \(digits) (the digits of --keys \(o.keys)) and 250, not \(o.keySize)")
    }
    if o.keySize > 250 {
      throw UsageError("--key-size must be between \(digits) and 250 (the cache's key limit), not \(o.keySize)")
    }
    let largest = o.capacity / 16 - o.keySize - 64
    if o.valueMax > largest {
      throw UsageError(
        "--value-size \(o.valueSizeText) is too large for --capacity \(o.capacity): at most \(max(largest, 0)) bytes (a sixteenth of the capacity, less the key and 64 bytes)"
      )
    }
  }

  /// The arguments that make a worker run exactly these options.
  static func workerArguments(
    _ o: StressOptions, worker: Int, incarnation: Int, controlDir: String,
    coordinator: Int32
  ) -> [String] {
    var args: [String] = []
    for spec in all {
      guard let v = spec.passOn(o) else { continue }
      args.append(spec.flag)
      if spec.valueName != nil { args.append(v) }
    }
    args += [
      "--worker-id", "\(worker)", "--incarnation", "\(incarnation)",
      "--control-dir", controlDir, "--coordinator-pid", "\(coordinator)",
    ]
    return args
  }

  // MARK: Value parsers

  static func parseInt(_ s: String, flag: String, in range: ClosedRange<Int>) throws(UsageError) -> Int {
    guard let v = Int(s) else {
      throw UsageError(
        "\(flag) wants an integer from \(range.lowerBound) to \(range.upperBound), not \(s.isEmpty ? "nothing" : s)")
    }
    guard range.contains(v) else {
      throw UsageError("\(flag) must be between \(range.lowerBound) and \(range.upperBound), not \(v)")
    }
    return v
  }

  /// A power of two from 1 to 2^20 (the `--…-every N` sampling flags).
  static func parsePowerOfTwo(_ s: String, flag: String) throws(UsageError) -> Int {
    let n = try parseInt(s, flag: flag, in: 1...(1 << 20))
    guard n & (n - 1) == 0 else { throw UsageError("\(flag) must be a power of two from 1 to 1048576, not \(n)") }
    return n
  }

  static func parseDouble(_ s: String, flag: String, min: Double, max: Double) throws(UsageError) -> Double {
    guard let v = Double(s), v.isFinite else {
      throw UsageError("\(flag) wants a number from \(min) to \(max), not \(s.isEmpty ? "nothing" : s)")
    }
    guard v >= min, v <= max else { throw UsageError("\(flag) must be between \(min) and \(max), not \(s)") }
    return v
  }

  /// A size (`ByteSize`, the same parser as `mapped-cache`'s: powers of 1024, KB/MB/GB refused).
  static func parseSize(_ s: String, flag: String) throws(UsageError) -> Int {
    do {
      return try ByteSize.parse(s)
    } catch {
      throw UsageError("\(flag): \(error)")
    }
  }

  /// A duration in seconds (`DurationText`, as `mapped-cache` reads them: 30, 1.5s, 250ms,
  /// 10m, 2h), within `min...max` seconds.
  static func parseDuration(_ s: String, flag: String, min: Double, max: Double) throws(UsageError) -> Double {
    let v: Double
    do {
      v = try DurationText.parse(s)
    } catch {
      throw UsageError("\(flag): \(error)")
    }
    guard v >= min, v <= max else {
      throw UsageError("\(flag) must be between \(seconds(min)) and \(seconds(max)), not \(s)")
    }
    return v
  }

  /// 0.001 → "1ms", 86400 → "86400s": a bound as `parseDuration` reads it back.
  private static func seconds(_ v: Double) -> String {
    v < 1 ? "\(Int((v * 1000).rounded()))ms" : v == v.rounded() ? "\(Int(v))s" : "\(v)s"
  }
}
