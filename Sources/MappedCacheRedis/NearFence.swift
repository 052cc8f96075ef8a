@_spi(Tiers) import MappedCache
import SystemCalls

/// The fence check of a near cache: whether a tier word's last confirmed heartbeat is
/// recent enough for the entries it stamps to be served (see `NearLayout` for the word,
/// `NearCacheHolder` for who moves it).
@usableFromInline
enum NearFence {
  /// Whether a session word's fence is younger than `maxStalenessMs` (modulo 2^32 ms; a
  /// fence slightly ahead is fresh: the coarse clock lags the holder's precise one by up
  /// to a tick).
  @inlinable @inline(__always)
  static func isFresh(session w: UInt64, _ maxStalenessMs: UInt64) -> Bool {
    guard w != 0 else { return false }
    let age = UInt32(truncatingIfNeeded: Clock.coarseMilliseconds()) &- UInt32(truncatingIfNeeded: w)
    return UInt64(age) <= maxStalenessMs || age > UInt32.max - 1000
  }

  /// Tier word `word` of `local` (epoch and fence: the session word, or a cluster slot
  /// bucket's): the one tier word a hit loads, through the tier SPI (a call: SPI cannot
  /// be used from inlinable code, and the mapping's pointers stay inside MappedCache). A
  /// word out of range (a damaged frame) reads as 0: never fresh.
  @usableFromInline
  static func session(_ local: SharedCache<[UInt8]>, _ word: Int) -> UInt64 { (try? local.tierWord(word)) ?? 0 }

  /// Whether the fence of `local` is younger than `maxStalenessMs` (every slot bucket's,
  /// in front of a cluster).
  static func isFresh(_ local: SharedCache<[UInt8]>, _ maxStalenessMs: UInt64) -> Bool {
    guard NearLayout.isClustered(local) else {
      return isFresh(session: session(local, NearLayout.epoch), maxStalenessMs)
    }
    return (0..<NearLayout.bucketCount).allSatisfy {
      isFresh(session: session(local, NearLayout.bucketBase + $0), maxStalenessMs)
    }
  }

  /// A staleness bound in whole milliseconds (a negative one is 0).
  static func milliseconds(_ d: Duration) -> UInt64 {
    let (s, atto) = d.components
    return UInt64(max(0, Double(s) * 1000 + Double(atto) / 1e15))
  }
}
