/// Where this handle's recent sets found their keys: by key hash, the slot W0 last found
/// the key's tag in (which of the key's two places, the slot's number there, and the
/// slot's word). The next set of the key prefetches its record together with its
/// bucket, from the hint, instead of after the bucket has come: W0 learns the record's
/// offset from the bucket's tags. A set of a key not in the CPU's caches then waits for
/// one miss instead of two in a row, and when another CPU wrote both lines last (two
/// writers of a hot key), the two transfers overlap.
///
/// One word an entry, so that many entries fit in the second-level cache (16,384 in
/// 128 KiB; three words an entry and 4,096 of them found a hint for fewer keys in 96
/// KiB), and a racing thread sees an entry whole:
///
///     0..31   the slot's word
///     32..35  the slot's number in its bucket
///     36      set: the key's second place; clear: its first
///     37      set: an entry (a zeroed word is none)
///     38..63  bits 38..63 of the key's hash (bits 1..14 chose the entry)
///
/// The place is computed again from the key's hash and the group count read now, so a
/// hint names a slot of one of the key's two places whatever the index did since.
/// Private to the handle and shared by its threads (`PrivateWords`). Only ever a hint:
/// `Writer.overwriteHinted` checks the slot's word, its tag, its record and its key under
/// the lock; a hint that fails is forgotten (`forget`), so the next set scans the bucket
/// again.
struct RecentSlots {
  /// Entries (a power of two): 128 KiB a handle.
  static let entries = 16384
  private static let slotShift: UInt64 = 32
  private static let secondBit: UInt64 = 1 << 36
  private static let presentBit: UInt64 = 1 << 37
  /// The hash's bits an entry keeps, in place.
  private static let checkBits: UInt64 = ~((1 << 38) - 1)
  /// `presentBit` and the check: what says whose an entry is.
  private static let ownerBits: UInt64 = checkBits | presentBit
  private let words: PrivateWords

  private init(words: PrivateWords) { self.words = words }

  /// Freed by `deallocate()`, with the engine.
  static func allocate() -> RecentSlots { RecentSlots(words: .allocate(count: entries)) }

  func deallocate() { words.deallocate() }

  /// Entry `hash`'s word (bits 1-14 of the hash: bit 0 is always set).
  @inline(__always)
  private func entry(_ hash: UInt64) -> SharedWord {
    words[Int(truncatingIfNeeded: (hash >> 1) & UInt64(Self.entries - 1))]
  }

  /// The bits of an entry of `hash` above its slot: the check and `presentBit`.
  @inline(__always)
  private static func check(_ hash: UInt64) -> UInt64 { hash & checkBits | presentBit }

  /// The slot last remembered for the key of hash `hash`, if the entry is this key's (by
  /// 26 bits of its hash besides the entry's 14): its word, its number (below 16, not
  /// checked against a bucket's slots) and whether it is in the key's second place.
  @inline(__always)
  func recall(_ hash: UInt64) -> (word: UInt32, slot: Int, second: Bool)? {
    let v = entry(hash).load(.relaxed)
    guard v & Self.ownerBits == Self.check(hash) else { return nil }
    return (UInt32(truncatingIfNeeded: v), Int(truncatingIfNeeded: (v >> Self.slotShift) & 15), v & Self.secondBit != 0)
  }

  /// Remembers slot `slot` (0..<16) of the key's first place (`second` false) or its
  /// second, holding `word`, for the key of hash `hash`.
  @inline(__always)
  func remember(_ hash: UInt64, word: UInt32, slot: Int, second: Bool) {
    assert(slot >= 0 && slot < 16)
    let v = Self.check(hash) | (second ? Self.secondBit : 0) | UInt64(truncatingIfNeeded: slot) << Self.slotShift
    entry(hash).store(v | UInt64(word), .relaxed)
  }

  /// Drops the hint for the key of hash `hash` (it failed under the lock).
  @inline(__always)
  func forget(_ hash: UInt64) {
    let e = entry(hash)
    if e.load(.relaxed) & Self.ownerBits == Self.check(hash) { e.store(0, .relaxed) }
  }
}
