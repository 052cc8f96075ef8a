import Foundation
import Synchronization
import SystemCalls

/// Renews a lease every third of its life on a thread of its own (not a task: a
/// cooperative pool kept busy by blocking work would starve it) until cancelled.
final class LeaseRenewer: Sendable {
  private let stopped = StopFlag()

  init(_ client: RedisClient, lease: [UInt8], owner: [UInt8], milliseconds: Int64) {
    let period = UInt64(max(1, milliseconds)) * 1_000_000 / 3
    Thread.detachNewThread { [stopped] in
      var next = Clock.nanoseconds() &+ period
      while !stopped.value.load(ordering: .acquiring) {
        let now = Clock.nanoseconds()
        if now < next {
          Clock.sleep(nanoseconds: min(5_000_000, next - now))
          continue
        }
        FleetLease.renew(client, lease: lease, owner: owner, milliseconds: milliseconds)
        next = Clock.nanoseconds() &+ period
      }
    }
  }

  func cancel() { stopped.value.store(true, ordering: .releasing) }
}
