import CacheTools
import Foundation
import SystemCalls

/// Where tests put their cache files, and where the package's binaries are.
public enum TestFiles {
  /// A fresh cache path under /dev/shm (or the temporary directory), `mctest-TAG-PID-…`
  /// and `suffix`; remove it with `cleanup`.
  public static func tempPath(_ tag: String = "t", suffix: String = ".mcache") -> String {
    ScratchFiles.path("mctest-\(tag)", suffix: suffix)
  }

  /// Removes a test's files (and a near cache's holder lock file beside each).
  public static func cleanup(_ paths: String...) {
    for path in paths {
      try? SystemCall.unlink(path)
      try? SystemCall.unlink(path + ".holder")
    }
  }

  /// The repository's root (this file is Tests/TestSupport/TestFiles.swift), for the
  /// sources some tests build or run (Tests/CABI, Tests/FaultInjection, scripts/).
  public static let repository: String = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().path

  /// The directory holding the built binaries (the test runner sits beside them).
  public static let binDir: String = {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var dir = (exe as NSString).deletingLastPathComponent
    // On Linux the runner is `<bin>/MappedCachePackageTests.xctest`.
    while !dir.isEmpty && dir != "/" && !FileManager.default.fileExists(atPath: dir + "/mc-test-helper") {
      dir = (dir as NSString).deletingLastPathComponent
    }
    return dir
  }()

  /// The path of one of the package's binaries (`mc-test-helper`, `cache-stress`, `mapped-cache`).
  public static func binary(_ name: String) -> String { binDir + "/" + name }
}

/// Polls `condition` every millisecond for up to `timeout` seconds; its last answer.
public func eventually(_ timeout: Double = 5, _ condition: () throws -> Bool) rethrows -> Bool {
  let end = Clock.seconds() + timeout
  while Clock.seconds() < end {
    if try condition() { return true }
    SystemCall.sleep(microseconds: 1000)
  }
  return try condition()
}

/// `eventually` for async tests: it sleeps as a task, so that the tasks it waits for get
/// the cooperative pool's threads (a blocking wait can hold one of only two).
public func eventuallyAsync(_ timeout: Double = 5, _ condition: () throws -> Bool) async throws -> Bool {
  let end = Clock.seconds() + timeout
  while Clock.seconds() < end {
    if try condition() { return true }
    try await Task.sleep(nanoseconds: 1_000_000)
  }
  return try condition()
}
