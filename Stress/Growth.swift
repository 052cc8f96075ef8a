import Foundation
import Glibc
import MappedCache
import SystemCalls

/// A growth of the cache during the run (`--grow-every`), for the report.
struct GrowthEvent {
  /// When it started, in seconds after the run's start, and how long it took.
  var seconds: Double
  var took: Double
  var fromCapacity: Int
  var toCapacity: Int
  var movedEntries: Int
  /// The longest step: the most a writer of the run waited for this growth.
  var longestStep: Double = 0
  var error: String?
  /// Whether its grower was SIGKILLed midway (`--kill-growers`): what it had done stays
  /// in the file, `toCapacity` is the capacity the header showed after the kill, and
  /// the moved entries and the longest step are unknown (0).
  var killed = false

  /// How the reports say `killed`.
  static let killedNote = "its grower SIGKILLed midway"

  /// Takes in what a growth that ran to its end did.
  mutating func record(_ r: GrowerProcess.Result) {
    toCapacity = r.capacity
    movedEntries = r.movedEntries
    longestStep = r.longestStep
  }
}

/// Grows the cache on a thread of its own (`--grow-every`), one growth at a time, each
/// doubling it up to the target. In this process, through a handle of its own; or, with
/// `killing` (`--kill-growers`), in a grower process of its own each time
/// (`GrowerProcess`), every other one of which is SIGKILLed at a random moment after it
/// opened the file, so that the kill lands among the growth's steps while the workers
/// read and write (and are killed) as ever. The next growth, or the next writer of a
/// partition a step left half split, finishes what the killed grower left.
final class GrowthRunner: @unchecked Sendable {
  private let idle = NSCondition()
  private var events: [GrowthEvent] = []
  private var busy = false
  private var reached = false
  private let file: CacheFile
  private let path: String
  private let target: Int
  private let runStart: UInt64
  /// `--kill-growers`: the kills' moments come from it (the run's seed).
  private var killing: SplitMix64?
  /// How long the last grower that ran to its end worked, from opening the file to its
  /// result: a kill's moment is drawn from that span, and the next growth, of a file
  /// twice as large, takes longer, so the kill lands among its steps.
  private var lastWork = 0.01
  /// A grower waits for no one but the partitions' writers, a step each: one still
  /// running after this long is stuck, and is killed as a failure of the run.
  static let growerLimit: Double = 60

  init(path: String, target: Int, runStart: UInt64, killing: SplitMix64?) throws {
    file = try CacheFile(path: path, policy: OpenPolicy())
    self.path = path
    self.target = target
    self.runStart = runStart
    self.killing = killing
  }

  /// Starts the next growth, unless one is running or the target is reached.
  func startNext() {
    idle.lock()
    defer { idle.unlock() }
    guard !busy, !reached, file.statistics.capacity < target else { return }
    busy = true
    // Every other growth is killed, at a moment drawn from the last whole growth's
    // work after its grower opened the file.
    let killAfter: Double? = killing != nil && events.count % 2 == 0 ? killing!.nextDouble() * lastWork : nil
    let inProcess = killing == nil
    Thread.detachNewThread { [self] in
      let from = file.statistics.capacity
      let t0 = Clock.nanoseconds()
      var e = GrowthEvent(
        seconds: Double(Int64(bitPattern: t0 &- runStart)) / 1e9, took: 0, fromCapacity: from, toCapacity: from,
        movedEntries: 0)
      let to = min(target, from * 2)
      if inProcess {
        do { e.record(GrowerProcess.Result(try file.grow(toCapacity: to))) } catch {
          e.error = "\(error)"
        }
      } else {
        growInProcessOfItsOwn(to: to, killAfter: killAfter, &e)
      }
      e.took = Double(Clock.nanoseconds() - t0) / 1e9
      idle.lock()
      // A growth that added no whole partition (the target is reached) is not one.
      let counts = e.toCapacity > e.fromCapacity || e.error != nil || e.killed
      if counts { events.append(e) } else { reached = true }
      busy = false
      idle.broadcast()
      idle.unlock()
      guard counts else { return }
      FileHandle.standardError.write(
        Data(
          String(
            format: "grew the cache from %@ to %@ in %.3f s (%d entries moved)%@%@\n", Fmt.bytes(e.fromCapacity),
            Fmt.bytes(e.toCapacity), e.took, e.movedEntries, e.killed ? ", \(GrowthEvent.killedNote)" : "",
            e.error.map { ": \($0)" } ?? ""
          ).utf8))
    }
  }

  /// Grows the file to `to` in a grower process (`GrowerProcess`), SIGKILLed
  /// `killAfter` seconds after it opened the file when given (unless done by then),
  /// and fills in `e` from what it printed, or from the file after the kill.
  private func growInProcessOfItsOwn(to: Int, killAfter: Double?, _ e: inout GrowthEvent) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: FleetMember.ownBinary)
    p.arguments = ["--path", path, "--grower-target", "\(to)"]
    let out = Pipe()
    let err = Pipe()
    p.standardInput = FileHandle.nullDevice
    p.standardOutput = out
    p.standardError = err
    do { try p.run() } catch {
      e.error = "cannot start a grower: \(error)"
      return
    }
    // The watchdog also ends a grower stuck before its first line (the reads below
    // block until a line comes or the pipe closes).
    let started = Clock.nanoseconds()
    let watchdog = DispatchWorkItem {
      if p.isRunning { try? SystemCall.kill(p.processIdentifier, SIGKILL) }
    }
    DispatchQueue.global().asyncAfter(deadline: .now() + Self.growerLimit, execute: watchdog)
    // Its first line says it opened the file; its second is the growth's result.
    let reader = LineReader(out.fileHandleForReading)
    let opened = reader.line() == GrowerProcess.openedLine
    let openedAt = Clock.nanoseconds()
    if opened, let after = killAfter {
      let deadline = Clock.nanoseconds() + UInt64(after * 1e9)
      while p.isRunning && Clock.nanoseconds() < deadline { SystemCall.sleep(microseconds: 200) }
      if p.isRunning {
        try? SystemCall.kill(p.processIdentifier, SIGKILL)
        e.killed = true
      }
    }
    let result = e.killed ? nil : reader.line()
    p.waitUntilExit()
    watchdog.cancel()
    let work = Double(Clock.nanoseconds() - openedAt) / 1e9
    if e.killed {
      e.toCapacity = file.statistics.capacity
    } else if p.terminationReason == .uncaughtSignal {
      // Not by us: the watchdog's, once the limit passed, or another's.
      let ran = Double(Clock.nanoseconds() - started) / 1e9
      e.error =
        ran >= Self.growerLimit
        ? "the grower was still running after \(Int(Self.growerLimit)) s"
        : "the grower died of signal \(p.terminationStatus)"
    } else if let result, let g = GrowerProcess.Result(json: result), p.terminationStatus == 0 {
      e.record(g)
      if opened { lastWork = max(work, 0.002) }
    } else {
      let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
      let said = message.trimmingCharacters(in: .whitespacesAndNewlines)
      e.error = "the grower exited with status \(p.terminationStatus): \(said)"
    }
  }

  /// Waits for a growth under way; returns every growth of the run.
  func finish() -> [GrowthEvent] {
    idle.lock()
    defer { idle.unlock() }
    while busy { idle.wait() }
    return events
  }
}

/// A grower process (`--kill-growers`, the internal `--grower-target BYTES`): a
/// re-execution of this binary that opens the file, says so, grows it to the target
/// and prints the result, each a line on standard output.
enum GrowerProcess {
  static let openedLine = "opened"

  /// What a growth did, as the grower prints it.
  struct Result {
    var capacity: Int
    var movedEntries: Int
    var longestStep: Double
  }

  static func run(path: String, target: Int) -> Int32 {
    do {
      let file = try CacheFile(path: path, policy: OpenPolicy())
      // Written straight to the pipe (no buffering): the runner waits for the first line.
      FileHandle.standardOutput.write(Data((openedLine + "\n").utf8))
      let result = Result(try file.grow(toCapacity: target))
      FileHandle.standardOutput.write(Data((result.json + "\n").utf8))
      return 0
    } catch {
      FileHandle.standardError.write(Data("cache-stress grower: \(error)\n".utf8))
      return 1
    }
  }
}

extension GrowerProcess.Result {
  /// What `CacheFile.grow` returned.
  init(_ g: (capacity: Int, partitions: Int, movedEntries: Int, longestStepSeconds: Double)) {
    self.init(capacity: g.capacity, movedEntries: g.movedEntries, longestStep: g.longestStepSeconds)
  }

  /// The result a grower printed (`json`); nil for anything else.
  init?(json line: String) {
    guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
      let c = o["capacity"] as? Int, let m = o["moved_entries"] as? Int, let l = o["longest_step_s"] as? Double
    else { return nil }
    self.init(capacity: c, movedEntries: m, longestStep: l)
  }

  /// The result as the grower prints it: one JSON object.
  var json: String {
    var o = JSONObject()
    o["capacity"] = .int(capacity)
    o["moved_entries"] = .int(movedEntries)
    o["longest_step_s"] = .double(longestStep)
    return o.rendered
  }
}

/// Lines of a pipe, read as they come (blocking), for a child's few short lines.
final class LineReader {
  private let handle: FileHandle
  private var buffer = Data()

  init(_ handle: FileHandle) { self.handle = handle }

  /// The next line without its newline; nil at the end of the stream.
  func line() -> String? {
    while true {
      if let nl = buffer.firstIndex(of: UInt8(ascii: "\n")) {
        let line = String(decoding: buffer[buffer.startIndex..<nl], as: UTF8.self)
        buffer.removeSubrange(buffer.startIndex...nl)
        return line
      }
      let chunk = handle.availableData
      if chunk.isEmpty {
        guard !buffer.isEmpty else { return nil }
        defer { buffer.removeAll() }
        return String(decoding: buffer, as: UTF8.self)
      }
      buffer.append(chunk)
    }
  }
}
