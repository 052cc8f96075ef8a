import Glibc
import Synchronization
import SystemCalls

/// One open, mapped cache file: owns the descriptor and the `MAP_SHARED` mapping,
/// and unmaps and closes them in `deinit`. This type and `MappedMemory` are the only
/// places that hold the mapping's raw address.
///
/// The mapping spans the file's most capacity (`Layout.maxCapacity`), not its size: the
/// bytes past the end of the file are address space only, never touched (a touch would
/// raise SIGBUS) until growth has extended the file and this handle has seen it
/// (`MappedMemory.refreshRouting`). So growth never moves a mapping under a reader.
final class MappedFile {
  let path: String
  let fd: Int32
  let base: UnsafeMutableRawPointer
  /// The file's size at open.
  let size: Int
  /// Bytes mapped: the most capacity, or the size where that much address space
  /// cannot be had (then this handle cannot follow growth, and says so).
  let mapped: Int
  let writable: Bool
  let device: UInt64
  let inode: UInt64
  /// The partition count this handle routes keys by (`MappedMemory.partitionCount`):
  /// private to the handle, shared by its threads.
  let routing: Routing
  /// The layout's partition limits, named by every `MappedMemory` and `PartitionMemory`
  /// of this handle.
  let limits: PartitionMemory.SharedLimits

  /// Maps `layout.fileSize` bytes of `fd` and reserves address space for
  /// `layout.maxCapacity`, so that the file can grow in place.
  init(path: String, fd: Int32, layout: Layout, writable: Bool, stat st: stat) throws(CacheError) {
    let (size, reserve) = (layout.fileSize, layout.maxCapacity)
    self.path = path
    self.fd = fd
    self.size = size
    self.writable = writable
    device = UInt64(st.st_dev)
    inode = UInt64(st.st_ino)
    var mapped = max(size, reserve)
    var base: UnsafeMutableRawPointer
    do {
      base = try SystemCall.mmap(fd, size: mapped, writable: writable)
    } catch {
      // Address space refused (an `RLIMIT_AS`): the file's own size still works.
      guard mapped > size, let b = try? SystemCall.mmap(fd, size: size, writable: writable) else {
        throw .system(error)
      }
      base = b
      mapped = size
    }
    self.base = base
    self.mapped = mapped
    routing = Routing(count: layout.partitionCount, layout: layout, mapped: mapped, fd: fd)
    limits = PartitionMemory.SharedLimits(PartitionMemory.Limits(layout: layout))
    // Huge pages where the file's memory can have them (a tmpfs mounted `huge=advise`,
    // or /dev/shm with `shmem_enabled` "advise"; a `huge=within_size` mount has them
    // anyway): fewer TLB misses on large tables. Refused or ignored elsewhere, harmlessly.
    SystemCall.adviseHugePages(base, size: mapped)
  }

  deinit {
    SystemCall.munmap(base, size: mapped)
    SystemCall.close(fd)
  }

  /// Whether the path now names another file than the one mapped (deleted or replaced).
  func isReplaced() -> Bool {
    guard let st = SystemCall.statIfPresent(path) else { return true }
    return UInt64(st.st_dev) != device || UInt64(st.st_ino) != inode
  }
}
