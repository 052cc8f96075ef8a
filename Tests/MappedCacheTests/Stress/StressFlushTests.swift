import Dispatch
import SystemCalls
import Testing

@testable import cache_stress

/// A worker writes its results at once when one of its threads fails a check
/// (`ThreadLoop.flagFinding`, `RedisThreadLoop.note`: a signal of the board's `urgent`),
/// not only every flush interval: a SIGKILL soon after the finding cannot take it with it.
@Suite struct StressFlushTests {
  @Test func findingsFlushedAtOnceAreTheFirstAndEachPowerOfTwo() {
    let flushed = (0...20).filter { FleetMember.flushesFinding($0) }
    #expect(flushed == [1, 2, 4, 8, 16])
  }

  @Test(.timeLimit(.minutes(1)))
  func aSignalledFindingIsFlushedWithoutWaitingForTheInterval() {
    let wake = DispatchSemaphore(value: 0)
    let flushed = DispatchSemaphore(value: 0)
    let flushedBeforeDone = SeenMutex(false)
    let group = DispatchGroup()
    group.enter()
    DispatchQueue.global().async {
      // A thread that has just published a finding, then runs on until the flush.
      wake.signal()
      let seen = flushed.wait(timeout: .now() + 30) == .success
      flushedBeforeDone.withLock { $0 = seen }
      group.leave()
    }
    var flushes = 0
    // An hour's interval: only the signal can bring the flush, and only the group's end
    // (which signals too) the return.
    let done = FleetMember.flushUntilDone(group, coordinator: SystemCall.parentProcessID(), wake: wake, interval: 3600)
    {
      flushes += 1
      flushed.signal()
    }
    #expect(done)
    #expect(flushedBeforeDone.withLock { $0 }, "the flush came on the signal")
    #expect(flushes == 1)
  }
}
