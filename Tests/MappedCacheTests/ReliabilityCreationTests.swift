import Foundation
import Glibc
import Testing

@testable import MappedCache

/// A process SIGKILLed at each step of creating a cache file (held there by the
/// `MC_TEST_CREATE_PAUSE` hook, so the kill lands exactly at that step), while others
/// try to open it: whatever it leaves, `mapped-cache create`, `info`, `set` and
/// `SharedCache(path:)` afterwards end with a sound cache.
@Suite(.serialized) struct ReliabilityCreationTests {
  /// The hook's steps, in the order creation reaches them (see `CacheFileOpener`).
  static let steps = ["opened", "locked", "marked", "allocated", "header", "unpublished"]
  static let marker = Array("MCCINIT0".utf8)
  static let magic = Array("MCACHE01".utf8)

  /// A `mapped-cache create PATH` that stopped itself at `step`.
  final class StoppedCreator {
    let process: Process

    init(_ path: String, at step: String) throws {
      process = Process()
      process.executableURL = URL(fileURLWithPath: Support.binary("mapped-cache"))
      // A type name fills the header's second half.
      process.arguments = ["create", path, "--capacity", "2M", "--type", "bytes"]
      var env = ProcessInfo.processInfo.environment
      env["MC_TEST_CREATE_PAUSE"] = step
      process.environment = env
      process.standardOutput = FileHandle.nullDevice
      process.standardError = FileHandle.nullDevice
      process.standardInput = FileHandle.nullDevice
      try process.run()
      let deadline = Date().addingTimeInterval(30)
      while !Self.isStopped(process.processIdentifier) {
        guard process.isRunning, Date() < deadline else {
          Glibc.kill(process.processIdentifier, SIGKILL)
          throw CreationError("the creator never stopped at \(step)")
        }
        usleep(2_000)
      }
    }

    /// SIGKILLs it where it stands.
    func kill() {
      Glibc.kill(process.processIdentifier, SIGKILL)
      process.waitUntilExit()
    }

    deinit { if process.isRunning { kill() } }

    /// The state letter of /proc/PID/stat is T (stopped by a signal).
    static func isStopped(_ pid: Int32) -> Bool {
      guard let s = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let paren = s.lastIndex(of: ")")
      else { return false }
      return s[paren...].dropFirst(2).first == "T"
    }
  }

  struct CreationError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
  }

  /// Leaves at `path` what a creator killed at `step` leaves, and checks that the kill
  /// landed where the step says.
  static func leftover(_ path: String, at step: String) throws {
    let creator = try StoppedCreator(path, at: step)
    creator.kill()
    let bytes = [UInt8](FileManager.default.contents(atPath: path) ?? Data())
    switch step {
    case "opened", "locked":
      #expect(bytes.isEmpty, "\(step): an empty file")
    case "marked":
      #expect(bytes == marker, "\(step): the marker alone")
    case "allocated":
      #expect(bytes.count == 2 << 20 && Array(bytes.prefix(8)) == marker, "\(step): marked, full size")
      #expect(bytes[8..<4096].allSatisfy { $0 == 0 }, "\(step): no header yet")
    case "header", "unpublished":
      #expect(bytes.count == 2 << 20 && Array(bytes.prefix(8)) == marker, "\(step): marked, full size")
      #expect(bytes[8..<128].contains { $0 != 0 } == true, "\(step): the header's first half is written")
      let secondHalf = bytes[128..<256].contains { $0 != 0 }
      #expect(secondHalf == (step == "unpublished"), "\(step): the header's second half")
    default:
      Issue.record("unknown step \(step)")
    }
  }

  @Test func killedAtEachStepOfCreationThenTheToolsAndTheLibraryTakeOver() throws {
    for step in Self.steps {
      let empty = step == "opened" || step == "locked"

      // create: makes the cache it was asked for, in place of the leftover.
      let p1 = Support.tempPath("kc-create")
      defer { Support.cleanup(p1) }
      try Self.leftover(p1, at: step)
      let create = try CLITests.cli(["create", p1, "--capacity", "4M"])
      #expect(create.status == 0 && create.text.hasPrefix("created \(p1): 4.0 MiB"), "\(step) create: \(create.err)")
      #expect(create.text.contains("left unfinished") == !empty, "\(step): \(create.text)")
      #expect(try CLITests.cli(["verify", p1]).status == 0, "\(step) create")

      // info and set: a marked leftover is created afresh (with a note), an empty one
      // is reported as not a cache yet, with the command that makes it one.
      for command in [["info"], ["set", "k", "v"]] {
        let p = Support.tempPath("kc-\(command[0])")
        defer { Support.cleanup(p) }
        try Self.leftover(p, at: step)
        let r = try CLITests.cli([command[0], p] + command.dropFirst())
        if empty {
          #expect(
            r.status == 2 && r.err.contains("is empty, not a cache yet") && r.err.contains("create \(p)"),
            "\(step) \(command): \(r.status) \(r.err)")
          continue
        }
        #expect(r.status == 0, "\(step) \(command): \(r.err)")
        #expect(r.err.hasPrefix("note: \(p) had been left half-created"), "\(step) \(command): \(r.err)")
        if command[0] == "info" { #expect(r.text.contains("format version") && r.text.contains("64.0 MiB")) }
        if command[0] == "set" { #expect(try CLITests.cli(["get", p, "k"]).text == "v", "\(step)") }
        #expect(try CLITests.cli(["verify", p]).status == 0, "\(step) \(command)")
        #expect(try CLITests.cli(["info", p]).err.isEmpty, "\(step): taken over once, then a plain cache")
      }

      // The library, as before: SharedCache(path:) takes any leftover over.
      let p4 = Support.tempPath("kc-lib")
      defer { Support.cleanup(p4) }
      try Self.leftover(p4, at: step)
      let cache = try SharedCache<[UInt8]>(path: p4, capacity: 1 << 20)
      #expect(cache.capacity == 1 << 20, "\(step)")
      try cache.setObject([7], forKey: "x")
      #expect(try cache.object(forKey: "x") == [7] && (try cache.verify().ok), "\(step)")
    }
  }

  /// Others open the file while its creator is stopped at a step: before the creation
  /// lock they create the cache themselves; under it they wait, and go on once the
  /// creator is killed.
  @Test func openersWaitingOnAStoppedCreatorGoOnWhenItIsKilled() throws {
    for step in Self.steps {
      let path = Support.tempPath("kc-wait")
      defer { Support.cleanup(path) }
      let creator = try StoppedCreator(path, at: step)
      if step == "opened" {
        // No lock taken yet: a library opener finds an empty file and creates it.
        let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
        try c.setObject([1], forKey: "first")
        creator.kill()
        #expect(try c.object(forKey: "first") == [1] && (try c.verify().ok))
        continue
      }
      let setter = Process()
      setter.executableURL = URL(fileURLWithPath: Support.binary("mapped-cache"))
      setter.arguments = ["set", path, "k", "after-\(step)"]
      setter.standardOutput = FileHandle.nullDevice
      setter.standardError = FileHandle.nullDevice
      setter.standardInput = FileHandle.nullDevice
      try setter.run()
      usleep(300_000)
      #expect(setter.isRunning, "\(step): the setter waits on the creation lock")
      creator.kill()
      let deadline = Date().addingTimeInterval(30)
      while setter.isRunning && Date() < deadline { usleep(5_000) }
      if setter.isRunning { kill(setter.processIdentifier, SIGKILL) }
      setter.waitUntilExit()
      if step == "locked" {
        // The creator died before marking the file: the waiting `set` finds it empty.
        #expect(setter.terminationStatus == 2, "\(step)")
        #expect(try CLITests.cli(["create", path]).status == 0)
      } else {
        #expect(
          setter.terminationReason == .exit && setter.terminationStatus == 0, "\(step): \(setter.terminationStatus)")
        #expect(try CLITests.cli(["get", path, "k"]).text == "after-\(step)", "\(step)")
      }
      #expect(try CLITests.cli(["verify", path]).status == 0, "\(step)")
    }
  }

  /// A cache that was created whole is never taken for an interrupted one: the marker
  /// alone decides, and a finished file never holds it.
  @Test func aFinishedCacheIsNeverTakenOver() throws {
    let path = Support.tempPath("kc-finished")
    defer { Support.cleanup(path) }
    #expect(try CLITests.cli(["create", path, "--capacity", "2M"]).status == 0)
    #expect(try CLITests.cli(["set", path, "k", "kept"]).status == 0)
    let bytes = [UInt8](FileManager.default.contents(atPath: path) ?? Data())
    #expect(Array(bytes.prefix(8)) == Self.magic)
    #expect(try CLITests.cli(["create", path]).status == 3)
    let info = try CLITests.cli(["info", path])
    #expect(info.status == 0 && info.err.isEmpty)
    #expect(try CLITests.cli(["get", path, "k"]).text == "kept")
  }
}
