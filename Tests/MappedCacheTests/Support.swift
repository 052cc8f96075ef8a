import Foundation
import Glibc
import Testing

@testable import MappedCache

/// Shared helpers for tests: temporary cache paths and running the package's own
/// binaries (`mc-test-helper`, `cache-stress`, `mapped-cache`) as child processes.
enum Support {
  /// Runs `cache-stress` with `--json`: its exit status, its report and its stderr; a death
  /// by signal is a test failure.
  static func runStressJSON(_ args: [String], timeout: Double = 90) throws -> (
    status: Int32, json: [String: Any], stderr: String
  ) {
    let r = try run(binary("cache-stress"), args + ["--json"], timeout: timeout)
    #expect(!r.signaled, "cache-stress died by signal \(r.status); stderr: \(r.stderr)")
    let json = try #require(
      try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], "no JSON: \(r.stderr)")
    return (r.status, json, r.stderr)
  }

  /// An integer of a JSON report (-1 when missing).
  static func int(_ j: [String: Any], _ key: String) -> Int { (j[key] as? NSNumber)?.intValue ?? -1 }

  /// The directory holding the built binaries (the test runner sits beside them).
  static let binDir: String = {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var dir = (exe as NSString).deletingLastPathComponent
    // On Linux the runner is `<bin>/MappedCachePackageTests.xctest`.
    while !dir.isEmpty && dir != "/" && !FileManager.default.fileExists(atPath: dir + "/mc-test-helper") {
      dir = (dir as NSString).deletingLastPathComponent
    }
    return dir
  }()

  static func binary(_ name: String) -> String { binDir + "/" + name }

  /// A fresh path under /dev/shm (removed by `cleanup`).
  static func tempPath(_ tag: String = "t") -> String {
    "/dev/shm/mctest-\(tag)-\(getpid())-\(UUID().uuidString.prefix(8)).mcache"
  }

  static func cleanup(_ path: String) { unlink(path) }

  struct Result {
    var status: Int32
    /// True when the child died by a signal (`status` then holds the signal number).
    var signaled: Bool
    /// Standard output as it was written (`stdout` is its UTF-8 reading).
    var stdoutData: Data
    var stderr: String
    var stdout: String { String(decoding: stdoutData, as: UTF8.self) }
  }

  /// Runs a binary to completion (killing it after `timeout` seconds) and captures its
  /// output; `stdin`, if given, is written to its standard input and then closed.
  @discardableResult
  static func run(_ binary: String, _ args: [String], stdin: Data? = nil, timeout: TimeInterval = 120) throws -> Result
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
    signal(SIGPIPE, SIG_IGN)
    try p.run()
    // Feed and drain the pipes concurrently, so that a child blocked on a full pipe, or
    // one that never reads its input, cannot block the test. Dedicated threads, not
    // Dispatch's pool: many tests run children at once, and blocking pool threads on
    // pipes would starve other tests' `asyncAfter` and background work.
    final class Box: @unchecked Sendable { var data = Data() }
    let o = Box()
    let e = Box()
    let group = DispatchGroup()
    if let stdin {
      let writer = input.fileHandleForWriting
      group.enter()
      Thread.detachNewThread {
        try? writer.write(contentsOf: stdin)
        try? writer.close()
        group.leave()
      }
    }
    group.enter()
    Thread.detachNewThread {
      o.data = out.fileHandleForReading.readDataToEndOfFile()
      group.leave()
    }
    group.enter()
    Thread.detachNewThread {
      e.data = err.fileHandleForReading.readDataToEndOfFile()
      group.leave()
    }
    let deadline = Date().addingTimeInterval(timeout)
    while p.isRunning && Date() < deadline { usleep(2_000) }
    if p.isRunning { kill(p.processIdentifier, SIGKILL) }
    p.waitUntilExit()
    group.wait()
    return Result(
      status: p.terminationStatus, signaled: p.terminationReason == .uncaughtSignal,
      stdoutData: o.data, stderr: String(decoding: e.data, as: UTF8.self))
  }

  /// Starts a binary in the background; the caller waits or kills it.
  static func spawn(_ binary: String, _ args: [String], quiet: Bool = true) throws -> Process {
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

  /// Open descriptors of this process.
  static func openDescriptorCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
  }
}
