/// How writers exclude each other across processes.
public enum LockMode: Sendable, Equatable {
  /// A lock word in the file: an atomic compare-and-swap when uncontended, a shared
  /// futex to wait, and each process's OFD byte lock as the witness that its holder
  /// is alive. The default.
  case sharedWord
  /// `flock(LOCK_EX)` on the handle's own descriptor around every write: two system
  /// calls per write; the kernel releases it when its holder dies.
  case flock
}
