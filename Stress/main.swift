import CacheTools
import Foundation
import SystemCalls

// cache-stress: many processes share one MappedCache file; every value read is checked.
// Without --worker-id this process is the coordinator; it re-executes this same binary
// (never fork without exec) with --worker-id N for each worker. Files by concern:
//   Options.swift (flag table, parsing, usage), Coordinator.swift (the cache, chaos,
//   progress, merge, verify), Growth.swift (--grow-every's growths, and with
//   --kill-growers their processes), WorkerFleet.swift (the workers' processes, both sides),
//   Worker.swift (the timed loop), ValueFormat.swift (what a value holds, how a read is
//   judged), KeyDistribution.swift (Zipf, RNG, op streams),
//   Histogram.swift (latencies), Timeline.swift (operations per second), ControlFiles.swift
//   (how processes talk), Report.swift (table and JSON), HTMLReport.swift (--report's page),
//   TraceReplay.swift (--trace: a recorded key sequence, read-through, one process).
//   The Redis mode (--redis): RedisMode.swift (its coordinator: hosts, Redis, the run),
//   RedisFaultSchedule.swift (its faults), RedisWorker.swift (a host's process),
//   RedisReport.swift (its report); its redis-server or cluster comes from RedisServers.

func fail(usage message: String) -> Never {
  FileHandle.standardError.write(Data("error: \(message)\n\(OptionTable.usageLine)\n".utf8))
  SystemCall.exit(64)
}

let options: StressOptions
do {
  options = try OptionTable.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
  fail(usage: error.description)
}

if options.version {
  print(ToolVersion.line(tool: "cache-stress"))
  SystemCall.exit(0)
}
if options.help {
  print(OptionTable.helpText, terminator: "")
  SystemCall.exit(0)
}
if options.tracePath != nil && options.workerID == nil {
  SystemCall.exit(TraceReplay.run(options))
}
if let target = options.growerTarget, let path = options.path {
  SystemCall.exit(GrowerProcess.run(path: path, target: target))
}
if options.workerID != nil {
  SystemCall.exit(options.redisMode ? RedisWorker.run(options) : Worker.run(options))
}
do {
  if options.redisMode { SystemCall.exit(try RedisCoordinator(options: options).run()) }
  let coordinator = try Coordinator(options: options)
  SystemCall.exit(coordinator.run())
} catch {
  FileHandle.standardError.write(Data("error: \(error)\n".utf8))
  SystemCall.exit(1)
}
