import Synchronization

@_spi(Tiers)
extension SharedCache {
  /// The address of tier word `index` in the mapping, for a tier whose read path loads it
  /// on every hit without a call (the near cache's session word). Load it with acquire
  /// ordering as `tierWord(_:)` does; never store through it on a read-only handle.
  ///
  /// Valid as long as this `SharedCache` lives: the mapping is fixed-size and never moves.
  public func tierWordAddress(_ index: Int) throws -> UnsafePointer<Atomic<UInt64>> {
    guard (0..<Format.H.tierWordCount).contains(index) else {
      throw CacheError.invalidArgument("tier word \(index) is not in 0..<\(Format.H.tierWordCount)")
    }
    return UnsafePointer(engine.memory.word(Format.H.tierWords + 8 * index))
  }
}
