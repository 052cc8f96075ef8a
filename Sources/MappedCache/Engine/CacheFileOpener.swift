import Glibc

/// Opens or creates a cache file. Creation is serialised with `flock` on the file so
/// that two processes creating one path at the same instant end with one valid cache,
/// and the final magic number is written last, so a half-initialised header is never
/// taken for a cache.
enum CacheFileOpener {
  struct Opened {
    var file: MappedFile
    var layout: Layout
    var header: HeaderFields
    var created: Bool
  }

  static func open(path: String, options: CacheOptions, policy: OpenPolicy,
                   typeFingerprint: UInt64, typeName: String) throws(CacheError) -> Opened {
    if let st = Sys.lstatIfPresent(path), (st.st_mode & S_IFMT) == S_IFLNK {
      throw .unsafeFile(path: path, reason: "it is a symbolic link")
    }
    var writable = !policy.readOnly
    if writable && policy.create && Sys.lstatIfPresent(path) == nil {
      // About to create: refuse bad creation options before a file exists, so a refused
      // creation leaves nothing behind. (An existing cache opens with its own parameters.)
      _ = try Layout(options: options)
    }
    var fd: Int32
    do {
      // O_NONBLOCK: opening a FIFO planted at the path for reading would otherwise block
      // until a writer came (no effect on regular files). O_NOCTTY: a terminal is never adopted.
      fd = try Sys.open(path, flags: (writable ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_NOCTTY | (policy.create && writable ? O_CREAT : 0),
                        mode: mode_t(options.mode & 0o777))
    } catch let e {
      if e.errno == ELOOP { throw .unsafeFile(path: path, reason: "it is a symbolic link") }
      if writable, e.errno == EACCES || e.errno == EROFS, Sys.statIfPresent(path) != nil,
         let ro = try? Sys.open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY, mode: 0) {
        fd = ro
        writable = false
      } else {
        throw .system(e)
      }
    }
    var keepFD = false
    defer { if !keepFD { Sys.close(fd) } }

    do {
      var st = try Sys.fstat(fd)
      guard (st.st_mode & S_IFMT) == S_IFREG else { throw CacheError.notACacheFile(path: path) }
      if !policy.allowOtherOwner, st.st_uid != Sys.effectiveUserID() {
        throw CacheError.unsafeFile(path: path, reason: "it is owned by uid \(st.st_uid), not by this user")
      }
      if !policy.allowGroupOrWorldWritable, st.st_mode & 0o022 != 0 {
        throw CacheError.unsafeFile(path: path, reason: "group or others can write it (mode \(String(st.st_mode & 0o777, radix: 8)))")
      }
      try Sys.flock(fd, LOCK_EX)
      defer { _ = try? Sys.flock(fd, LOCK_UN) }
      st = try Sys.fstat(fd)
      var created = false
      let size = Int(st.st_size)
      if size == 0 {
        guard writable && policy.create else { throw CacheError.notACacheFile(path: path) }
        try initialise(fd: fd, path: path, options: options, typeFingerprint: typeFingerprint,
                       typeName: typeName, wasEmpty: true)
        created = true
      } else {
        let first = try Sys.pread(fd, count: 8, at: 0)
        if HeaderFields(bytes: first + [UInt8](repeating: 0, count: 248)).magic == Format.initialisingMagic {
          guard writable && policy.create else { throw CacheError.corrupted(path: path, reason: "its creation was interrupted") }
          try initialise(fd: fd, path: path, options: options, typeFingerprint: typeFingerprint,
                         typeName: typeName, wasEmpty: false)
          created = true
        }
      }
      st = try Sys.fstat(fd)
      let bytes = try Sys.pread(fd, count: 256, at: 0)
      let h = HeaderFields(bytes: bytes)
      guard bytes.count == 256, h.magic == Format.magic else { throw CacheError.notACacheFile(path: path) }
      guard h.version == Format.version else {
        throw CacheError.incompatibleFormat(path: path, reason: "format version \(h.version), this library reads \(Format.version)")
      }
      guard HeaderFields.fingerprintMatches(bytes) else {
        throw CacheError.corrupted(path: path, reason: "the header's layout fingerprint does not match its fields")
      }
      let layout: Layout
      do {
        layout = try Layout(header: h, actualFileSize: Int(st.st_size))
      } catch {
        throw CacheError.corrupted(path: path, reason: error.reason)
      }
      if typeFingerprint != 0, h.typeFingerprint != 0, h.typeFingerprint != typeFingerprint {
        throw CacheError.typeMismatch(path: path, expected: typeName, found: h.typeName)
      }
      let file = try MappedFile(path: path, fd: fd, size: layout.fileSize, writable: writable, stat: st)
      keepFD = true
      return Opened(file: file, layout: layout, header: h, created: created)
    } catch let e as CacheError {
      throw e
    } catch let e as SystemError {
      throw .system(e)
    } catch {
      throw .invalidArgument("\(error)")
    }
  }

  /// Lays out a new cache in `fd` (held under `flock` by the caller).
  private static func initialise(fd: Int32, path: String, options: CacheOptions, typeFingerprint: UInt64,
                                 typeName: String, wasEmpty: Bool) throws(CacheError) {
    let layout = try Layout(options: options)
    do {
      // Mark the file as ours before it has its final size: an interrupted creation is
      // recognised and redone, while a foreign file is never mistaken for one.
      var marker = [UInt8](repeating: 0, count: 8)
      for i in 0..<8 { marker[i] = UInt8(truncatingIfNeeded: Format.initialisingMagic >> (8 * UInt64(i))) }
      do {
        try Sys.pwrite(fd, marker, at: 0)
      } catch {
        // A full file system fails here already (the marker needs a block).
        if error.errno == ENOSPC || error.errno == EFBIG || error.errno == EDQUOT {
          throw CacheError.diskFull(path: path, bytes: layout.fileSize)
        }
        throw CacheError.system(error)
      }
      do {
        try Sys.fallocate(fd, size: layout.fileSize)
      } catch {
        try? Sys.ftruncate(fd, size: 0)
        if error.errno == ENOSPC || error.errno == EFBIG || error.errno == EDQUOT {
          throw CacheError.diskFull(path: path, bytes: layout.fileSize)
        }
        throw CacheError.system(error)
      }
      let st = try Sys.fstat(fd)
      if Int(st.st_size) != layout.fileSize { try Sys.ftruncate(fd, size: layout.fileSize) }
      let base = try Sys.mmap(fd, size: layout.fileSize, writable: true)
      defer { Sys.munmap(base, size: layout.fileSize) }
      let header = HeaderFields(layout: layout, typeFingerprint: typeFingerprint, typeName: typeName,
                                createdMs: Sys.wallClockMilliseconds())
      // Everything but the logs must read as zero (a file left by an interrupted creation
      // is zeroed first); log bytes are only reached through slots.
      MappedMemory.writeHeader(base, image: header.encoded(), zeroing: wasEmpty ? 0 : layout.logOffset,
                               magic: Format.magic)
    } catch let e as CacheError {
      throw e
    } catch let e as SystemError {
      throw .system(e)
    } catch {
      throw .invalidArgument("\(error)")
    }
  }
}
