import Glibc
import SystemCalls

/// One open, mapped cache file: owns the descriptor and the `MAP_SHARED` mapping,
/// and unmaps and closes them in `deinit`. This type and `MappedMemory` are the only
/// places that hold the mapping's raw address.
final class MappedFile {
  let path: String
  let fd: Int32
  let base: UnsafeMutableRawPointer
  let size: Int
  let writable: Bool
  let device: UInt64
  let inode: UInt64

  init(path: String, fd: Int32, size: Int, writable: Bool, stat st: stat) throws(CacheError) {
    self.path = path
    self.fd = fd
    self.size = size
    self.writable = writable
    device = UInt64(st.st_dev)
    inode = UInt64(st.st_ino)
    do {
      base = try Sys.mmap(fd, size: size, writable: writable)
    } catch {
      throw .system(error)
    }
    // Huge pages where the file's memory can have them (a tmpfs mounted `huge=advise`,
    // or /dev/shm with `shmem_enabled` "advise"; a `huge=within_size` mount has them
    // anyway): fewer TLB misses on large tables. Refused or ignored elsewhere, harmlessly.
    Sys.adviseHugePages(base, size: size)
  }

  deinit {
    Sys.munmap(base, size: size)
    Sys.close(fd)
  }

  /// Whether the path now names another file than the one mapped (deleted or replaced).
  func isReplaced() -> Bool {
    guard let st = Sys.statIfPresent(path) else { return true }
    return UInt64(st.st_dev) != device || UInt64(st.st_ino) != inode
  }
}
