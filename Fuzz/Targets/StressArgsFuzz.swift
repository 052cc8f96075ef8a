// libFuzzer target (c, second half): the option parser of `cache-stress`, compiled
// together with the tool's own sources (all but main.swift, which runs the tool and
// exits). Built by scripts/fuzz-guided.sh; see docs/fuzzing.md.
//
// The input is an argument vector, arguments separated by NUL bytes. Oracle:
// `OptionTable.parse` returns or throws a `UsageError`, never traps; options it accepts
// pass its own cross-checks (re-validated here); the help text renders; the cache
// options derived from them are accepted or refused by the library with an error; and
// the coordinator's trip to a worker is lossless: parsing
// `OptionTable.workerArguments(options)` gives the same options back (so a worker
// runs exactly the workload its coordinator was given).
import Foundation

@testable import MappedCache

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
  let raw = UnsafeRawBufferPointer(start: start, count: count)
  let args = raw.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
  let o: StressOptions
  do {
    o = try OptionTable.parse(args)
  } catch {
    _ = error.description
    return 0
  }
  if o.help { _ = OptionTable.helpText }
  do { try OptionTable.validate(o) } catch { fatalError("parse accepted options its own validation refuses: \(error)") }
  guard o.valueMin >= ValueFormat.minimumSize, o.valueMin <= o.valueMax, o.keys >= 1, o.procs >= 1, o.threads >= 1,
    o.capacity >= 1 << 20, o.duration > 0, o.trackEvery > 0, o.trackEvery & (o.trackEvery - 1) == 0
  else {
    fatalError("parse accepted inconsistent options: \(o)")
  }
  _ = try? Layout(options: o.cacheOptions)
  _ = RankScrambler(n: o.keys)
  if o.keys <= 4096 { _ = ZipfGenerator(n: o.keys, theta: o.zipfTheta).rank(0.5) }

  // The coordinator → worker trip.
  let passed = OptionTable.workerArguments(o, worker: 3, incarnation: 2, controlDir: "/tmp/control", coordinator: 99)
  let back: StressOptions
  do { back = try OptionTable.parse(passed) } catch {
    fatalError("a worker cannot parse its coordinator's arguments \(passed): \(error)")
  }
  guard back.workerID == 3, back.incarnation == 2, back.controlDir == "/tmp/control", back.coordinatorPID == 99 else {
    fatalError("worker identity lost in \(passed)")
  }
  var expected = o
  expected.workerID = 3
  expected.incarnation = 2
  expected.controlDir = "/tmp/control"
  expected.coordinatorPID = 99
  expected.json = back.json  // not passed on: workers report through control files
  expected.help = back.help
  expected.version = back.version  // nor are --version and --report: the coordinator answers them
  expected.reportPath = back.reportPath
  if "\(back)" != "\(expected)" {
    fatalError("options changed on the way to a worker:\n  given  \(expected)\n  worker \(back)\n  args   \(passed)")
  }
  return 0
}
