/// The batch read (multi-get): many keys' values copied out in one call, their memory
/// misses overlapped.
///
/// A single read of a large table waits for its slot's cache miss (and, past the TLB's
/// reach, a page walk) before it can start the next read's; a batch starts them all
/// first. For each group of `batchGroup` keys:
///
/// 1. hash every key (`KeyHash.key`, the file's fixed hash), then, in a loop of its own,
///    prefetch every home slot's lines into L1 (`MappedMemory.prefetchSlotForReading`):
///    the misses are now in flight together;
/// 2. for each key, load its home slot's `hash` and `meta` (relaxed, outside any seqlock:
///    only a hint). When the hash is another key's, prefetch the next three slots of the
///    run (the last two to L2 only); when it is the key's and the entry is not inline,
///    prefetch its record at `loc` (`MappedMemory.prefetchRecord`, which checks the
///    offset like any offset read from the file): these misses overlap too;
/// 3. for each key, the single-key read with the hash of step 1
///    (`copyValue(_:hash:into:)`): the read protocol's steps 1-4 (acquire load of `seq`,
///    checked copy, acquire fence, re-check; then expiry, checksum, reference bit), the
///    miss confirmed against the shift sequence, the handle's hit and miss counters.
///    Where step 2 saw the key's hash in its home slot, and the handle reads plainly,
///    it starts with the fast path's seqlock read of that slot (`Reader.readInline`),
///    the slot the single read's scan would stop at first; whatever that cannot settle
///    (another key of the same hash, a slot changed meanwhile, a record, an expired or
///    too long value) goes to the single read's general path, without scanning to that
///    slot and reading it a second time.
///
/// Steps 1 and 2 only load and prefetch: nothing they see is trusted or returned, so a
/// writer changing a slot meanwhile costs at most a useless prefetch. Step 3 is the
/// single read itself, so a batch returns exactly what reading its keys one by one, in
/// order, would return, and leaves the same reference bits and statistics.
extension CacheEngine {
  /// Keys prefetched together. Zen 4 and recent Intel cores track 24-32 outstanding L1
  /// misses; a group of 16 slots of two lines each fills them, and a group's hashes fit
  /// on the stack.
  static let batchGroup = 16

  /// Copies the value of each `keys[j]` into `buffers[j]` and sets `lengths[j]` to its
  /// length, or to -1 when it is missing (expired, or a busy miss). As with
  /// `copyValue(_:into:)`, the bytes were copied only when the length is at most
  /// `buffers[j].count`. Returns how many keys were found (whatever their buffers).
  /// Allocates nothing.
  /// Precondition: the three buffers have the same count, and every key passed `checkKey`.
  @usableFromInline
  func copyValues(
    forKeys keys: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    into buffers: UnsafeBufferPointer<UnsafeMutableRawBufferPointer>,
    lengths: UnsafeMutableBufferPointer<Int>
  ) -> Int {
    precondition(keys.count == buffers.count && keys.count == lengths.count, "batch buffers of different counts")
    let n = keys.count
    let group = Self.batchGroup
    var found = 0
    let plain = reader.isPlain
    withUnsafeTemporaryAllocation(of: UInt64.self, capacity: group) { hashes in
      withUnsafeTemporaryAllocation(of: Int.self, capacity: group) { homes in
        var start = 0
        while start < n {
          let count = min(group, n &- start)
          prefetchGroup(keys, from: start, count: count, hashes: hashes, homes: homes)
          // 3. The single read of each key, with its hash. Where step 2 saw the hash in
          // the home slot, the fast path's read of that slot, then the general path
          // (`copyValue` would scan to the same slot and read it again first).
          for j in 0..<count {
            let k = start &+ j
            var len: Int
            if plain && homes[j] >= 0 {
              var expiry: UInt64 = 0
              var version: UInt64 = 0
              len = reader.readInline(
                at: homes[j], keys[k], hash: hashes[j], into: buffers[k], expiry: &expiry, version: &version,
                plain: true)
              if len >= 0 {
                reader.countHit()
              } else {
                len = copyValueSlowly(keys[k], hash: hashes[j], fast: len, into: buffers[k])
              }
            } else {
              len = copyValue(keys[k], hash: hashes[j], into: buffers[k])
            }
            lengths[k] = len
            if len >= 0 { found &+= 1 }
          }
          start &+= count
        }
      }
    }
    return found
  }

  /// Steps 1-2 for `count` (at most `batchGroup`) keys from `keys[start]`: each key's
  /// hash into `hashes[j]`, its home slot prefetched, then the next slots of its run
  /// where the home slot holds another key, or its record where it holds the key's hash
  /// in one; with `homes`, `homes[j]` is that home slot when it held the key's hash
  /// (seen outside any seqlock: a hint), else -1. Also the typed batch read's first
  /// steps (`SharedCache.objects(forKeys:)` with decoded values kept), which then reads
  /// each key as the single typed read does.
  @inline(__always)
  func prefetchGroup(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, from start: Int, count: Int,
    hashes: UnsafeMutableBufferPointer<UInt64>, homes: UnsafeMutableBufferPointer<Int>? = nil
  ) {
    // 1. Hash every key, then prefetch every home slot, in a loop of its own. A
    // prefetch that misses (and walks the page tables) holds up retirement, and the
    // reorder buffer behind it fills: interleaved with the hashing (~45 instructions a
    // key), only the first ten or so prefetches of a group were issued before the first
    // retired, and the others started a whole miss later. The prefetch loop is a few
    // instructions a key, so the whole group's misses start together (a batch's time at
    // 10 M keys down by a quarter to a third, docs/bench-history.md). Every line of the
    // slot goes to the first-level cache: step 3 copies the value out of the second line
    // at once.
    for j in 0..<count { hashes[j] = KeyHash.key(keys[start &+ j]) }
    for j in 0..<count { memory.prefetchSlotForReading(index.home(hashes[j]), head: .firstLevel, rest: .firstLevel) }
    // 2. Where the home slot holds another key, the key sits further along its run:
    // prefetch the next three slots (the next into the first-level cache, the two after
    // it into the second, which takes none of the core's few first-level fill buffers).
    // At the table's load about a third of the keys are displaced, some by more than one
    // slot; probing them in step 3 would otherwise wait for one miss after another.
    // Where the home slot holds the key's hash and a record, prefetch the record. The
    // loads wait for the home slots' misses, in flight for every key of the group.
    let records = memory.inlineCapacity < maxKey &+ layout.maxValue
    for j in 0..<count {
      let h = hashes[j]
      let i = index.home(h)
      let found = index.hash(at: i)
      homes?[j] = found == h ? i : -1
      if found == h {
        if records && index.meta(at: i) & Format.inlineBit == 0 {
          memory.prefetchRecord(at: index.loc(at: i))
        }
      } else if found != 0 {
        let n1 = index.next(i)
        let n2 = index.next(n1)
        memory.prefetchSlotForReading(n1, head: .firstLevel, rest: .firstLevel)
        memory.prefetchSlotForReading(n2, head: .secondLevel, rest: .secondLevel)
        memory.prefetchSlotForReading(index.next(n2), head: .secondLevel, rest: .secondLevel)
      }
    }
  }
}
