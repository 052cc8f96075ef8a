import Foundation

// A child process for multi-process tests: tests re-execute this binary (never fork
// without exec) with a command name and its arguments. Each concern keeps its commands
// in its own file (Core, Typed, Reliability, Faults, CLI, Redis); this table routes them.
typealias HelperCommand = @Sendable ([String]) throws -> Int32

let commands: [String: HelperCommand] =
  coreCommands
  .merging(typedCommands) { a, _ in a }
  .merging(reliabilityCommands) { a, _ in a }
  .merging(cliCommands) { a, _ in a }
  .merging(instructionLoopCommands) { a, _ in a }
  .merging(redisCommands) { a, _ in a }
  .merging(faultCommands) { a, _ in a }
  .merging(fleetCommands) { a, _ in a }
  .merging(batchCommands) { a, _ in a }
  .merging(interopCommands) { a, _ in a }
  .merging(matrixCommands) { a, _ in a }
  .merging(cabiBenchCommands) { a, _ in a }

let args = Array(CommandLine.arguments.dropFirst())
guard let name = args.first, let command = commands[name] else {
  FileHandle.standardError.write(
    "usage: mc-test-helper COMMAND [ARGS...]; commands: \(commands.keys.sorted().joined(separator: " "))\n".data(
      using: .utf8)!)
  exit(64)
}
do {
  exit(try command(Array(args.dropFirst())))
} catch {
  FileHandle.standardError.write("mc-test-helper \(name): \(error)\n".data(using: .utf8)!)
  exit(3)
}
