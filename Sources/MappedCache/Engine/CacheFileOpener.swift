import Glibc
import SystemCalls

/// Opens or creates a cache file, in steps that each check one thing:
///
/// 1. `refuseSymlink`: the path itself must not be a symbolic link.
/// 2. `openDescriptor`: open (creating when allowed), falling back to read-only when
///    the caller may read but not write the file.
/// 3. `checkOwnershipAndMode`: a regular file, owned by this user and writable by no
///    one else, unless the policy allows otherwise.
/// 4. `createOrTakeOver`, under an exclusive `flock`: lay out an empty file, or redo a
///    creation that a process left unfinished (it died holding the `flock`, which the
///    kernel then released). A creation that fails (no space, say) removes the file if
///    this call made it, so a failed creation leaves nothing at the path; an opener that
///    was waiting for the `flock` on the removed file finds the path no longer names it
///    and opens again.
/// 5. `readHeader`: magic, version, layout fingerprint, sizes, value type.
/// 5b. `reserveHoles`: for writing, allocate the blocks of an existing file copied sparse.
/// 6. map the file (`MappedFile`).
///
/// Creation is serialised by the `flock`, so two processes creating one path at the
/// same instant end with one valid cache, and the final magic number is published
/// last, so a half-initialised header is never taken for a cache: until then the file
/// starts with `Format.initialisingMagic`, which marks it as an unfinished creation
/// that any later creator takes over.
enum CacheFileOpener {
  struct Opened {
    var file: MappedFile
    var layout: Layout
    var header: HeaderFields
    var created: Bool
  }

  /// Opens found the path naming another file after they took the `flock` (a failed
  /// creator removed it, or it was replaced) before the last opens what it has.
  static let reopenAttempts = 4

  static func open(
    path: String, options: CacheOptions, policy: OpenPolicy,
    typeFingerprint: UInt64, typeName: String
  ) throws(CacheError) -> Opened {
    for attempt in 1...reopenAttempts {
      let opened = try openOnce(
        path: path, options: options, policy: policy, typeFingerprint: typeFingerprint,
        typeName: typeName, lastAttempt: attempt == reopenAttempts)
      if let opened { return opened }
    }
    preconditionFailure("the last attempt returns or throws")
  }

  /// One open; nil when the path named another file once this call held the `flock` on
  /// its descriptor (and this is not the last attempt).
  private static func openOnce(
    path: String, options: CacheOptions, policy: OpenPolicy,
    typeFingerprint: UInt64, typeName: String, lastAttempt: Bool
  ) throws(CacheError) -> Opened? {
    try refuseSymlink(path)
    let group = try policy.sharedGroup.map { name throws(CacheError) in try SharedGroup(name) }
    if !policy.readOnly && policy.create && SystemCall.lstatIfPresent(path) == nil {
      // About to create: refuse bad creation options before a file exists, so a refused
      // creation leaves nothing behind. (An existing cache opens with its own parameters.)
      _ = try Layout(options: options)
      if let group, !group.callerMayGiveFiles {
        throw .unsafeFile(
          path: path,
          reason: "it would be shared with group \(group.name), and only its members "
            + "(or root) may give a file to a group")
      }
    }
    let (fd, writable, made) = try openDescriptor(path, policy: policy, mode: options.mode)
    var keepFD = false
    defer { if !keepFD { SystemCall.close(fd) } }
    // A file this call made is removed if it fails before the cache is laid out.
    var laidOut = !made
    defer { if !laidOut { removeUnfinished(fd, path: path) } }
    try checkOwnershipAndMode(fd, path: path, policy: policy, group: group)

    try system { () throws(SystemError) in try SystemCall.flock(fd, LOCK_EX) }
    defer { _ = try? SystemCall.flock(fd, LOCK_UN) }
    var st = try system { () throws(SystemError) in try SystemCall.fstat(fd) }
    if !pathNames(path, st) {
      laidOut = true  // not this call's to remove any more
      // A file no longer at its path is no cache anyone else can open: after the last
      // try, an error rather than a cache whose writes nobody sees.
      if lastAttempt { throw .fileReplaced(path: path) }
      return nil
    }
    let created = try createOrTakeOver(
      fd, path: path, canCreate: writable && policy.create, options: options, group: group,
      type: (typeFingerprint, typeName))
    laidOut = true
    st = try system { () throws(SystemError) in try SystemCall.fstat(fd) }
    let (header, layout) = try readHeader(
      fd, path: path, fileSize: Int(st.st_size),
      typeFingerprint: typeFingerprint, typeName: typeName)
    if writable && !created { try reserveHoles(fd, path: path, st: st, size: layout.fileSize) }
    let file = try MappedFile(path: path, fd: fd, layout: layout, writable: writable, stat: st)
    keepFD = true
    return Opened(file: file, layout: layout, header: header, created: created)
  }

  /// After a failed creation by this call: removes the file at `path` if it is still the
  /// one `fd` opened and holds nothing but this library's unfinished creation (empty, zeros
  /// where the magic goes, or the creation marker: never another program's data). Under
  /// the `flock`, so that an opener laying the file out meanwhile is waited for and its
  /// cache kept; openers waiting for the `flock` then find the path gone and open again.
  private static func removeUnfinished(_ fd: Int32, path: String) {
    guard (try? SystemCall.flock(fd, LOCK_EX)) != nil else { return }
    defer { _ = try? SystemCall.flock(fd, LOCK_UN) }
    guard let st = try? SystemCall.fstat(fd), pathNames(path, st) else { return }
    if st.st_size > 0 {
      guard let first = try? SystemCall.pread(fd, count: 8, at: 0), first.count == 8,
        [0, Format.initialisingMagic].contains(HeaderFields(bytes: first + [UInt8](repeating: 0, count: 248)).magic)
      else { return }
    }
    try? SystemCall.unlink(path)
  }

  /// Whether `path` names the file `st` describes (the same device and inode).
  private static func pathNames(_ path: String, _ st: stat) -> Bool {
    guard let now = SystemCall.lstatIfPresent(path) else { return false }
    return now.st_dev == st.st_dev && now.st_ino == st.st_ino
  }

  // MARK: Steps

  /// Step 1. `O_NOFOLLOW` refuses a link too (ELOOP, see `openDescriptor`); this check
  /// gives the clearer message in the common case.
  private static func refuseSymlink(_ path: String) throws(CacheError) {
    if let st = SystemCall.lstatIfPresent(path), (st.st_mode & S_IFMT) == S_IFLNK {
      throw .unsafeFile(path: path, reason: "it is a symbolic link")
    }
  }

  /// Step 2. Returns the descriptor, whether it is open for writing, and whether this
  /// call made the file (`O_EXCL` decides between two creators): an existing file this
  /// user may read but not write (its permissions, a read-only file system) opens
  /// read-only, and the handle then refuses writes with `CacheError.readOnly`.
  private static func openDescriptor(
    _ path: String, policy: OpenPolicy,
    mode: UInt32
  ) throws(CacheError) -> (fd: Int32, writable: Bool, made: Bool) {
    let writable = !policy.readOnly
    let creating = policy.create && writable
    // O_NONBLOCK: opening a FIFO planted at the path for reading would otherwise block
    // until a writer came (no effect on regular files). O_NOCTTY: a terminal is never adopted.
    let flags = (writable ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_NOCTTY
    do throws(SystemError) {
      if creating, SystemCall.lstatIfPresent(path) == nil {
        do throws(SystemError) {
          let fd = try SystemCall.open(path, flags: flags | O_CREAT | O_EXCL, mode: mode_t(mode & 0o777))
          pauseForTest(at: "opened")
          return (fd, writable, true)
        } catch {
          // EEXIST: another creator made it first; open theirs.
          guard error.code.rawValue == EEXIST else { throw error }
        }
      }
      return (
        try SystemCall.open(path, flags: flags | (creating ? O_CREAT : 0), mode: mode_t(mode & 0o777)), writable, false
      )
    } catch {
      if error.code == .tooManySymbolicLinks { throw .unsafeFile(path: path, reason: "it is a symbolic link") }
      if writable, error.code == .permissionDenied || error.code == .readOnlyFileSystem,
        SystemCall.statIfPresent(path) != nil,
        let ro = try? SystemCall.open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY, mode: 0)
      {
        return (ro, false, false)
      }
      throw .system(error)
    }
  }

  /// Step 3. Files of other users, and files that others may write, could have been
  /// planted or be changed under us by someone this process does not trust. A file of
  /// the policy's shared group may be another user's and writable by the group (see
  /// `OpenPolicy.sharedGroup`); nothing makes an others-writable file acceptable but
  /// `allowGroupOrWorldWritable`.
  private static func checkOwnershipAndMode(
    _ fd: Int32, path: String, policy: OpenPolicy,
    group: SharedGroup?
  ) throws(CacheError) {
    let st = try system { () throws(SystemError) in try SystemCall.fstat(fd) }
    guard (st.st_mode & S_IFMT) == S_IFREG else { throw .notACacheFile(path: path) }
    let shared = group.map { st.st_gid == $0.id } ?? false
    let mode = String(st.st_mode & 0o777, radix: 8)
    if !policy.allowOtherOwner, !shared, st.st_uid != SystemCall.effectiveUserID() {
      let hint = group.map { "; it belongs to gid \(st.st_gid), not to the shared group \($0.name)" } ?? ""
      throw .unsafeFile(path: path, reason: "it is owned by uid \(st.st_uid), not by this user\(hint)")
    }
    if !policy.allowGroupOrWorldWritable {
      if st.st_mode & 0o002 != 0 { throw .unsafeFile(path: path, reason: "others can write it (mode \(mode))") }
      if st.st_mode & 0o020 != 0, !shared {
        let hint =
          group.map { ", and it belongs to gid \(st.st_gid), not to the shared group \($0.name)" }
          ?? " (OpenPolicy.sharedWithGroup trusts one group)"
        throw .unsafeFile(path: path, reason: "its group can write it (mode \(mode))\(hint)")
      }
    }
  }

  /// Step 4, under the `flock`: an empty file is laid out; a file whose creation was
  /// interrupted (it starts with the initialising marker) is laid out again. Returns
  /// whether this call made the cache. Without `canCreate`, both are refused. `type`:
  /// the stored type's fingerprint and name, written into a file laid out here.
  private static func createOrTakeOver(
    _ fd: Int32, path: String, canCreate: Bool, options: CacheOptions, group: SharedGroup?,
    type: (fingerprint: UInt64, name: String)
  ) throws(CacheError) -> Bool {
    let (typeFingerprint, typeName) = type
    let size = Int(try system { () throws(SystemError) in try SystemCall.fstat(fd) }.st_size)
    let wasEmpty: Bool
    if size == 0 {
      guard canCreate else { throw .notACacheFile(path: path) }
      pauseForTest(at: "locked")
      wasEmpty = true
    } else {
      let first = try system { () throws(SystemError) in try SystemCall.pread(fd, count: 8, at: 0) }
      guard first.count == 8,
        HeaderFields(bytes: first + [UInt8](repeating: 0, count: 248)).magic == Format.initialisingMagic
      else { return false }
      guard canCreate else { throw .corrupted(path: path, reason: "its creation was interrupted") }
      wasEmpty = false
    }
    if let group { try give(fd, path: path, to: group, mode: options.mode) }
    try initialise(
      fd: fd, path: path, options: options, typeFingerprint: typeFingerprint,
      typeName: typeName, wasEmpty: wasEmpty)
    return true
  }

  /// Before laying a file out under a shared-group policy: the file goes to the group,
  /// with the group's bits of `mode` (read and write when it gives none) and never
  /// write for others, set exactly (no umask). Only for a file this user owns: one of
  /// another user's, being taken over, keeps the owner's choice.
  private static func give(_ fd: Int32, path: String, to group: SharedGroup, mode: UInt32) throws(CacheError) {
    let st = try system { () throws(SystemError) in try SystemCall.fstat(fd) }
    guard st.st_uid == SystemCall.effectiveUserID() else { return }
    var bits = mode_t(mode & 0o777)
    if bits & 0o070 == 0 { bits |= 0o060 }
    bits &= ~0o002
    if st.st_gid != group.id {
      do { try SystemCall.changeGroup(fd, to: group.id) } catch {
        throw .unsafeFile(path: path, reason: "it cannot be given to group \(group.name) (\(error.code))")
      }
    }
    try system { () throws(SystemError) in try SystemCall.changeMode(fd, to: bits) }
  }

  /// Step 5: the header must be a finished one of this format whose fields agree with
  /// each other, with the file's size, and with the value type asked for.
  private static func readHeader(
    _ fd: Int32, path: String, fileSize: Int, typeFingerprint: UInt64,
    typeName: String
  ) throws(CacheError) -> (HeaderFields, Layout) {
    // Line 6 too: the grown size and partition count.
    let bytes = try system { () throws(SystemError) in try SystemCall.pread(fd, count: 512, at: 0) }
    let h = HeaderFields(bytes: bytes)
    guard bytes.count == 512, h.magic == Format.magic else { throw .notACacheFile(path: path) }
    guard h.version == Format.version else {
      if h.version == Format.previousVersion {
        throw .incompatibleFormat(
          path: path,
          reason: "format version 4 (one index for the whole file); this library reads \(Format.version). "
            + "Copy its entries into a new file with `mapped-cache migrate \(path) NEW`")
      }
      throw .incompatibleFormat(path: path, reason: "format version \(h.version), this library reads \(Format.version)")
    }
    guard HeaderFields.fingerprintMatches(bytes) else {
      throw .corrupted(path: path, reason: "the header's layout fingerprint does not match its fields")
    }
    let layout: Layout
    do {
      layout = try Layout(header: h, actualFileSize: fileSize)
    } catch {
      throw .corrupted(path: path, reason: error.reason)
    }
    if typeFingerprint != 0, h.typeFingerprint != 0, h.typeFingerprint != typeFingerprint {
      throw .typeMismatch(path: path, expected: typeName, found: h.typeName)
    }
    return (h, layout)
  }

  /// Step 5b, for a writable open of an existing cache: a file with fewer blocks than
  /// bytes has holes (copied with `cp --sparse`, restored from an archive); a store
  /// into one on a full file system would raise SIGBUS, so they are allocated now, and
  /// a file system with no room for them is `diskFull` at open instead.
  private static func reserveHoles(_ fd: Int32, path: String, st: stat, size: Int) throws(CacheError) {
    guard Int(st.st_blocks) * 512 < size else { return }
    do {
      try SystemCall.allocateHoles(fd, size: size)
    } catch {
      if error.code.rawValue == EOPNOTSUPP { return }  // nothing better to do there
      throw spaceError(error, path: path, bytes: size)
    }
  }

  // MARK: Creation

  /// Lays out a new cache in `fd` (held under `flock` by the caller), in the order that
  /// makes an interruption at any point recognisable: the marker first, then the blocks,
  /// then the header, then the magic.
  private static func initialise(
    fd: Int32, path: String, options: CacheOptions, typeFingerprint: UInt64,
    typeName: String, wasEmpty: Bool
  ) throws(CacheError) {
    let layout = try Layout(options: options)
    // Mark the file as ours before it has its final size: an interrupted creation is
    // recognised and redone, while a foreign file is never mistaken for one. On a full
    // file system this fails already (the marker needs a block).
    var marker = [UInt8](repeating: 0, count: 8)
    for i in 0..<8 { marker[i] = UInt8(truncatingIfNeeded: Format.initialisingMagic >> (8 * UInt64(i))) }
    do {
      try SystemCall.pwrite(fd, marker, at: 0)
    } catch {
      throw spaceError(error, path: path, bytes: layout.fileSize)
    }
    pauseForTest(at: "marked")
    do {
      try SystemCall.fallocate(fd, size: layout.fileSize)
    } catch {
      try? SystemCall.ftruncate(fd, size: 0)
      throw spaceError(error, path: path, bytes: layout.fileSize)
    }
    try system { () throws(SystemError) in
      if Int(try SystemCall.fstat(fd).st_size) != layout.fileSize {
        try SystemCall.ftruncate(fd, size: layout.fileSize)
      }
    }
    pauseForTest(at: "allocated")
    let header = HeaderFields(
      layout: layout, typeFingerprint: typeFingerprint, typeName: typeName,
      createdMs: SystemCall.wallClockMilliseconds())
    let base = try system { () throws(SystemError) in try SystemCall.mmap(fd, size: layout.fileSize, writable: true) }
    defer { SystemCall.munmap(base, size: layout.fileSize) }
    // A file being created again must read as zero everywhere but the logs (log bytes are
    // only reached through slots and log positions); the "header" test pause splits the
    // image's copy.
    MappedMemory.writeHeader(
      base, image: header.encoded(), zeroing: wasEmpty ? 0 : layout.headerBytes,
      midway: { pauseForTest(at: "header") })
    for p in 0..<layout.partitionCount { MappedMemory.formatPartition(base, layout: layout, partition: p) }
    pauseForTest(at: "unpublished")
    MappedMemory.publishMagic(base, Format.magic)
  }

  // MARK: Groups

  /// The group of `OpenPolicy.sharedGroup`, resolved once per open.
  struct SharedGroup {
    var name: String
    var id: gid_t

    /// Looks the group up by name (then, for digits only, as a numeric ID).
    init(_ name: String) throws(CacheError) {
      self.name = name
      if let gid = SystemCall.groupID(named: name) {
        id = gid
      } else if !name.isEmpty, name.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let n = gid_t(name) {
        id = n
      } else {
        throw .invalidArgument("there is no group named '\(name)' (OpenPolicy.sharedGroup)")
      }
    }

    /// Root, or a member of the group (as effective or supplementary group): those
    /// whom the kernel lets give a file to it.
    var callerMayGiveFiles: Bool {
      SystemCall.effectiveUserID() == 0 || SystemCall.effectiveGroupID() == id
        || SystemCall.supplementaryGroups().contains(id)
    }
  }

  // MARK: Errors and test hooks

  /// A failure to reserve space: `diskFull` when the file system (or the file size
  /// limit, or a quota) is what said no; otherwise (EIO, say) the system error, naming
  /// the file, since the call alone ("pwrite") does not say which.
  static func spaceError(_ e: SystemError, path: String, bytes: Int) -> CacheError {
    if e.code.isOutOfSpace { return .diskFull(path: path, bytes: bytes) }
    return .system(SystemError(errno: e.errno, operation: "\(e.operation) (reserving \(path))"))
  }

  /// Runs system calls, reporting their failure as `CacheError.system`.
  private static func system<T>(_ body: () throws(SystemError) -> T) throws(CacheError) -> T {
    do { return try body() } catch { throw .system(error) }
  }

  /// Test hook: a process whose environment has `MC_TEST_CREATE_PAUSE=STEP` stops
  /// itself (SIGSTOP) when its creation of a file reaches STEP, so that a test can
  /// SIGKILL it at exactly that point. The steps, in order: `opened` (the file was just
  /// made, empty, before the `flock`), `locked` (under the `flock`, still empty),
  /// `marked` (the initialising marker written, no blocks yet), `allocated` (full
  /// size, no header), `header` (half the header written), `unpublished` (the whole
  /// header but not the magic). Reached only while creating: opening a finished cache
  /// never looks at the variable.
  private static func pauseForTest(at step: String) {
    guard SystemCall.environment("MC_TEST_CREATE_PAUSE") == step else { return }
    SystemCall.stopSelf()
  }
}
