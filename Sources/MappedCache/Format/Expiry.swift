/// Expiry as the engine passes it around (an *expiry word*): absolute wall-clock
/// milliseconds in bits 0..47 (0 = never) and, in bits 48..53, the entry's *horizon*:
/// the bit length `k` of the time it had left when written (so it had less than `2^k`
/// ms). A record stores it in 48 bits (`RecordFormat`).
///
/// The rule for clocks that disagree (a process whose clock is far ahead or behind, or
/// a host clock stepped back after entries were written): an entry is expired for a
/// reader when its expiry is past by the reader's clock, *or* when it lies further
/// ahead of the reader's clock than its horizon plus `aheadTolerance`, which no honest
/// write could have made: it was stamped by a clock ahead of the reader's. Such an entry
/// reads as a miss (a miss is always safe in a cache; a stale hit is not), is reported
/// expired to `allowingExpired` reads, and is reclaimed by the sweeper and eviction like
/// any expired one. So no entry with an expiry outlives, in any process's view, twice
/// its time to live plus 2 s, whatever clock wrote it; one written by a clock behind is
/// simply past. Skews within 2 s change nothing.
enum Expiry {
  /// Clock skew between processes (or a step back) that is believed without question.
  static let aheadToleranceMilliseconds: UInt64 = 2_000
  static let horizonShift: UInt64 = 48
  static let horizonMask: UInt64 = 0x3F << horizonShift

  /// The expiry word a write stores for `expiry` (absolute ms; 0 = never), by the
  /// writer's clock `now`.
  @inline(__always)
  static func stamp(_ expiry: UInt64, now: UInt64) -> UInt64 {
    let e = min(expiry & Format.expiryMask, RecordFormat.expiryMillisecondsMask)
    guard e != 0 else { return 0 }
    let left = e > now ? e &- now : 0
    // Safe: `left` < 2^48, so the bit length is at most 48.
    let k = max(1, UInt64(64 &- left.leadingZeroBitCount))
    return e | k << horizonShift
  }

  @inline(__always)
  static func isExpired(_ word: UInt64, now: UInt64) -> Bool {
    let e = word & Format.expiryMask
    guard e != 0 else { return false }
    if e <= now { return true }
    let k = (word & horizonMask) >> horizonShift
    // Safe: k ≤ 63, so the shift needs no over-shift check (`&<<`) and the sum stays
    // below 2^64.
    return k != 0 && e &- now > (1 &<< k) &+ aheadToleranceMilliseconds
  }
}
