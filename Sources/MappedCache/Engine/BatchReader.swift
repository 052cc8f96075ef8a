/// The batch read (multi-get): many keys' values copied out in one call, their memory
/// misses overlapped.
///
/// A single read of a large table waits for its bucket's cache miss (and, past the TLB's
/// reach, a page walk), then for its record's; a batch starts them for many keys first.
/// For each group of `batchGroup` keys:
///
/// B1. hash every key (`KeyHash.key`, the file's fixed hash), then, in a loop of its own,
///     prefetch every key's first bucket into L1 (`PartitionMemory.prefetchBucket`): the
///     misses are now in flight together;
/// B2. for each key, look at its first bucket's tags (relaxed loads outside any seqlock:
///     only a hint). Where one equals the key's tag, prefetch the record its slot names
///     (`PartitionMemory.prefetchRecord`, which checks the offset like any offset read
///     from the file); where none does, compute the second place (only then) and
///     prefetch its bucket. These misses overlap too. Then the same for those keys'
///     second buckets: their records;
/// B3. for each key, the single read with the hash of B1 (`copyValue(_:hash:into:)`):
///     the read protocol R1-R7, the handle's hit and miss counters.
///
/// B1 and B2 only load and prefetch: nothing they see is trusted or returned, so a
/// writer changing a bucket meanwhile costs at most a useless prefetch. B3 is the single
/// read itself, so a batch returns exactly what reading its keys one by one, in order,
/// would return, and leaves the same hit bits and statistics.
extension CacheEngine {
  /// Keys prefetched together. Zen 4 and recent Intel cores track 24-32 outstanding L1
  /// misses; a group of 16 keys' buckets, then records, fills them, and a group's hashes
  /// fit on the stack.
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
    withUnsafeTemporaryAllocation(of: UInt64.self, capacity: group) { hashes in
      withUnsafeTemporaryAllocation(of: Reader.Route.self, capacity: group) { routes in
        var start = 0
        while start < n {
          let count = min(group, n &- start)
          prefetchGroup(keys, from: start, count: count, hashes: hashes, routes: routes)
          // B3, with B1's partitions and places while their counts hold.
          for j in 0..<count {
            let k = start &+ j
            let len = copyValue(keys[k], hash: hashes[j], into: buffers[k], routes: routes, at: j)
            lengths[k] = len
            if len >= 0 { found &+= 1 }
          }
          start &+= count
        }
        // `Route` is trivial: nothing to deinitialize.
      }
    }
    return found
  }

  /// B3's single read of one key: `copyValue` with B1's route, in a function of its own,
  /// so that the compiler knows the route is there (the checks for its absence, and the
  /// prefetch of a record's second line that B2 made already, drop out). The routes by
  /// their buffer and the key's index in it: by value, each call copied its 64 bytes to
  /// the stack first.
  @inline(never)
  func copyValue(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
    routes: UnsafeMutableBufferPointer<Reader.Route>, at j: Int
  ) -> Int {
    copyValue(key, hash: hash, into: buffer, route: routes[j])
  }

  /// `prefetchGroup` for a caller that needs only the hashes (the typed batch read).
  @inline(__always)
  func prefetchGroup(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, from start: Int, count: Int,
    hashes: UnsafeMutableBufferPointer<UInt64>
  ) {
    withUnsafeTemporaryAllocation(of: Reader.Route.self, capacity: count) { routes in
      prefetchGroup(keys, from: start, count: count, hashes: hashes, routes: routes)
    }
  }

  /// B1-B2 for `count` (at most `batchGroup`) keys from `keys[start]`: each key's hash
  /// into `hashes[j]` and its partition and places into `routes[j]` (for B3), its first
  /// bucket prefetched, then its record or its second bucket. Also the typed batch
  /// read's first steps (`SharedCache.objects(forKeys:)` with decoded values kept), which
  /// then reads each key as the single typed read does.
  @inline(__always)
  func prefetchGroup(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, from start: Int, count: Int,
    hashes: UnsafeMutableBufferPointer<UInt64>, routes: UnsafeMutableBufferPointer<Reader.Route>
  ) {
    // B1: hash every key, then prefetch every first bucket, in a loop of its own. A
    // prefetch that misses (and walks the page tables) holds up retirement, and the
    // reorder buffer behind it fills: interleaved with the hashing, only the first few
    // prefetches of a group were issued before the first retired.
    assert(count <= UInt32.bitWidth, "a group's second places are a 32-bit mask")
    for j in 0..<count {
      // `KeyHash.key`'s value; a short key's from one pair of loads, as the single read's.
      let k = keys[start &+ j]
      if k.count <= 16, let p = k.baseAddress {
        hashes[j] = KeyHash.shortKey(p, k.count).hash
      } else {
        hashes[j] = KeyHash.key(k)
      }
    }
    // Each key's partition and places, computed once for B1, B2 and B3 (a group's fit
    // in under 2 KiB, so the buffer stays on the stack).
    let partitions = memory.partitionCount
    for j in 0..<count {
      let p = IndexGeometry.partition(hashes[j], count: partitions)
      let part = memory.partition(p)
      let groups = BucketIndex(part: part).geometryRelaxed().groups
      guard part.isValidGroupCount(groups) else {
        routes.initializeElement(at: j, to: .unrouted(in: part))
        continue
      }
      let first = part.bucketView(Placement.first(hash: hashes[j], groups: groups))
      routes.initializeElement(
        at: j,
        to: .init(
          partitionCount: partitions, partition: p, groups: groups, first: first, tag: IndexGeometry.tag(hashes[j])))
      part.prefetchBucket(first)
    }
    // B2: the loads wait for the first buckets' misses, in flight for every key.
    var second: UInt32 = 0
    for j in 0..<count {
      let r = routes[j]
      guard r.partition >= 0 else { continue }
      let part = memory.partition(r.partition)
      guard !part.prefetchRecord(named: r.tag, in: r.first) else { continue }
      let place = Placement.second(hash: hashes[j], groups: r.groups)
      if part.bucketView(place) != r.first {
        part.prefetchBucket(place, write: false)
        second |= 1 &<< UInt32(j)  // j < 32: no over-shift check needed
      }
    }
    // B2, second places: the keys not in their first bucket (a fifth to two fifths of
    // them, by the index's load) have their record prefetched from the second, whose
    // misses overlapped too; else B3 would wait for each such record in turn.
    while second != 0 {
      let j = second.trailingZeroBitCount
      second &= second &- 1
      let r = routes[j]
      memory.partition(r.partition).prefetchRecord(
        named: r.tag, in: Placement.second(hash: hashes[j], groups: r.groups))
    }
  }
}
