import Foundation
import Glibc
import SystemCalls

/// A child process of a test: one of the package's binaries (`mc-test-helper`,
/// `cache-stress`, `mapped-cache`), a Redis tool or a system tool. The one way the tests
/// start processes: `Process` spawns the binary (this process never forks), and what the
/// child writes is read as it comes by threads of this object's own, never Dispatch's
/// pool (many tests run children at once, and pool threads blocked on pipes would starve
/// other tests' `asyncAfter` and background work), so a child blocked on a full pipe, or
/// one that never reads its input, cannot block the test.
///
/// `run` starts a child and waits for it; `init` starts one that runs beside the test,
/// which reads its output so far (`stdout`, `waitForLine`), signals it (`kill`) and
/// collects it (`finish`, `wait`).
public final class ChildProcess: @unchecked Sendable {
  /// What a child did.
  public struct Result: Sendable {
    public var status: Int32
    /// True when the child died by a signal (`status` then holds the signal number).
    public var signaled: Bool
    /// True when `finish` killed it for running past its time.
    public var timedOut: Bool
    /// Standard output as it was written (`stdout` is its UTF-8 reading).
    public var stdoutData: Data
    public var stderr: String
    public var stdout: String { String(decoding: stdoutData, as: UTF8.self) }
    /// It exited by itself, with status 0.
    public var ok: Bool { !timedOut && !signaled && status == 0 }
  }

  /// Where a child's standard output or error goes.
  public enum Output: Sendable {
    /// Read into `stdout` or `stderr`.
    case captured
    /// /dev/null.
    case discarded
    /// The file at this path, opened for writing (/dev/full, a file on a faulty mount).
    case file(String)
    /// A pipe nobody reads (its reading end closed first): a write fails with EPIPE.
    case unread
  }

  /// A child that could not be started as asked.
  public struct Failure: Error, CustomStringConvertible {
    public var description: String
  }

  private let process = Process()
  private let lock = NSLock()
  private var out = Data()
  private var err = Data()
  private let drained = DispatchGroup()
  private var killedForTime = false

  /// Starts `binary` with `arguments`, `environment` added to this process's; `stdin`,
  /// if given, is written to its standard input and then closed (otherwise it reads
  /// /dev/null).
  public init(
    _ binary: String, _ arguments: [String] = [], environment: [String: String] = [:], stdin: Data? = nil,
    stdout: Output = .captured, stderr: Output = .captured
  ) throws {
    process.executableURL = URL(fileURLWithPath: binary)
    process.arguments = arguments
    if !environment.isEmpty {
      process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    }
    let input = Pipe()
    process.standardInput = stdin == nil ? FileHandle.nullDevice : input
    let outReader = try Self.connect(stdout) { process.standardOutput = $0 }
    let errReader = try Self.connect(stderr) { process.standardError = $0 }
    // A child that stops reading its stdin must not kill this process by SIGPIPE.
    SystemCall.ignoreSignal(SIGPIPE)
    try process.run()
    if let stdin { feed(input.fileHandleForWriting, stdin) }
    if let outReader { drain(outReader, isOut: true) }
    if let errReader { drain(errReader, isOut: false) }
  }

  /// Runs `binary` to completion (killing it after `timeout` seconds) and returns what it
  /// did, its output captured unless told otherwise.
  @discardableResult
  public static func run(
    _ binary: String, _ arguments: [String] = [], environment: [String: String] = [:], stdin: Data? = nil,
    stdout: Output = .captured, stderr: Output = .captured, timeout: TimeInterval = 120
  ) throws -> Result {
    try ChildProcess(binary, arguments, environment: environment, stdin: stdin, stdout: stdout, stderr: stderr)
      .finish(timeout: timeout)
  }

  /// Sets the child's end of `output` (through `assign`); the reading end to drain, when
  /// the output is captured.
  private static func connect(_ output: Output, _ assign: (Any) -> Void) throws -> FileHandle? {
    switch output {
    case .captured:
      let pipe = Pipe()
      assign(pipe)
      return pipe.fileHandleForReading
    case .discarded:
      assign(FileHandle.nullDevice)
    case .file(let path):
      guard let handle = FileHandle(forWritingAtPath: path) else {
        throw Failure(description: "cannot open \(path) for a child's output")
      }
      assign(handle)
    case .unread:
      let pipe = Pipe()
      try pipe.fileHandleForReading.close()
      assign(pipe)
    }
    return nil
  }

  private func feed(_ writer: FileHandle, _ bytes: Data) {
    drained.enter()
    Thread.detachNewThread { [self] in
      try? writer.write(contentsOf: bytes)
      try? writer.close()
      drained.leave()
    }
  }

  private func drain(_ reader: FileHandle, isOut: Bool) {
    drained.enter()
    Thread.detachNewThread { [self] in
      while true {
        let chunk = reader.availableData
        if chunk.isEmpty { break }
        lock.withLock { if isOut { out.append(chunk) } else { err.append(chunk) } }
      }
      drained.leave()
    }
  }

  /// The child's process id.
  public var pid: Int32 { process.processIdentifier }
  /// Whether it has not exited yet.
  public var isRunning: Bool { process.isRunning }
  /// Its standard output so far (captured output only).
  public var stdoutData: Data { lock.withLock { out } }
  public var stdout: String { String(decoding: stdoutData, as: UTF8.self) }
  /// Its standard error so far (captured output only).
  public var stderr: String { lock.withLock { String(decoding: err, as: UTF8.self) } }

  /// Sends it `signal`, unless it has already exited (its id may be another's by then).
  public func kill(_ signal: Int32 = SIGKILL) {
    if isRunning { try? SystemCall.kill(pid, signal) }
  }

  /// Waits (polling, up to `timeout` seconds) until the child has printed `line` as a
  /// whole line; false when it exits or the time passes first.
  @discardableResult
  public func waitForLine(_ line: String, timeout: TimeInterval = 60) -> Bool {
    waitForOutput(timeout: timeout) { $0.split(separator: "\n").contains(Substring(line)) }
  }

  /// Waits (polling, up to `timeout` seconds) until `done` holds of the child's output so
  /// far; false when it exits or the time passes first.
  public func waitForOutput(timeout: TimeInterval = 60, until done: (String) -> Bool) -> Bool {
    let deadline = Clock.seconds() + timeout
    while Clock.seconds() < deadline {
      if done(stdout) { return true }
      if !isRunning { return done(stdout) }
      SystemCall.sleep(microseconds: 2_000)
    }
    return false
  }

  /// Waits (polling, up to `timeout` seconds) until the child is stopped by a signal (its
  /// own SIGSTOP, a test hook's pause): true then; false when it exits or the time passes.
  public func waitUntilStopped(timeout: TimeInterval = 30) -> Bool {
    let deadline = Clock.seconds() + timeout
    while Clock.seconds() < deadline && isRunning {
      if isStopped { return true }
      SystemCall.sleep(microseconds: 2_000)
    }
    return isStopped
  }

  /// Whether the state letter of /proc/PID/stat is T (stopped by a signal).
  public var isStopped: Bool {
    guard let s = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let paren = s.lastIndex(of: ")")
    else { return false }
    return s[paren...].dropFirst(2).first == "T"
  }

  /// Waits for the child to exit, with no bound, and for its output to drain.
  @discardableResult
  public func wait() -> Result {
    process.waitUntilExit()
    drained.wait()
    return Result(
      status: process.terminationStatus, signaled: process.terminationReason == .uncaughtSignal,
      timedOut: lock.withLock { killedForTime }, stdoutData: stdoutData, stderr: stderr)
  }

  /// Waits up to `timeout` seconds for the child to exit (then SIGKILLs it) and for its
  /// output to drain.
  @discardableResult
  public func finish(timeout: TimeInterval = 120) -> Result {
    let deadline = Clock.seconds() + timeout
    while isRunning && Clock.seconds() < deadline { SystemCall.sleep(microseconds: 2_000) }
    if isRunning {
      lock.withLock { killedForTime = true }
      kill()
    }
    return wait()
  }
}
