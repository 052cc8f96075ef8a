import CacheTools
import Foundation
import SystemCalls

/// The counters one worker incarnation reports. Workers rewrite their file (atomically:
/// write a temporary file, then rename) every `WorkerTiming.flushInterval` and once more
/// at the end (`final`), so the coordinator can show progress and, when a worker is
/// SIGKILLed, still count what it did up to its last flush.
@dynamicMemberLookup
struct WorkerResult: Codable {
  var worker = 0
  var incarnation = 0
  var final = false
  var counters = Counters()
  subscript(dynamicMember field: KeyPath<Counters, UInt64>) -> UInt64 { counters[keyPath: field] }
  /// The first few error and corruption messages.
  var messages: [String] = []
  var getHist: [[UInt64]] = []
  var setHist: [[UInt64]] = []
  /// Operations per second of the run (nil in a result written before the first flush).
  var timeline: Timeline? = nil
  /// Operations (gets + sets) of each thread, by thread index.
  var threadOps: [UInt64] = []
}

/// The run's control directory: how the coordinator and its workers talk, with files only.
///
///     ready-<worker>.<incarnation>   a worker is prepared (keys, op streams, cache open)
///     go                             "<startNs> <endNs>" on CLOCK_MONOTONIC: run then, stop then
///     result-<worker>.<incarnation>.json   a worker's counters (see `WorkerResult`)
struct ControlDirectory {
  let path: String

  /// Creates a fresh private directory under /dev/shm (or the temporary directory).
  static func create() throws -> ControlDirectory {
    do { return ControlDirectory(path: try ScratchFiles.makeDirectory("cache-stress")) } catch {
      throw StressFailure("cannot create a control directory under \(ScratchFiles.directory): \(error.code.message)")
    }
  }

  func readyPath(_ w: Int, _ inc: Int) -> String { "\(path)/ready-\(w).\(inc)" }
  var goPath: String { "\(path)/go" }
  func resultPath(_ w: Int, _ inc: Int) -> String { "\(path)/result-\(w).\(inc).json" }

  func markReady(_ w: Int, _ inc: Int) throws { try writeAtomically(Data(), to: readyPath(w, inc)) }
  func isReady(_ w: Int, _ inc: Int) -> Bool { FileManager.default.fileExists(atPath: readyPath(w, inc)) }

  func writeGo(start: UInt64, end: UInt64) throws {
    try writeAtomically(Data("\(start) \(end)".utf8), to: goPath)
  }

  /// The window from the go file, or nil while there is none.
  func readGo() -> (start: UInt64, end: UInt64)? {
    guard let d = FileManager.default.contents(atPath: goPath) else { return nil }
    let parts = String(decoding: d, as: UTF8.self).split(separator: " ")
    guard parts.count == 2, let s = UInt64(parts[0]), let e = UInt64(parts[1]) else { return nil }
    return (s, e)
  }

  func writeResult(_ r: WorkerResult) throws { try writeJSON(r, to: resultPath(r.worker, r.incarnation)) }

  func readResult(_ w: Int, _ inc: Int) -> WorkerResult? { readJSON(WorkerResult.self, from: resultPath(w, inc)) }

  /// Writes `value` as JSON to `file`, atomically (a reader never sees half of it).
  func writeJSON<T: Encodable>(_ value: T, to file: String) throws {
    try writeAtomically(try JSONEncoder().encode(value), to: file)
  }

  /// The JSON value in `file`; nil while there is none (or it is not one).
  func readJSON<T: Decodable>(_ type: T.Type, from file: String) -> T? {
    guard let d = FileManager.default.contents(atPath: file) else { return nil }
    return try? JSONDecoder().decode(type, from: d)
  }

  func remove() { try? FileManager.default.removeItem(atPath: path) }

  private func writeAtomically(_ data: Data, to file: String) throws {
    let tmp = file + ".tmp"
    guard FileManager.default.createFile(atPath: tmp, contents: data) else {
      throw StressFailure("cannot write \(tmp)")
    }
    do { try SystemCall.rename(tmp, to: file) } catch {
      throw StressFailure("cannot rename \(tmp): \(error.code.message)")
    }
  }
}

/// A failure of the tool itself (not of the cache under test): printed, exit 1.
struct StressFailure: Error, CustomStringConvertible {
  var description: String
  init(_ s: String) { description = s }
}
