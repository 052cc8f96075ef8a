import CacheTools

/// Dispatch: picks the command from the table, parses its arguments, runs it, and turns
/// whatever it throws into a message and an exit code (`CLIFailure`).
enum Tool {
  static let version = ToolVersion.line(tool: "mapped-cache")

  static func run(_ args: [String]) -> Int32 {
    guard let first = args.first else {
      return report(.usage("missing COMMAND", command: nil))
    }
    switch first {
    case "-h", "--help", "help":
      if first == "help", args.count > 1 {
        guard let c = CommandTable.command(named: args[1]) else {
          return report(.usage("unknown command '\(args[1])'", command: nil))
        }
        Output.out(Usage.help(for: c))
      } else {
        Output.out(Usage.toolHelp)
      }
      return ExitCode.ok
    case "--version":
      Output.line(version)
      return ExitCode.ok
    default:
      break
    }
    guard let command = CommandTable.command(named: first) else {
      let hint = first.hasPrefix("-") ? "unknown option '\(first)'" : "unknown command '\(first)'"
      return report(.usage(hint, command: nil))
    }
    do {
      guard let inv = try Invocation.parse(Array(args.dropFirst()), for: command) else {
        Output.out(Usage.help(for: command))
        return ExitCode.ok
      }
      return try command.run(inv)
    } catch {
      return report(CLIFailure(any: error))
    }
  }

  static func report(_ f: CLIFailure) -> Int32 {
    Output.flush()
    switch f {
    case .usage(let m, let command):
      let line = command.map { Usage.line(for: $0) } ?? Usage.toolLine
      let more = command.map { "\(Usage.tool) \($0.name) --help" } ?? "\(Usage.tool) --help"
      Output.err("error: \(m)\nusage: \(line)\n  (see '\(more)')")
    case .notFound(let m), .failed(let m):
      Output.err("error: \(m)")
    case .invalidCache(let m):
      if !m.isEmpty { Output.err("error: \(m)") }
    }
    return f.exitCode
  }
}
