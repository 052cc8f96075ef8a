/// A partition's counters (entries, live bytes, the version counter, the event counts)
/// and the file's limits. Invariant: every partition counter changes only under its
/// partition's lock, so a change is a relaxed load and a relaxed store (an atomic add
/// would be one more locked instruction per write); lock-free readers (`statistics()`,
/// the limits' sums) may see a count one write behind. The file may hold any bits there
/// (damage, a hostile file), so counts are clamped when read as `Int`.
struct PartitionCounters {
  let part: PartitionMemory
  let memory: MappedMemory

  /// The word's raw value.
  @inline(__always) func value(_ word: PartitionWord) -> UInt64 { part.word(word).load(.relaxed) }

  /// The word as a count, clamped to 0 ... 2^56 so that converting or adding to it can
  /// neither trap nor overflow.
  @inline(__always) func count(_ word: PartitionWord) -> Int { Self.clamp(value(word)) }

  @inline(__always) static func clamp(_ v: UInt64) -> Int { Int(truncatingIfNeeded: min(v, 1 << 56)) }

  @inline(__always)
  func set(_ word: PartitionWord, _ v: UInt64, _ held: borrowing WriteLock.Held) {
    part.word(word).store(v, .relaxed)
  }

  @inline(__always)
  func bump(_ word: PartitionWord, by n: UInt64 = 1, _ held: borrowing WriteLock.Held) {
    set(word, value(word) &+ n, held)
  }

  /// The next write's version (for compare-and-swap and decoded-value stamps): the
  /// partition's counter, of which a record keeps the low 32 bits (never 0: a stamp of
  /// 0 means "no write").
  @inline(__always)
  func nextVersion(_ held: borrowing WriteLock.Held) -> UInt32 {
    var v = value(.versionCounter) &+ 1
    if UInt32(truncatingIfNeeded: v) == 0 { v &+= 1 }
    set(.versionCounter, v, held)
    return UInt32(truncatingIfNeeded: v)
  }

  /// Adds `added` and takes `removed` key+value bytes from the live-bytes count.
  @inline(__always)
  func changeLiveBytes(adding added: Int, removing removed: Int, _ held: borrowing WriteLock.Held) {
    set(.liveBytes, value(.liveBytes) &- UInt64(truncatingIfNeeded: removed) &+ UInt64(truncatingIfNeeded: added), held)
  }

  /// Counts an entry removed (`liveBytes` of key and value).
  @inline(__always)
  func removeEntry(liveBytes: Int, _ held: borrowing WriteLock.Held) {
    changeLiveBytes(adding: 0, removing: liveBytes, held)
    set(.entries, value(.entries) &- 1, held)
  }

  // MARK: The file's limits

  /// The count limit stored in the file (0: none).
  var countLimit: Int { Int(truncatingIfNeeded: min(memory.header(.countLimit).load(.relaxed), UInt64(Int.max))) }
  /// The cost limit (most key+value bytes) stored in the file (0: none).
  var costLimit: Int { Int(truncatingIfNeeded: min(memory.header(.costLimit).load(.relaxed), UInt64(Int.max))) }

  /// The entries and live bytes of the whole file: this partition's counts and the
  /// others' (relaxed loads, lock-free: a figure that may lag other partitions' writes).
  func fileTotals() -> (entries: Int, liveBytes: Int) {
    var entries = 0
    var bytes = 0
    for p in 0..<memory.partitionCount {
      let other = memory.partition(p)
      entries &+= Self.clamp(other.word(.entries).load(.relaxed))
      bytes &+= Self.clamp(other.word(.liveBytes).load(.relaxed))
    }
    return (entries, bytes)
  }
}
