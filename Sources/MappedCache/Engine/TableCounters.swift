/// The header's counters and limits (entries, live bytes, the version counter, the
/// event counts). Invariant: every one changes only under the write lock, so a change
/// is a relaxed load and a relaxed store (an atomic add would be one more locked
/// instruction per write); lock-free readers (`statistics()`) may see a count one
/// write behind. The file may hold any bits there (damage, a hostile file), so counts
/// are clamped when read as `Int`.
struct TableCounters {
  let memory: MappedMemory

  /// The word's raw value.
  @inline(__always) func value(_ word: HeaderWord) -> UInt64 { memory.header(word).load(.relaxed) }

  /// The word as a count, clamped to 0 ... 2^56 so that converting or adding to it can
  /// neither trap nor overflow.
  @inline(__always) func count(_ word: HeaderWord) -> Int { Self.clamp(value(word)) }

  @inline(__always) static func clamp(_ v: UInt64) -> Int { Int(truncatingIfNeeded: min(v, 1 << 56)) }

  @inline(__always)
  func set(_ word: HeaderWord, _ v: UInt64, _ held: borrowing WriteLock.Held) {
    memory.header(word).store(v, .relaxed)
  }

  @inline(__always)
  func bump(_ word: HeaderWord, by n: UInt64 = 1, _ held: borrowing WriteLock.Held) {
    set(word, value(word) &+ n, held)
  }

  /// The next write's version (for compare-and-swap): unique per write of any key.
  @inline(__always)
  func nextVersion(_ held: borrowing WriteLock.Held) -> UInt64 {
    let v = value(.casCounter) &+ 1
    set(.casCounter, v, held)
    return v
  }

  /// Adds `added` and takes `removed` key+value bytes from the live-bytes count.
  @inline(__always)
  func changeLiveBytes(adding added: Int, removing removed: Int, _ held: borrowing WriteLock.Held) {
    set(.liveBytes, value(.liveBytes) &- UInt64(truncatingIfNeeded: removed) &+ UInt64(truncatingIfNeeded: added), held)
  }

  /// The count limit stored in the file (0: none).
  var countLimit: Int { Int(truncatingIfNeeded: min(value(.countLimit), UInt64(Int.max))) }
  /// The cost limit (most key+value bytes) stored in the file (0: none).
  var costLimit: Int { Int(truncatingIfNeeded: min(value(.costLimit), UInt64(Int.max))) }
}
