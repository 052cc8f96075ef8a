import Synchronization

/// Where this handle's recent sets found their keys: by key hash, the `Writer.SlotHint`
/// W0 last made for the key (its first bucket's slot holding the key's tag, with the
/// slot's word and the group count). The next set of the key prefetches its record
/// together with its bucket, from the hint, instead of after the bucket has come: W0
/// learns the record's offset from the bucket's tags. When another CPU wrote both lines
/// last (two writers of a hot key), the two transfers then overlap instead of following
/// one another.
///
/// Private to the handle and shared by its threads: each entry is three relaxed atomic
/// words, which a racing thread may see torn. Only ever a hint: `Writer.overwriteHinted`
/// checks the slot's word, its tag, its record and its key under the lock, and a hint
/// that fails is forgotten (`forget`), so the next set scans the bucket again.
///
/// A view of memory the engine allocates (`allocate`) and frees (`deallocate`) with
/// itself: a class here was retained and released around each use.
struct RecentSlots: @unchecked Sendable {
  /// Entries (a power of two): 96 KiB a handle.
  static let entries = 4096
  private static let wordsPerEntry = 3
  private let words: UnsafeMutablePointer<Atomic<UInt64>>

  private init(words: UnsafeMutablePointer<Atomic<UInt64>>) { self.words = words }

  static func allocate() -> RecentSlots {
    let n = entries * wordsPerEntry
    let words = UnsafeMutablePointer<Atomic<UInt64>>.allocate(capacity: n)
    for i in 0..<n { (words + i).initialize(to: Atomic(0)) }
    return RecentSlots(words: words)
  }

  func deallocate() {
    words.deinitialize(count: Self.entries * Self.wordsPerEntry)
    words.deallocate()
  }

  /// The first of entry `hash`'s words (bits 1-10 of the hash: bit 0 is always set).
  @inline(__always)
  private func entry(_ hash: UInt64) -> UnsafeMutablePointer<Atomic<UInt64>> {
    words + Int(truncatingIfNeeded: (hash >> 1) & UInt64(Self.entries - 1)) &* Self.wordsPerEntry
  }

  /// The hint last remembered for the key of hash `hash`, if it is this key's (by the
  /// whole hash, never 0 for a key: `KeyHash.key`).
  @inline(__always)
  func hint(for hash: UInt64) -> Writer.SlotHint? {
    let e = entry(hash)
    guard e.pointee.load(ordering: .relaxed) == hash else { return nil }
    let hint = Writer.SlotHint(
      packed: ((e + 1).pointee.load(ordering: .relaxed), (e + 2).pointee.load(ordering: .relaxed)))
    return hint.isNone ? nil : hint
  }

  /// Remembers `hint` (not `.none`) for the key of hash `hash`.
  @inline(__always)
  func remember(_ hash: UInt64, _ hint: Writer.SlotHint) {
    let e = entry(hash)
    let packed = hint.packed
    // The hash last: a reader that sees it sees, racing aside, the words it goes with.
    e.pointee.store(0, ordering: .relaxed)
    (e + 1).pointee.store(packed.0, ordering: .relaxed)
    (e + 2).pointee.store(packed.1, ordering: .relaxed)
    e.pointee.store(hash, ordering: .relaxed)
  }

  /// Drops the hint for the key of hash `hash` (it failed under the lock).
  @inline(__always)
  func forget(_ hash: UInt64) {
    let e = entry(hash)
    if e.pointee.load(ordering: .relaxed) == hash { e.pointee.store(0, ordering: .relaxed) }
  }
}
