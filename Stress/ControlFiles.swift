import Foundation
import Glibc

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
    var isDir: ObjCBool = false
    let base =
      FileManager.default.fileExists(atPath: "/dev/shm", isDirectory: &isDir) && isDir.boolValue
      ? "/dev/shm" : NSTemporaryDirectory()
    var template = Array("\(base)/cache-stress-\(getpid())-XXXXXX".utf8CString)
    let made: String? = template.withUnsafeMutableBufferPointer { p in
      mkdtemp(p.baseAddress!).map { String(cString: $0) }
    }
    guard let made else {
      throw StressFailure("cannot create a control directory under \(base): \(String(cString: strerror(errno)))")
    }
    return ControlDirectory(path: made)
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

  func writeResult(_ r: WorkerResult) throws {
    try writeAtomically(try JSONEncoder().encode(r), to: resultPath(r.worker, r.incarnation))
  }

  func readResult(_ w: Int, _ inc: Int) -> WorkerResult? {
    guard let d = FileManager.default.contents(atPath: resultPath(w, inc)) else { return nil }
    return try? JSONDecoder().decode(WorkerResult.self, from: d)
  }

  func remove() { try? FileManager.default.removeItem(atPath: path) }

  private func writeAtomically(_ data: Data, to file: String) throws {
    let tmp = file + ".tmp"
    guard FileManager.default.createFile(atPath: tmp, contents: data) else {
      throw StressFailure("cannot write \(tmp)")
    }
    guard rename(tmp, file) == 0 else {
      throw StressFailure("cannot rename \(tmp): \(String(cString: strerror(errno)))")
    }
  }
}

/// A failure of the tool itself (not of the cache under test): printed, exit 1.
struct StressFailure: Error, CustomStringConvertible {
  var description: String
  init(_ s: String) { description = s }
}
