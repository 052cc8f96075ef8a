import Synchronization

/// The header words reserved for tiers (`Format.H.tierWords`): plain shared words with
/// acquire/release ordering, outside every lock. Indices are checked by the caller.
extension CacheEngine {
  func tierWord(_ index: Int) -> UInt64 {
    memory.word(Format.H.tierWords + 8 * index).pointee.load(ordering: .acquiring)
  }

  func storeTierWord(_ index: Int, _ value: UInt64) throws(CacheError) {
    guard writable else { throw .readOnly(path: path) }
    memory.word(Format.H.tierWords + 8 * index).pointee.store(value, ordering: .releasing)
  }

  func compareExchangeTierWord(_ index: Int, expected: UInt64, desired: UInt64) throws(CacheError) -> Bool {
    guard writable else { throw .readOnly(path: path) }
    return memory.word(Format.H.tierWords + 8 * index).pointee
      .compareExchange(expected: expected, desired: desired, ordering: .acquiringAndReleasing).exchanged
  }
}
