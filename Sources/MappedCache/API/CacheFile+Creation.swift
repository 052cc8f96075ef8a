import Glibc
import SystemCalls

// What tools (`mapped-cache`) ask about a file before or after opening it, answered from
// the library's own knowledge of the format and of its checks, so that no tool keeps a
// copy of either.

extension CacheFile {
  /// How a regular file that never became a cache was left.
  public enum UnfinishedCreation: Sendable, Equatable {
    /// The file is empty: a process creating it stopped before writing anything, or
    /// someone made an empty file.
    case empty
    /// The file still starts with the creation marker, which a creating process writes
    /// first and replaces with the magic last: it was stopped or killed midway.
    case interrupted
  }

  /// Whether the regular file at `path` is an unfinished creation, and which kind; nil
  /// for any other file, a missing one, or one that cannot be read. Read without a lock:
  /// opening decides again under the creation lock, where `SharedCache(path:)` and
  /// `CacheFile(creating:)` take such a file over and lay it out, and `CacheFile(path:)`
  /// refuses it (`notACacheFile` for an empty one, `corrupted` for an interrupted one).
  public static func unfinishedCreation(at path: String) -> UnfinishedCreation? {
    guard let st = SystemCall.statIfPresent(path), (st.st_mode & S_IFMT) == S_IFREG else { return nil }
    if st.st_size == 0 { return .empty }
    guard let fd = try? SystemCall.open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY, mode: 0) else { return nil }
    defer { SystemCall.close(fd) }
    guard let first = try? SystemCall.pread(fd, count: 8, at: 0), first.count == 8 else { return nil }
    let word = first.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
    return word == Format.initialisingMagic ? .interrupted : nil
  }
}

extension OpenPolicy {
  /// The group the file at `path` belongs to, when this process is a member of it (its
  /// effective or a supplementary group): the `sharedGroup` under which a member opens a
  /// file that `sharedWithGroup(_:)` made for the group (another member's, writable by
  /// the group). The group's name, or its number when it has none; nil when the file is
  /// missing or belongs to a group this process is not in.
  public static func callersGroup(ofFileAt path: String) -> String? {
    guard let st = SystemCall.statIfPresent(path) else { return nil }
    let gid = st.st_gid
    guard SystemCall.effectiveGroupID() == gid || SystemCall.supplementaryGroups().contains(gid) else { return nil }
    return SystemCall.groupName(of: gid) ?? "\(gid)"
  }
}
