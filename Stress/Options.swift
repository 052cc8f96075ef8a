import CacheTools
import Foundation
import MappedCache

/// Everything `cache-stress` can be told. One table (`OptionTable.all`) drives parsing,
/// `--help`, and the arguments the coordinator passes on to the workers it starts.
struct StressOptions: Sendable {
  enum Distribution: String, CaseIterable, Sendable { case uniform, zipf }
  enum LockChoice: String, CaseIterable, Sendable { case word, flock }

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
  /// `--trace`: replay this file read-through in one process instead (`TraceReplay`).
  var tracePath: String? = nil
  /// The cache's count limit (`SharedCache.countLimit`), set after opening.
  var countLimit: Int? = nil
  /// With `--trace`: size a fresh file to hold about this many entries by bytes alone.
  var capacityEntries: Int? = nil
  /// `--grow-every`: seconds between growths of the cache during the run (each doubles
  /// it, up to `growTo`).
  var growEvery: Double? = nil
  /// `--grow-to`: the capacity growth stops at.
  var growTo: Int? = nil
  /// `--kill-growers`: each growth runs in a process of its own, which chaos SIGKILLs
  /// in the midst of every other growth.
  var killGrowers = false
  /// Internal: this process is such a grower, growing the file at `path` to this many
  /// bytes (`GrowerProcess`).
  var growerTarget: Int? = nil
  /// `--max-capacity`: the most a new file may grow to.
  var maxCapacity: Int? = nil
  /// `--growth-policy`: a new file's growth policy.
  var growthPolicy: GrowthPolicy? = nil
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
  /// Sets per call: up to this many consecutive sets of a thread's stream go to one
  /// batch write (`setBytes(_:forKeys:expires:)`); 1 = one `setBytes` per set.
  var mset = 1
  var help = false
  var version = false

  // The Redis mode (RedisMode.swift): hosts of near caches in front of one Redis.
  /// The Redis every host's near cache is in front of (`--redis URL`).
  var redisURL: String? = nil
  /// Start a private redis-server on a free loopback port for the run.
  var redisSpawn = false
  /// Start a private Redis Cluster of three primaries on free loopback ports for the run.
  var redisSpawnCluster = false
  /// Cluster only: seconds between slot moves (the slot of a random key of the run goes
  /// to the next primary); nil: none.
  var reshardEvery: Double? = nil
  /// Redis mode with a spawned cluster (then of 3 primaries with a replica each): this
  /// often, the primary of a random key's slot is SIGKILLed and its replica promoted.
  var failoverEvery: Double? = nil
  var hosts = 4
  /// Each host's file size.
  var hostCapacity = 16 << 20
  /// The near caches' `maxStaleness`, seconds.
  var maxStaleness = 0.5
  /// Fault schedules, seconds between faults (nil: none).
  var killHolderEvery: Double? = nil
  var blackholeEvery: Double? = nil
  /// How long each black hole lasts, seconds.
  var blackholeFor = 0.4
  var killRedisEvery: Double? = nil
  /// Redis mode: a pause after each operation, seconds (0: none).
  var thinkTime = 0.0

  // Hidden: test-only and coordinator → worker.
  /// One worker writes a value whose last byte is wrong (through the normal API),
  /// so a run can prove that the checker detects bad values.
  var plantCorruption = false
  /// Redis mode: host 0's processes serve stale entries (`serveStale`) and its holder is
  /// stopped (SIGSTOP) from a third of the run on, so a run can prove that the staleness
  /// check finds values served past the bound.
  var plantStale = false
  /// `CacheOptions.averageEntrySize` for a new file (nil: key size + average value size).
  var averageEntrySize: Int? = nil
  /// `CacheOptions.partitionCount` for a new file (nil: the library's choice).
  var partitionCount: Int? = nil
  var workerID: Int? = nil
  var incarnation = 0
  var controlDir: String? = nil
  var coordinatorPID: Int32 = 0

  var prefill: Bool { !noPrefill && !readThrough }
  var redisMode: Bool { redisURL != nil || redisSpawn || redisSpawnCluster }
  /// Whether the run's Redis is a cluster (spawned, or named by a redis-cluster:// URL).
  var redisCluster: Bool { redisSpawnCluster || redisURL?.hasPrefix("redis-cluster://") == true }
  var lockMode: LockMode { lock == .flock ? .flock : .sharedWord }
  var writers: Int { procs * threads }
  var valueSizeText: String { valueMin == valueMax ? "\(valueMin)" : "\(valueMin)-\(valueMax)" }
  var averageValueSize: Int { (valueMin + valueMax) / 2 }

  /// Cache creation options sized to this workload (the index is sized from the
  /// average entry, so small entries do not run out of slots before the logs fill).
  /// Without a trace, the largest value is the run's own (`--value-size`'s largest): the
  /// automatic partition count keeps twelve of the largest records in a partition, so
  /// the library's default of 1 MiB would make a 256 MiB file 16 partitions, where 64
  /// suit two cores better (sets on two processes scale further with more partitions:
  /// `scripts/set-scaling.sh`). A trace's values keep the default.
  var cacheOptions: CacheOptions {
    var o = CacheOptions(capacity: capacity)
    if tracePath == nil { o.maxValueSize = valueMax }
    o.averageEntrySize = averageEntrySize ?? min(max(16, keySize + averageValueSize), 1 << 24)
    o.partitionCount = partitionCount
    o.maxCapacity = maxCapacity
    o.growthPolicy = growthPolicy
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
    .fileName(
      "--path", "P", defaultText: "a fresh file under /dev/shm, removed at the end",
      help: "cache file to use, created if absent (an existing one keeps its capacity and is kept)", \.path),
    .size(
      "--capacity", "SIZE", defaultText: "256MiB",
      help: "cache file size, 1MiB to 64TiB, e.g. 64M, 1GiB, 1600KiB (powers of 1024; KB, MB, GB are refused)",
      in: ((1 << 20)...(1 << 46), "1MiB and 64TiB"), \.capacity),
    .integer(
      "--partitions", "N", defaultText: "the library's choice",
      help: "partitions of a new file, 1 to 1048576 (each has its own write lock: more let more writers run at once)",
      in: 1...(1 << 20), \.partitionCount),
    .integer(
      "--procs", "N", defaultText: "the number of cores", help: "worker processes, 1 to 128", in: 1...128, \.procs),
    .integer(
      "--threads", "T", defaultText: "1", help: "threads per worker process, 1 to 256", in: 1...256, \.threads),
    .duration(
      "--duration", "TIME", defaultText: "10s",
      help: "length of the measured run, 100ms to 1d (no unit: seconds; ms, s, m, h, d)", min: 0.1, max: 86_400,
      \.duration),
    .integer(
      "--keys", "K", defaultText: "100000", help: "distinct keys, 1 to 100000000", in: 1...100_000_000, \.keys),
    .integer(
      "--key-size", "B", defaultText: "12", help: "bytes per key, from the digits of the largest key index to 250",
      in: 1...4096, \.keySize),
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
    .integer(
      "--read-pct", "R", defaultText: "90", help: "percent of operations that are gets, 0 to 100", in: 0...100,
      \.readPct),
    .choice(
      "--dist", "uniform|zipf", defaultText: "zipf",
      help: "key distribution: uniform, or zipf (a few hot keys, as in YCSB)", \.dist),
    OptionSpec(
      flag: "--zipf-theta", valueName: "X", defaultText: "0.99",
      help: "Zipf skew, 0.01 to 0.999 (higher: hotter hot keys)",
      apply: { o, v throws(UsageError) in
        o.zipfTheta = try parseDouble(v, flag: "--zipf-theta", min: 0.01, max: 0.999)
      }, passOn: { "\($0.zipfTheta)" }),
    .duration(
      "--ttl", "TIME", defaultText: "none: entries never expire",
      help: "expiry of every set and of the prefill, 1ms to 10^9 s (no unit: seconds; ms, s, m, h, d)", min: 0.001,
      max: 1e9, \.ttl),
    .toggle(
      "--read-through", help: "on a miss, set the key (measures hit ratio; implies --no-prefill)", \.readThrough),
    .toggle(
      "--no-prefill", defaultText: "prefill on", help: "skip setting every key before the timed run", \.noPrefill),
    .fileName(
      "--trace", "FILE", defaultText: "none",
      help:
        "replay FILE instead: one request per line, KEY or KEY,SIZE (value bytes; without it, --value-size's MIN), each a read, a miss storing the key (read-through); one process, no expiry; reports requests, hits and the hit ratio (with --path, entries already in the file count as hits). --procs, --threads, --duration, --keys and the key and read options do not apply",
      \.tracePath),
    .integer(
      "--count-limit", "N", defaultText: "none",
      help: "most entries the cache keeps (SharedCache.countLimit, stored in the file), 1 to 10^12",
      in: 1...1_000_000_000_000, \.countLimit),
    .integer(
      "--capacity-entries", "N", defaultText: "none",
      help:
        "with --trace: size a fresh file (instead of --capacity) so that about N entries of the trace's mean size fill it by bytes, with no count limit (found by filling trial files), 1 to 100000000",
      in: 1...100_000_000, \.capacityEntries),
    .duration(
      "--grow-every", "TIME", defaultText: "never",
      help: "grow the cache (SharedCache.grow) every TIME while the workers run, doubling it each time up to --grow-to",
      min: 0.05, max: 86_400, \.growEvery, passedOn: false),
    .size(
      "--grow-to", "SIZE", defaultText: "none",
      help: "with --grow-every: the capacity to stop growing at (at most the file's most capacity)", \.growTo,
      passedOn: false),
    .toggle(
      "--kill-growers",
      help:
        "with --grow-every: grow in a process of its own each time, and SIGKILL every other one at a random moment of its work (the next growth, or the next writer of a partition, finishes the step it left)",
      \.killGrowers, passedOn: false),
    .size(
      "--grower-target", "BYTES", defaultText: "", help: "internal", \.growerTarget, hidden: true, passedOn: false),
    .size(
      "--max-capacity", "SIZE", defaultText: "64 × --capacity, at most 1TiB",
      help: "the most a new file may grow to (address space every process reserves)", \.maxCapacity),
    OptionSpec(
      flag: "--growth-policy", valueName: "RATE[:FACTOR[:SECONDS[:INSERTS]]]", defaultText: "none",
      help:
        "a new file grows by FACTOR (2) when ghost hits reach RATE of new keys, at most every SECONDS (60), after INSERTS (10000) new keys",
      apply: { o, v throws(UsageError) in
        guard let p = GrowthPolicySpec.parse(v) else {
          throw UsageError("--growth-policy wants \(GrowthPolicySpec.syntax), not \(v)")
        }
        o.growthPolicy = p
      },
      passOn: { o in o.growthPolicy.map(GrowthPolicySpec.text) }),
    .integer(
      "--chaos-kills", "N", defaultText: "0",
      help: "SIGKILL N random workers during the run (0 to 10000) and restart them", in: 0...10_000, \.chaosKills),
    OptionSpec(
      flag: "--seed", valueName: "N", defaultText: "random, printed in the report",
      help: "for repeatable key sequences, 0 to 18446744073709551615",
      apply: { o, v throws(UsageError) in
        guard let s = UInt64(v) else {
          throw UsageError("--seed wants an integer from 0 to \(UInt64.max), not \(v.isEmpty ? "nothing" : v)")
        }
        o.seed = s
      }, passOn: { $0.seed.map { "\($0)" } }),
    .choice(
      "--lock", "word|flock", defaultText: "word",
      help: "write lock across processes: shared lock word + futex, or flock", \.lock),
    .powerOfTwo(
      "--track-every", "N", defaultText: "1",
      help:
        "track freshness (wrong_values) for 1 key in N (a power of two, 1 to 1048576), so that the readers' table of sequence numbers stays in the CPU cache; every read is still checked",
      \.trackEvery),
    .powerOfTwo(
      "--check-every", "N", defaultText: "1",
      help:
        "check the whole value (every byte regenerated from its header) on 1 read in N (a power of two, 1 to 1048576); every read checks the value's key, length and writer. 64 is the peers' policy (length and key digits on every read, the whole value on 1 in 64)",
      \.checkEvery),
    .integer(
      "--mget", "N", defaultText: "1",
      help:
        "gets per call, 1 to 64: up to N consecutive gets of a thread's stream go to one batch read (a set ends a batch), each value checked as a single get's is",
      in: 1...64, \.mget),
    .integer(
      "--mset", "N", defaultText: "1",
      help:
        "sets per call, 1 to 64: up to N consecutive sets of a thread's stream go to one batch write under one lock hold (a get ends a batch); every value written is checked by the readers as a single set's is",
      in: 1...64, \.mset),
    .toggle(
      "--json", help: "print one JSON object instead of the table", \.json, passedOn: false),
    .fileName(
      "--report", "FILE.html", defaultText: "none",
      help:
        "also write the run as one self-contained HTML page (charts in inline SVG, no scripts): parameters, throughput per second with the chaos kills, latency percentiles, hit ratio over time, per-process throughput, the verdict",
      \.reportPath, passedOn: false),
    OptionSpec(
      flag: "--redis", valueName: "URL", defaultText: "off",
      help:
        "Redis mode: --hosts hosts, each its own cache file and --procs processes, read and write through NearCache in front of this Redis (redis://host:port/db, unix:///path, or redis-cluster://h:p,h:p for a Redis Cluster); reports staleness beside throughput",
      apply: { o, v throws(UsageError) in
        guard v.hasPrefix("redis://") || v.hasPrefix("unix://") || v.hasPrefix("redis-cluster://") else {
          throw UsageError(
            "--redis wants a redis://, unix:// or redis-cluster:// URL, not \(v.isEmpty ? "nothing" : v)")
        }
        o.redisURL = v
      }, passOn: { $0.redisURL }),
    .toggle(
      "--redis-spawn",
      help: "Redis mode against a private redis-server (from PATH) started on a free loopback port for the run",
      \.redisSpawn),
    .toggle(
      "--redis-spawn-cluster",
      help:
        "Redis mode against a private Redis Cluster of three primaries (redis-server and redis-cli from PATH) on free loopback ports",
      \.redisSpawnCluster),
    .duration(
      "--reshard-every", "TIME", defaultText: "off",
      help:
        "Redis mode with a cluster: this often, 50ms to 1h, move the slot of a random key of the run (its keys migrated) to the next primary",
      min: 0.05, max: 3600, \.reshardEvery),
    .duration(
      "--failover-every", "TIME", defaultText: "off",
      help:
        "Redis mode with --redis-spawn-cluster (then 3 primaries with a replica each): this often, 1s to 1h, SIGKILL the primary of a random key's slot, promote its replica and restart the killed node as the new primary's replica",
      min: 1, max: 3600, \.failoverEvery),
    .integer(
      "--hosts", "H", defaultText: "4",
      help: "Redis mode: hosts (cache files, each with its own invalidation holder), 1 to 16", in: 1...16, \.hosts),
    .size(
      "--host-capacity", "SIZE", defaultText: "16MiB",
      help: "Redis mode: each host's cache file size (--capacity is not used), 1MiB to 1GiB",
      in: ((1 << 20)...(1 << 30), "1MiB and 1GiB"), \.hostCapacity),
    .duration(
      "--max-staleness", "TIME", defaultText: "500ms",
      help:
        "Redis mode: the near caches' maxStaleness, 50ms to 60s; a read served later than this + 50 ms after its overwrite is a violation",
      min: 0.05, max: 60, \.maxStaleness),
    .duration(
      "--kill-holder-every", "TIME", defaultText: "off",
      help:
        "Redis mode: SIGKILL one host's invalidation holder (a worker process; hosts in turn) this often, 50ms to 1h, and restart it",
      min: 0.05, max: 3600, \.killHolderEvery),
    .duration(
      "--blackhole-every", "TIME", defaultText: "off",
      help:
        "Redis mode: this often, 50ms to 1h, one host's connections to Redis (through a fault proxy per host) are black-holed for --blackhole-for (hosts in turn)",
      min: 0.05, max: 3600, \.blackholeEvery),
    .duration(
      "--blackhole-for", "TIME", defaultText: "400ms", help: "Redis mode: length of each black hole, 10ms to 1h",
      min: 0.01, max: 3600, \.blackholeFor),
    .duration(
      "--kill-redis-every", "TIME", defaultText: "off",
      help:
        "Redis mode with --redis-spawn: SIGKILL the redis-server this often, 100ms to 1h, and restart it empty on the same port",
      min: 0.1, max: 3600, \.killRedisEvery),
    OptionSpec(
      flag: "--think-time", valueName: "TIME", defaultText: "0: none",
      help:
        "Redis mode: sleep this long after each operation, 0 or 0.1ms to 1s (e.g. 0.2ms): a paced service, which leaves the invalidation holders CPU on a machine with fewer cores than busy processes",
      apply: { o, v throws(UsageError) in
        // From 0.1 ms: a smaller number would pass on to the workers in exponent form.
        let t = try parseDuration(v, flag: "--think-time", min: 0, max: 1)
        guard t == 0 || t >= 0.000_1 else {
          throw UsageError("--think-time must be 0 or between 0.1ms and 1s, not \(v)")
        }
        o.thinkTime = t
      }, passOn: { $0.thinkTime > 0 ? "\($0.thinkTime)" : nil }),
    .toggle(
      "--help", defaultText: "", help: "print this help (also -h)", \.help, passedOn: false),
    .toggle(
      "--version", defaultText: "", help: "print the version and the file format version", \.version, passedOn: false),

    // Hidden.
    .toggle(
      "--plant-corruption", defaultText: "", help: "test only: write one bad value", \.plantCorruption, hidden: true),
    .toggle(
      "--plant-stale", defaultText: "",
      help: "test only (Redis mode): host 0 serves stale entries while its holder is stopped", \.plantStale,
      hidden: true),
    .integer(
      "--average-entry-size", "B", defaultText: "key size + average value size",
      help: "sizes the index of a new file (CacheOptions.averageEntrySize)", in: 16...(1 << 24), \.averageEntrySize,
      hidden: true),
    .integer(
      "--worker-id", "N", defaultText: "", help: "internal", in: 0...10_000, \.workerID, hidden: true, passedOn: false),
    .integer(
      "--incarnation", "N", defaultText: "", help: "internal", in: 0...1_000_000, \.incarnation, hidden: true,
      passedOn: false),
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
      its last result flush (every \(WorkerTiming.flushInterval) s, and at once after a failed
      check); its next incarnation goes on.
      After the run the file is verified (as `mapped-cache verify` does).

      Exit status: 0 when no read was corrupt or went back in time, no operation failed and the
      file verified; 1 otherwise (the report says which); 64 for bad flags.

      Redis mode (--redis URL or --redis-spawn): --hosts hosts, each a cache file of its own
      whose --procs processes read and write through NearCache (so each host elects one
      invalidation holder), in front of one Redis. Every key has one writer (keys are dealt
      to the writers of all hosts), whose writes carry a version one higher than the last
      and are spread evenly over its keys; reads follow --dist. Each acknowledged write is
      logged (version, CLOCK_MONOTONIC time after Redis's reply) in a cache file shared by
      every process. Every read is checked as above, and a read that returns a version
      older than the key's latest logged one is stale by the time from the acknowledgement
      of the write that replaced it to the read's start. A write's staleness is the latest
      such lateness against it (how long after its acknowledgement some host still returned
      the value it replaced); the report gives p50, p99 and max over the writes read stale,
      and over the stale reads. A read stale by more than --max-staleness + 50 ms is a
      violation. Exit status 1 also on any violation, or an error while no fault was made.

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

  /// The Redis mode's options against the rest.
  static func validateRedis(_ o: StressOptions) throws(UsageError) {
    if [o.redisURL != nil, o.redisSpawn, o.redisSpawnCluster].filter({ $0 }).count > 1 {
      throw UsageError("--redis, --redis-spawn and --redis-spawn-cluster exclude each other")
    }
    guard o.redisMode else {
      for (flag, set) in [
        ("--kill-holder-every", o.killHolderEvery != nil), ("--blackhole-every", o.blackholeEvery != nil),
        ("--kill-redis-every", o.killRedisEvery != nil), ("--plant-stale", o.plantStale),
        ("--reshard-every", o.reshardEvery != nil), ("--failover-every", o.failoverEvery != nil),
      ] where set {
        throw UsageError("\(flag) needs --redis URL or --redis-spawn")
      }
      return
    }
    if o.plantStale && o.procs < 2 {
      throw UsageError("--plant-stale needs --procs 2 or more (one host process is stopped)")
    }
    if o.killRedisEvery != nil && !o.redisSpawn {
      throw UsageError("--kill-redis-every needs --redis-spawn (only a server of the run's own is killed)")
    }
    if o.failoverEvery != nil && !o.redisSpawnCluster {
      throw UsageError("--failover-every needs --redis-spawn-cluster (only nodes of the run's own are killed)")
    }
    if o.reshardEvery != nil && !o.redisCluster {
      throw UsageError("--reshard-every needs a cluster: --redis-spawn-cluster or --redis redis-cluster://…")
    }
    if o.redisCluster && (o.blackholeEvery != nil || o.killRedisEvery != nil) {
      throw UsageError(
        "--blackhole-every and --kill-redis-every work with one server (--redis-spawn), not with a cluster")
    }
    if o.blackholeEvery != nil, o.redisURL?.hasPrefix("unix://") == true {
      throw UsageError("--blackhole-every needs a TCP Redis (the fault proxy is TCP), not \(o.redisURL!)")
    }
    for (flag, set) in [
      ("--path", o.path != nil), ("--chaos-kills", o.chaosKills > 0), ("--report", o.reportPath != nil),
      ("--read-through", o.readThrough), ("--plant-corruption", o.plantCorruption),
      ("--trace", o.tracePath != nil), ("--mget", o.mget > 1), ("--mset", o.mset > 1),
    ] where set {
      throw UsageError("\(flag) is not used in the Redis mode (each host gets a file of its own)")
    }
    if o.hosts * o.procs > 1024 {
      throw UsageError("--hosts \(o.hosts) × --procs \(o.procs) is more than 1024 processes")
    }
    if o.valueMin < ValueFormat.trackedMinimumSize {
      throw UsageError(
        "--value-size must be at least \(ValueFormat.trackedMinimumSize) bytes in the Redis mode (room for the version), not \(o.valueMin)"
      )
    }
    // The write log keeps a 512-byte ring per key in /dev/shm (about 1.5 KiB per key in all).
    if o.keys > 100_000 { throw UsageError("--keys must be at most 100000 in the Redis mode, not \(o.keys)") }
    if o.valueMax > o.hostCapacity / 16 - o.keySize - 64 {
      throw UsageError("--value-size \(o.valueSizeText) is too large for --host-capacity \(o.hostCapacity)")
    }
  }

  /// Checks the options against each other.
  static func validate(_ o: StressOptions) throws(UsageError) {
    try validateRedis(o)
    if o.capacityEntries != nil && o.tracePath == nil { throw UsageError("--capacity-entries needs --trace") }
    if (o.growEvery == nil) != (o.growTo == nil) { throw UsageError("--grow-every and --grow-to go together") }
    if let to = o.growTo, to <= o.capacity {
      throw UsageError("--grow-to \(to) must be larger than --capacity \(o.capacity)")
    }
    if o.growEvery != nil && o.tracePath != nil { throw UsageError("--grow-every is not used with --trace") }
    if o.killGrowers && o.growEvery == nil { throw UsageError("--kill-growers needs --grow-every and --grow-to") }
    if o.tracePath != nil && o.mget > 1 {
      throw UsageError("--mget is not used with --trace (a replay reads key by key)")
    }
    if o.tracePath != nil && o.mset > 1 {
      throw UsageError("--mset is not used with --trace (a replay fills key by key)")
    }
    if o.capacityEntries != nil && o.path != nil {
      throw UsageError("--capacity-entries sizes a fresh file: it cannot be used with --path")
    }
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
