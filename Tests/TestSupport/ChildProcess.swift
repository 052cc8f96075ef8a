import Foundation
import Glibc
import SystemCalls

/// Running the package's own binaries (`mc-test-helper`, `cache-stress`, `mapped-cache`)
/// as child processes of a test.
public enum ChildProcess {
  /// What a child did.
  public struct Result: Sendable {
    public var status: Int32
    /// True when the child died by a signal (`status` then holds the signal number).
    public var signaled: Bool
    /// Standard output as it was written (`stdout` is its UTF-8 reading).
    public var stdoutData: Data
    public var stderr: String
    public var stdout: String { String(decoding: stdoutData, as: UTF8.self) }
  }

  /// Runs a binary to completion (killing it after `timeout` seconds) and captures its
  /// output; `stdin`, if given, is written to its standard input and then closed.
  @discardableResult
  public static func run(_ binary: String, _ args: [String], stdin: Data? = nil, timeout: TimeInterval = 120) throws
    -> Result
  {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: binary)
    p.arguments = args
    let out = Pipe()
    let err = Pipe()
    p.standardOutput = out
    p.standardError = err
    let input = Pipe()
    p.standardInput = stdin == nil ? FileHandle.nullDevice : input
    // A child that stops reading its stdin must not kill this process by SIGPIPE.
    Sys.ignoreSignal(SIGPIPE)
    try p.run()
    let group = DispatchGroup()
    if let stdin { feed(input.fileHandleForWriting, stdin, group) }
    let o = drain(out.fileHandleForReading, group)
    let e = drain(err.fileHandleForReading, group)
    let deadline = Clock.seconds() + timeout
    while p.isRunning && Clock.seconds() < deadline { Sys.sleep(microseconds: 2_000) }
    if p.isRunning { try? Sys.kill(p.processIdentifier, SIGKILL) }
    p.waitUntilExit()
    group.wait()
    return Result(
      status: p.terminationStatus, signaled: p.terminationReason == .uncaughtSignal,
      stdoutData: o.data, stderr: String(decoding: e.data, as: UTF8.self))
  }

  // The pipes are fed and drained concurrently, so that a child blocked on a full pipe,
  // or one that never reads its input, cannot block the test. Dedicated threads, not
  // Dispatch's pool: many tests run children at once, and blocking pool threads on pipes
  // would starve other tests' `asyncAfter` and background work.

  private final class Box: @unchecked Sendable { var data = Data() }

  private static func feed(_ writer: FileHandle, _ bytes: Data, _ group: DispatchGroup) {
    group.enter()
    Thread.detachNewThread {
      try? writer.write(contentsOf: bytes)
      try? writer.close()
      group.leave()
    }
  }

  private static func drain(_ reader: FileHandle, _ group: DispatchGroup) -> Box {
    let box = Box()
    group.enter()
    Thread.detachNewThread {
      box.data = reader.readDataToEndOfFile()
      group.leave()
    }
    return box
  }

  /// Starts a binary in the background (its output discarded when `quiet`); the caller
  /// waits for it or kills it.
  public static func spawn(_ binary: String, _ args: [String], quiet: Bool = true) throws -> Process {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: binary)
    p.arguments = args
    if quiet {
      p.standardOutput = FileHandle.nullDevice
      p.standardError = FileHandle.nullDevice
    }
    p.standardInput = FileHandle.nullDevice
    try p.run()
    return p
  }
}
