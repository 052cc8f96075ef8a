import Glibc
import MappedCache
import SystemCalls

/// `mapped-cache create PATH [creation options] [--group NAME]` (`CreationOptions`)
enum CreateCommand {
  static func run(_ inv: Invocation) throws -> Int32 {
    let path = inv.argument("PATH")!
    let (o, typeName) = try CreationOptions.parse(inv)
    let group = inv.value("--group")
    if group?.isEmpty == true { throw inv.usageError("--group needs a group name") }

    // Refuse to touch anything already there (a cache or not): create makes new files
    // only, or finishes the creation of one whose creator stopped before it was done.
    let existing = SystemCall.lstatIfPresent(path)
    var interrupted = false
    if let st = existing {
      if (st.st_mode & S_IFMT) == S_IFDIR { throw CLIFailure.failed("\(path) is a directory") }
      interrupted = (st.st_mode & S_IFMT) == S_IFREG && CacheFile.unfinishedCreation(at: path) == .interrupted
      if (st.st_mode & S_IFMT) != S_IFREG || (st.st_size != 0 && !interrupted) {
        throw CLIFailure.failed("\(path) already exists; remove it first to create a new cache there")
      }
    }
    let file: CacheFile
    do {
      file = try CacheFile(
        creating: path, options: o, typeName: typeName,
        policy: OpenPolicy(verifyChecksumsOnRead: true, sharedGroup: group))
    } catch {
      if case .invalidArgument(let why) = error { throw inv.usageError(why) }
      throw CLIFailure(error)
    }
    guard file.wasCreated else {
      throw CLIFailure.failed("\(path) was created by another process at the same moment; left as it is")
    }
    let i = file.info
    let shape = "\(Units.bytes(i.capacity)) in \(i.partitionCount) partition\(i.partitionCount == 1 ? "" : "s")"
    let limits = "keys up to \(Units.bytes(i.maxKeySize)), values up to \(Units.bytes(i.maxValueSize))"
    Output.line(
      "created \(path): \(shape), \(limits)"
        + (interrupted ? " (in place of a creation that a process had left unfinished)" : "")
        + (group.map { "; shared with group \($0)" } ?? ""))
    return ExitCode.ok
  }
}
