import Foundation
import SystemCalls

/// Where short-lived cache files go (a stress run's file and control directory, a
/// test's cache): /dev/shm when the machine has it (memory, where caches shared by a
/// host's processes usually live), else the temporary directory.
public enum ScratchFiles {
  /// /dev/shm, or the temporary directory (without a trailing slash).
  public static let directory: String = {
    var isDirectory: ObjCBool = false
    if FileManager.default.fileExists(atPath: "/dev/shm", isDirectory: &isDirectory) && isDirectory.boolValue {
      return "/dev/shm"
    }
    let tmp = NSTemporaryDirectory()
    return tmp.hasSuffix("/") ? String(tmp.dropLast()) : tmp
  }()

  /// A path nobody uses yet: `directory/prefix-PID-RANDOM` + `suffix`.
  public static func path(_ prefix: String, suffix: String = ".mcache") -> String {
    "\(directory)/\(prefix)-\(SystemCall.processID())-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))\(suffix)"
  }

  /// Creates a private directory (mode 0700) `directory/prefix-PID-XXXXXX`; its path.
  public static func makeDirectory(_ prefix: String) throws(SystemError) -> String {
    try SystemCall.makeTemporaryDirectory(prefix: "\(directory)/\(prefix)-\(SystemCall.processID())-")
  }
}
