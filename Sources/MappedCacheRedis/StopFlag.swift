import Synchronization

/// A flag that tells a thread of the Redis tier to stop (a cluster tracker, a lease
/// renewer): set once, read on every turn of its loop.
final class StopFlag: Sendable {
  let value = Atomic<Bool>(false)
}
