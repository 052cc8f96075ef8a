import CheckedValues
import Foundation
import Glibc
import TestSupport

@testable import MappedCache

/// Self-checking values, as written by `mc-test-helper writer`: the same type the helper
/// uses (Tests/CheckedValues), so writer and checker cannot drift apart.
typealias CoreValue = CheckedValue

/// A running `mc-test-helper` child whose stdout is captured (for the "ready" line and
/// the final JSON report). Never `fork`: `Process` spawns the built binary.
final class CoreChild: @unchecked Sendable {
  let process = Process()
  private let lock = NSLock()
  private var out = Data()
  private var err = Data()
  private let done = DispatchGroup()

  init(_ args: [String]) throws {
    process.executableURL = URL(fileURLWithPath: TestFiles.binary("mc-test-helper"))
    process.arguments = args
    let o = Pipe()
    let e = Pipe()
    process.standardOutput = o
    process.standardError = e
    process.standardInput = FileHandle.nullDevice
    try process.run()
    for (pipe, isOut) in [(o, true), (e, false)] {
      done.enter()
      let h = pipe.fileHandleForReading
      Thread.detachNewThread { [self] in
        while true {
          let d = h.availableData
          if d.isEmpty { break }
          lock.withLock { if isOut { out.append(d) } else { err.append(d) } }
        }
        done.leave()
      }
    }
  }

  var pid: Int32 { process.processIdentifier }
  var stdout: String { lock.withLock { String(decoding: out, as: UTF8.self) } }
  var stderr: String { lock.withLock { String(decoding: err, as: UTF8.self) } }

  /// Waits (polling, generous bound) until the child has printed `line` or has exited.
  @discardableResult
  func waitFor(_ line: String, timeout: TimeInterval = 60) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      if stdout.split(separator: "\n").contains(Substring(line)) { return true }
      if !process.isRunning { return stdout.split(separator: "\n").contains(Substring(line)) }
      usleep(2_000)
    }
    return false
  }

  func kill(_ signal: Int32 = SIGKILL) { _ = Glibc.kill(pid, signal) }

  /// Waits for exit (killing the child after `timeout`) and for its output to drain.
  func finish(timeout: TimeInterval = 120) {
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { usleep(5_000) }
    if process.isRunning { kill() }
    process.waitUntilExit()
    done.wait()
  }

  var status: Int32 { process.terminationStatus }
  var signaled: Bool { process.terminationReason == .uncaughtSignal }

  /// The last line of stdout parsed as a JSON object of integers/bools.
  var report: [String: Any] {
    guard let last = stdout.split(separator: "\n").last,
      let obj = try? JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any]
    else { return [:] }
    return obj
  }

  func int(_ field: String) -> Int { (report[field] as? NSNumber)?.intValue ?? -1 }
}

extension SharedCache {
  /// The underlying engine's full check, with probe-length figures.
  func check() -> VerifyReport { engine.checker.inspect(checksums: true) }
}

enum CoreOptions {
  /// Creation options for the two slot layouts: plain 32-byte slots (the default for
  /// large averages), or slots with an inline area (chosen for small averages: entries of
  /// up to `inlineCapacity` key+value bytes live in their slot).
  static func make(inline: Bool, capacity: Int) -> CacheOptions {
    var o = CacheOptions(capacity: capacity)
    if inline { o.averageEntrySize = 64 } else { o.inlineEntrySize = 0 }
    return o
  }
}

extension SharedCache {
  /// Key+value bytes an entry may have to be stored inline (0: no inline slots).
  var inlineCapacity: Int { engine.layout.inlineCapacity }
}

extension CacheEngine {
  /// `count` keys ("tag-0", "tag-1", ...: the first names that qualify) whose home slot
  /// is `home`, for tests that build probe runs slot by slot.
  func keys(home: Int, count: Int, tag: String = "k") -> [String] {
    var out: [String] = []
    var i = 0
    while out.count < count {
      let k = "\(tag)-\(i)"
      i += 1
      if Array(k.utf8).withUnsafeBytes({ index.home(KeyHash.key($0)) }) == home { out.append(k) }
    }
    return out
  }

  /// The slot that holds `key`, or nil.
  func slot(of key: String) throws -> Int? { try Array(key.utf8).withUnsafeBytes { try _find($0)?.slot } }
}
