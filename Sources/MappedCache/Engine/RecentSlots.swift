/// Where this handle's recent sets found their keys: by key hash, the `Writer.SlotHint`
/// W0 last made for the key (the slot of its first bucket, else of its second, holding
/// the key's tag, with the slot's word and the group count). The next set of the key
/// prefetches its record together with its bucket, from the hint, instead of after the
/// bucket has come: W0 learns the record's offset from the bucket's tags. When another
/// CPU wrote both lines last (two writers of a hot key), the two transfers then overlap
/// instead of following one another.
///
/// Private to the handle and shared by its threads (`PrivateWords`): each entry is
/// three relaxed words, which a racing thread may see torn. Only ever a hint: W0 uses
/// one only for a place it computed itself, and `Writer.overwriteHinted` checks the
/// slot's word, its tag, its record and its key under the lock; a hint that fails is
/// forgotten (`forget`), so the next set scans the bucket again.
struct RecentSlots {
  /// Entries (a power of two): 96 KiB a handle.
  static let entries = 4096
  private static let wordsPerEntry = 3
  private let words: PrivateWords

  private init(words: PrivateWords) { self.words = words }

  /// Freed by `deallocate()`, with the engine.
  static func allocate() -> RecentSlots { RecentSlots(words: .allocate(count: entries * wordsPerEntry)) }

  func deallocate() { words.deallocate() }

  /// The first of entry `hash`'s words (bits 1-12 of the hash: bit 0 is always set).
  @inline(__always)
  private func entry(_ hash: UInt64) -> Int {
    Int(truncatingIfNeeded: (hash >> 1) & UInt64(Self.entries - 1)) &* Self.wordsPerEntry
  }

  /// The hint last remembered for the key of hash `hash`, if it is this key's (by the
  /// whole hash, never 0 for a key: `KeyHash.key`), marked `isRecalled`.
  @inline(__always)
  func hint(for hash: UInt64) -> Writer.SlotHint? {
    let e = entry(hash)
    guard words[e].load(.relaxed) == hash else { return nil }
    let hint = Writer.SlotHint(recalled: (words[e + 1].load(.relaxed), words[e + 2].load(.relaxed)))
    return hint.isNone ? nil : hint
  }

  /// Remembers `hint` (not `.none`) for the key of hash `hash`.
  @inline(__always)
  func remember(_ hash: UInt64, _ hint: Writer.SlotHint) {
    let e = entry(hash)
    let packed = hint.packed
    words[e + 1].store(packed.0, .relaxed)
    words[e + 2].store(packed.1, .relaxed)
    words[e].store(hash, .relaxed)
  }

  /// Drops the hint for the key of hash `hash` (it failed under the lock).
  @inline(__always)
  func forget(_ hash: UInt64) {
    let e = entry(hash)
    if words[e].load(.relaxed) == hash { words[e].store(0, .relaxed) }
  }
}
