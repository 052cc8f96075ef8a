import Foundation
import Glibc
@testable import MappedCache

/// Self-checking values, as written by `mc-test-helper writer` (a copy of the helper's
/// `CheckedValue`): `key NUL writer NUL seq NUL payload checksum`, checksum = FNV-1a 64
/// of every byte before it. A value passes only if it names its key and its checksum holds.
enum CoreValue {
  static func fnv(_ b: UnsafeRawBufferPointer) -> UInt64 {
    var h: UInt64 = 0xCBF2_9CE4_8422_2325
    for x in b { h = (h ^ UInt64(x)) &* 0x100_0000_01B3 }
    return h
  }

  static func make(key: String, writer: Int, seq: Int, size: Int) -> [UInt8] {
    var v = Array("\(key)\u{0}\(writer)\u{0}\(seq)\u{0}".utf8)
    let payload = max(0, size - v.count - 8)
    var x = UInt64(truncatingIfNeeded: seq) &* 0x9E37_79B9_7F4A_7C15 | 1
    for _ in 0..<payload {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17
      v.append(UInt8(truncatingIfNeeded: x))
    }
    let sum = v.withUnsafeBytes { fnv($0) }
    for i in 0..<8 { v.append(UInt8(truncatingIfNeeded: sum >> (8 * UInt64(i)))) }
    return v
  }

  static func check(_ v: UnsafeRawBufferPointer, key: String) -> Bool {
    let k = Array(key.utf8)
    guard v.count >= k.count + 1 + 8 else { return false }
    let body = UnsafeRawBufferPointer(rebasing: v[0..<(v.count - 8)])
    var sum: UInt64 = 0
    for i in 0..<8 { sum |= UInt64(v[v.count - 8 + i]) << (8 * UInt64(i)) }
    guard sum == fnv(body) else { return false }
    return v[k.count] == 0 && zip(k, v).allSatisfy { $0 == $1 }
  }

  static func check(_ v: [UInt8], key: String) -> Bool { v.withUnsafeBytes { check($0, key: key) } }
}

/// A deterministic generator for tests (xorshift64*).
struct CoreRNG {
  var s: UInt64
  init(_ seed: UInt64) { s = seed == 0 ? 0x9E37_79B9 : seed }
  mutating func next() -> UInt64 {
    s ^= s >> 12; s ^= s << 25; s ^= s >> 27
    return s &* 0x2545_F491_4F6C_DD1D
  }
  mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(1, n))) }
  mutating func inRange(_ r: ClosedRange<Int>) -> Int { r.lowerBound + below(r.count) }
}

/// A running `mc-test-helper` child whose stdout is captured (for the "ready" line and
/// the final JSON report). Never `fork`: `Process` spawns the built binary.
final class CoreChild: @unchecked Sendable {
  let process = Process()
  private let lock = NSLock()
  private var out = Data()
  private var err = Data()
  private let done = DispatchGroup()

  init(_ args: [String]) throws {
    process.executableURL = URL(fileURLWithPath: Support.binary("mc-test-helper"))
    process.arguments = args
    let o = Pipe(), e = Pipe()
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
          let obj = try? JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any] else { return [:] }
    return obj
  }

  func int(_ field: String) -> Int { (report[field] as? NSNumber)?.intValue ?? -1 }
}

extension SharedCache {
  /// The underlying engine's full check, with probe-length figures.
  func check() -> VerifyReport { engine.check(repair: false, checksums: true) }
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
