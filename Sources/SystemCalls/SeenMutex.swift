import Synchronization

/// The toolchain's `Mutex`, its critical sections told to ThreadSanitizer in builds for
/// it (`-Xswiftc -DMC_TSAN`, as `scripts/sanitizers.sh` builds): the `Synchronization`
/// module is not built for TSan, so TSan sees no order between two sections under one
/// lock and reports each pair that touches the same memory as a race. In every other
/// build it is the `Mutex` and nothing more.
///
/// Each section starts with an acquire of the lock's address and ends with a release of
/// it, inside the lock: TSan then orders a section after the one before it, as the lock
/// does.
public struct SeenMutex<Value: ~Copyable>: ~Copyable {
  @usableFromInline let mutex: Mutex<Value>

  /// A lock guarding `value`.
  @inlinable
  public init(_ value: consuming sending Value) { mutex = Mutex(value) }

  /// `Mutex.withLock`, seen by ThreadSanitizer in its builds.
  @inlinable @inline(__always)
  public borrowing func withLock<Result: ~Copyable, E: Error>(
    _ body: (inout sending Value) throws(E) -> sending Result
  ) throws(E) -> sending Result {
    #if MC_TSAN
      // The lock's own address, taken before the section: an address of the guarded
      // value would be an access to it that TSan sees before the acquire.
      let address = withUnsafePointer(to: mutex) { UnsafeRawPointer($0) }
    #endif
    return try mutex.withLock { (value: inout sending Value) throws(E) -> sending Result in
      #if MC_TSAN
        tsanAcquire(address)
        defer { tsanRelease(address) }
      #endif
      return try body(&value)
    }
  }
}

extension SeenMutex: Sendable where Value: ~Copyable {}

#if MC_TSAN
  /// ThreadSanitizer's annotations (its runtime's interface, `tsan_interface.h`).
  @usableFromInline @_silgen_name("__tsan_acquire") func tsanAcquire(_ address: UnsafeRawPointer)
  @usableFromInline @_silgen_name("__tsan_release") func tsanRelease(_ address: UnsafeRawPointer)
#endif
