import Foundation
import MappedCache
import MappedCacheRedis
import SystemCalls

/// `mapped-cache agent PATH --redis URL --prefix P`: the near cache's invalidation role as
/// a sidecar (issue 17). Stands for the role until SIGINT/SIGTERM and prints each change.
enum AgentCommand {
  static func run(_ inv: Invocation) throws -> Int32 {
    let path = inv.argument("PATH")!
    guard let url = inv.value("--redis") else { throw inv.usageError("--redis URL is required") }
    let prefix = inv.value("--prefix") ?? ""
    let staleness = try inv.seconds("--max-staleness", allowZero: false) ?? 0.5
    let heartbeat = try inv.seconds("--heartbeat", allowZero: false) ?? 0.02
    if staleness < 2 * heartbeat { throw inv.usageError("--max-staleness must be at least twice --heartbeat") }
    var options = NearCacheOptions(heartbeatInterval: heartbeat)
    if let c = try inv.size("--capacity") { options.capacity = c }
    Signals.installInterruptHandler()
    let agent = try NearCacheAgent(
      path: path, url: url, keyPrefix: prefix,
      maxStaleness: .milliseconds(Int64(staleness * 1000)), options: options)
    Output.line(
      "agent pid \(SystemCall.processID()) for \(path), keys under \"\(prefix)\" of \(agent.remoteDescription)")
    Output.flush()
    var held: Bool? = nil
    while Signals.sleep(0.05) {
      let now = agent.isHolding
      if now != held {
        Output.line(now ? "holding the invalidation role" : "standing by (another process holds the role)")
        Output.flush()
        held = now
      }
    }
    agent.stop()
    Output.line("stopped")
    return ExitCode.ok
  }
}
