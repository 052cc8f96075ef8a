import Foundation
import MappedCache
import SystemCalls

/// Timing constants shared by workers and the coordinator.
enum WorkerTiming {
  /// 1 operation in `sampleEvery` is timed (two clock reads): the peers' rate, so both
  /// harnesses spend the same on timing.
  static let sampleEvery: UInt64 = 64
  /// How often a thread hands its counters to the worker's board.
  static let publishNs: UInt64 = 50_000_000
  /// How often a worker rewrites its result file: what a SIGKILL can lose at most.
  static let flushInterval: TimeInterval = 0.2
  /// Values planted with `--plant-corruption`: one every this many operations.
  static let plantEvery: UInt64 = 65_536
}

/// The keys of a run, the same in every process: `key:` and the zero-padded index when
/// the size allows (`key:00000042` for 12 bytes, as the peer benchmarks use), the
/// zero-padded index alone otherwise (`--key-size` is at least the index's digits).
///
/// Workers format a key's bytes when they need it, into a buffer of their own, and pass
/// the bytes to the cache: a table of 100,000 `String`s is 1.6 MB, more than this
/// machine's L2, and loading a key from it was a cache miss on most operations, as long
/// as the read being measured. (The peers' table of 12-byte keys has the same problem;
/// their shorter loop overlaps it with the next operation.)
struct KeySet {
  let count: Int
  let size: Int
  private let prefixed: Bool
  /// The common shape, fixed per run: every index under 10^8 (its digits one word) and a
  /// key of 9 to 16 bytes, so its two words are the digits shifted by `shift` bits.
  private let oneWord: Bool
  private let shift: UInt64
  /// `quads[i]`: the four ASCII digits of i < 10^4, most significant first in memory.
  private let quads = KeySet.quadTable

  /// 40 KB, made once and never freed: two loads give an index's eight digits, where
  /// `digits8`'s chain of four multiplies was a large share of every operation that
  /// `cache-stress` times. `nonisolated(unsafe)`: written only while it is made.
  nonisolated(unsafe) private static let quadTable: UnsafePointer<UInt32> = {
    let t = UnsafeMutablePointer<UInt32>.allocate(capacity: 10_000)
    for i in 0..<10_000 {
      let d = UInt32(i)
      t[i] = (0x30 + d / 1000) | (0x30 + d / 100 % 10) << 8 | (0x30 + d / 10 % 10) << 16 | (0x30 + d % 10) << 24
    }
    return UnsafePointer(t)
  }()

  init(count: Int, size: Int) {
    self.count = count
    self.size = size
    prefixed = size >= String(max(count - 1, 0)).count + 4
    oneWord = count <= 100_000_000 && size >= 9 && size <= 16
    shift = oneWord ? UInt64(8 * (16 - size)) : 0
  }

  /// Eight decimal digits of `v` (< 10^8), zero-padded, as the little-endian word of
  /// their ASCII bytes (most significant digit first in memory), with no table and no
  /// division instruction: the two 4-digit halves go in the word's 32-bit lanes, each
  /// splits into 2-digit halves in 16-bit lanes (·10486 >> 20 is ÷100 below 10^4), each
  /// of those into digits in bytes (·103 >> 10 is ÷10 below 100); no lane's product
  /// reaches the next lane's bits that the masks keep. Fewer instructions than four
  /// lookups in the pair table (the loop is CPU-bound under Zipf reads: fewer
  /// instructions per operation let the CPU overlap more operations' misses).
  @inline(__always)
  static func digits8(_ v: UInt64) -> UInt64 {
    let x = v / 10_000 | (v % 10_000) << 32
    let y = (x &* 10486) >> 20 & 0x0000_007F_0000_007F
    let t = y | (x &- y &* 100) << 16
    let tens = (t &* 103) >> 10 & 0x000F_000F_000F_000F
    return (tens | (t &- tens &* 10) << 8) | 0x3030_3030_3030_3030
  }

  /// Eight ASCII zeros.
  private static let zeros: UInt64 = 0x3030_3030_3030_3030

  /// Writes key `i` (`size` bytes) to `out`, which has room for at least 16 bytes.
  /// The key's last 16 digits are put together in registers and stored as two whole
  /// words, so that the cache's loads of a key of up to 16 bytes are served from those
  /// stores (a load spanning two smaller stores stalls the CPU until every older
  /// instruction is done: the read would wait for the previous read's cache miss).
  @inline(__always)
  func write(_ i: Int, to out: UnsafeMutableRawPointer) {
    let v = UInt64(truncatingIfNeeded: i)  // < 10^16: at most `count` keys
    if oneWord {
      // What the general case below computes, in 64-bit shifts of a known range (0-56):
      // the low word is eight zeros shifted out, the digits shifted in.
      let lo = UInt64(quads[Int(v / 10_000)]) | UInt64(quads[Int(v % 10_000)]) << 32
      var low = Self.zeros &>> shift | (lo &<< (63 &- shift)) &<< 1
      if prefixed { low = low & ~0xFFFF_FFFF | 0x3A79_656B }  // "key:"
      out.storeBytes(of: low, as: UInt64.self)
      out.storeBytes(of: lo &>> shift, toByteOffset: 8, as: UInt64.self)
      return
    }
    let lo = Self.digits8(v % 100_000_000)
    let hi = v < 100_000_000 ? Self.zeros : Self.digits8(v / 100_000_000 % 100_000_000)
    if size <= 16 {
      // 16 digits, the high 8 first in memory, shifted so that the key's bytes are the last.
      var w = (UInt128(lo) << 64 | UInt128(hi)) >> (8 &* (16 &- size))
      if prefixed { w = w & ~UInt128(0xFFFF_FFFF) | 0x3A79_656B }  // "key:"
      out.storeBytes(of: UInt64(truncatingIfNeeded: w), as: UInt64.self)
      out.storeBytes(of: UInt64(truncatingIfNeeded: w >> 64), toByteOffset: 8, as: UInt64.self)
      return
    }
    var o = 0
    while o < size &- 16 {
      out.storeBytes(of: Self.zeros, toByteOffset: o, as: UInt64.self)
      o &+= 8
    }
    out.storeBytes(of: hi, toByteOffset: size &- 16, as: UInt64.self)
    out.storeBytes(of: lo, toByteOffset: size &- 8, as: UInt64.self)
    // The prefix covers only zeros: `prefixed` means the index has at most size - 4 digits.
    if prefixed { out.storeBytes(of: UInt32(0x3A79_656B).littleEndian, as: UInt32.self) }  // "key:"
  }

  /// Key `i` as a `String` (for messages and the coordinator's prefill).
  subscript(_ i: Int) -> String {
    withUnsafeTemporaryAllocation(byteCount: max(size, 16), alignment: 16) { b in
      write(i, to: b.baseAddress!)
      return String(decoding: UnsafeRawBufferPointer(start: b.baseAddress, count: size), as: UTF8.self)
    }
  }
}

/// Plain counters of one thread (summed: one worker, or the whole run).
struct Counters: Codable {
  var getOps: UInt64 = 0
  var setOps: UInt64 = 0
  var hits: UInt64 = 0
  var misses: UInt64 = 0
  var corruptReads: UInt64 = 0
  var wrongValues: UInt64 = 0
  var errors: UInt64 = 0

  /// Every field: what a sum adds and a difference subtracts.
  private static let fields: [WritableKeyPath<Counters, UInt64> & Sendable] = [
    \.getOps, \.setOps, \.hits, \.misses, \.corruptReads, \.wrongValues, \.errors,
  ]

  mutating func add(_ o: Counters) {
    for f in Self.fields { self[keyPath: f] += o[keyPath: f] }
  }

  /// What was counted since `earlier` (a previous snapshot of the same counters).
  func since(_ earlier: Counters) -> Counters {
    var d = self
    for f in Self.fields { d[keyPath: f] = self[keyPath: f] &- earlier[keyPath: f] }
    return d
  }
}

/// Where a worker's threads leave their counters for the flusher (under a lock, every
/// `WorkerTiming.publishNs`; the hot loop itself shares nothing).
final class StatsBoard: @unchecked Sendable {
  private let lock = NSLock()
  /// Signalled by a thread that has just published a corrupt or wrong read: the flusher
  /// writes the result at once, not at its next interval, so that a SIGKILL soon after
  /// cannot take the finding with it.
  let urgent = DispatchSemaphore(value: 0)
  private var counters: [Counters]
  private var getHists: [LatencyHistogram]
  private var setHists: [LatencyHistogram]
  private var messages: [String] = []

  init(threads: Int) {
    counters = Array(repeating: Counters(), count: threads)
    getHists = Array(repeating: LatencyHistogram(), count: threads)
    setHists = Array(repeating: LatencyHistogram(), count: threads)
  }

  /// Copies a thread's cumulative counters (element by element: no allocation).
  func publish(_ t: Int, _ c: Counters, _ get: LatencyHistogram, _ set: LatencyHistogram) {
    lock.lock()
    defer { lock.unlock() }
    counters[t] = c
    for i in 0..<LatencyHistogram.bucketCount {
      getHists[t].counts[i] = get.counts[i]
      setHists[t].counts[i] = set.counts[i]
    }
  }

  /// Keeps the first few messages (errors, corrupt or wrong values).
  func note(_ s: String) {
    lock.lock()
    defer { lock.unlock() }
    if messages.count < 10 && !messages.contains(s) { messages.append(s) }
  }

  func snapshot(worker: Int, incarnation: Int, final: Bool) -> WorkerResult {
    lock.lock()
    defer { lock.unlock() }
    var r = WorkerResult(worker: worker, incarnation: incarnation, final: final)
    var g = LatencyHistogram()
    var s = LatencyHistogram()
    for (i, c) in counters.enumerated() {
      r.counters.add(c)
      r.threadOps.append(c.getOps &+ c.setOps)
      g.merge(getHists[i])
      s.merge(setHists[i])
    }
    r.getHist = g.sparse
    r.setHist = s.sparse
    r.messages = messages
    return r
  }
}

/// What every thread of a worker shares (read-only).
struct WorkerContext: @unchecked Sendable {
  let cache: SharedCache<[UInt8]>
  let keys: KeySet
  let options: StressOptions
  let board: StatsBoard
  let worker: Int
  let incarnation: Int
  let expiry: CacheExpiry
  /// The hottest key (rank 0): where `--plant-corruption` writes its bad value.
  let hotKey: Int
  let trackerBudget: Int
}

/// One worker thread's run: a closed loop over its op stream until the end time. All
/// state is in this struct, a local of the thread, so the loop shares nothing and
/// allocates nothing (reads copy into `scratch`; writes reuse `valueBuffer`).
struct ThreadLoop {
  let ctx: WorkerContext
  let thread: Int
  let writerID: UInt32
  let writers: UInt32
  let ops: [UInt32]
  var counters = Counters()
  var getHist = LatencyHistogram()
  var setHist = LatencyHistogram()
  let tracker: SequenceTracker
  /// Keys with `k & trackMask == 0` are tracked, as entry `k >> trackShift`.
  let trackMask: Int
  let trackShift: Int
  /// Reads with `n & checkMask == 0` check the whole value (all: mask 0).
  let checkMask: UInt64
  var rng: SplitMix64
  /// Where each set's value is written (`valueMax` bytes), handed to `setBytes`.
  let valueBuffer: UnsafeMutableRawBufferPointer
  var seq: UInt64 = 0
  var notes = 0
  let seqBase: UInt64
  let scratch: UnsafeMutableRawBufferPointer
  /// Where the current key's bytes are formatted.
  let keyBuffer: UnsafeMutableRawBufferPointer
  /// `--mget N` and `--mset N`: the batch's keys, and for `--mset` its values.
  let batch: BatchEntries
  /// `--mget N`: views of the batch's value buffers (made once: a batch allocates
  /// nothing), its lengths, its keys' indices.
  let batchValues: UnsafeMutableBufferPointer<UnsafeMutableRawBufferPointer>
  let batchValueBytes: UnsafeMutableRawBufferPointer
  let batchLengths: UnsafeMutableBufferPointer<Int>
  let batchIndices: UnsafeMutableBufferPointer<Int>

  init(ctx: WorkerContext, thread: Int, ops: [UInt32], seed: UInt64) {
    let o = ctx.options
    self.ctx = ctx
    self.thread = thread
    self.ops = ops
    writerID = UInt32(ctx.worker * o.threads + thread)
    writers = UInt32(o.writers)
    trackMask = o.trackEvery - 1
    trackShift = o.trackEvery.trailingZeroBitCount
    checkMask = UInt64(o.checkEvery - 1)
    tracker = SequenceTracker(
      keys: (o.keys + o.trackEvery - 1) >> trackShift, writers: o.writers,
      budgetEntries: ctx.trackerBudget)
    rng = SplitMix64(seed: seed)
    valueBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(o.valueMax, 1), alignment: 16)
    seqBase = UInt64(ctx.incarnation) << 40
    scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: o.valueMax + 64, alignment: 16)
    keyBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(o.keySize, 16), alignment: 16)
    let gets = max(o.mget, 1)
    let keyCount = max(o.mget, o.mset, 1)
    // Values only for `--mset`: a batch of gets copies into `batchValueBytes`.
    batch = BatchEntries(capacity: keyCount, keySize: o.keySize, valueMax: o.mset > 1 ? o.valueMax : 0)
    // Room past the largest value: a read longer than any value written is caught.
    let valueStride = (o.valueMax + 64 + 15) & ~15
    batchValueBytes = UnsafeMutableRawBufferPointer.allocate(byteCount: gets * valueStride, alignment: 16)
    batchValues = UnsafeMutableBufferPointer.allocate(capacity: gets)
    batchLengths = UnsafeMutableBufferPointer.allocate(capacity: gets)
    batchIndices = UnsafeMutableBufferPointer.allocate(capacity: keyCount)
    for j in 0..<gets {
      batchValues[j] = UnsafeMutableRawBufferPointer(rebasing: batchValueBytes[j * valueStride..<(j + 1) * valueStride])
    }
    batchLengths.initialize(repeating: 0)
    batchIndices.initialize(repeating: 0)
  }

  func release() {
    valueBuffer.deallocate()
    scratch.deallocate()
    keyBuffer.deallocate()
    batch.release()
    batchValueBytes.deallocate()
    batchValues.deallocate()
    batchLengths.deallocate()
    batchIndices.deallocate()
    tracker.release()
  }

  /// Key `k`'s bytes, in `keyBuffer`.
  @inline(__always)
  func key(_ k: Int) -> UnsafeRawBufferPointer {
    ctx.keys.write(k, to: keyBuffer.baseAddress!)
    return UnsafeRawBufferPointer(start: keyBuffer.baseAddress, count: ctx.keys.size)
  }

  mutating func run(start: UInt64, end: UInt64) {
    if ctx.options.mget > 1 || ctx.options.mset > 1 { return runBatched(start: start, end: end) }
    let mask = ops.count - 1
    var pos = (thread &* 7919 &+ ctx.worker &* 104_729) & mask
    var n: UInt64 = 0
    var lastPublish = start
    let readThrough = ctx.options.readThrough
    let plant = ctx.options.plantCorruption && ctx.worker == 0 && thread == 0
    // One strong reference for the whole loop, passed down: no retain and release per
    // operation. (`Unmanaged._withUnsafeGuaranteedRef` avoided those too, but cost
    // uniform reads much of their throughput.)
    let cache = ctx.cache
    while true {
      let op = ops[pos & mask]
      pos &+= 1
      let k = Int(op & ~OpStream.writeBit)
      let timed = n % WorkerTiming.sampleEvery == 0
      if plant && n % WorkerTiming.plantEvery == 0 { setOutOfLine(ctx.hotKey, cache, timed: false, spoil: true) }
      n &+= 1
      var t0: UInt64 = 0
      if timed {
        t0 = Clock.nanoseconds()
        if t0 >= end { break }
        if t0 &- lastPublish >= WorkerTiming.publishNs {
          publish()
          lastPublish = t0
          t0 = Clock.nanoseconds()  // the copy is not part of the operation
        }
      }
      if op & OpStream.writeBit != 0 {
        set(k, cache, timed: timed, spoil: false)
        continue
      }
      // The read: the value goes from the file straight into `scratch`.
      let len: Int
      do {
        len = try cache.copyBytes(forKey: key(k), into: scratch) ?? -1
      } catch {
        noteError(k, error)
        len = -2
      }
      if timed { getHist.record(Clock.nanoseconds() &- t0) }
      if !judge(k, len, n: n, in: scratch) && readThrough {
        setOutOfLine(k, cache, timed: timed, spoil: false)
      }
    }
    publish()
  }

  /// `run` with `--mget N` or `--mset N`: up to N consecutive gets of the stream go to
  /// one batch read (`copyBytes(forKeys:into:lengths:)`, with `--mget`), up to N
  /// consecutive sets to one batch write (`setBytes(_:forKeys:expires:)`, with `--mset`);
  /// an operation of the other kind ends a batch, as in the peers' multi-get. Each value
  /// is judged as a single get's is, in the stream's order (so freshness is checked
  /// against what this reader saw before). A timed batch's latency sample is its time
  /// divided by its size.
  mutating func runBatched(start: UInt64, end: UInt64) {
    let mask = ops.count - 1
    var pos = (thread &* 7919 &+ ctx.worker &* 104_729) & mask
    var n: UInt64 = 0
    var lastPublish = start
    var nextPlant: UInt64 = 0
    let readThrough = ctx.options.readThrough
    let plant = ctx.options.plantCorruption && ctx.worker == 0 && thread == 0
    let (mget, mset) = (ctx.options.mget, ctx.options.mset)
    let cache = ctx.cache
    let keys = batch.keys(batch.capacity)
    let values = UnsafeBufferPointer(batchValues)
    while true {
      if plant && n >= nextPlant {
        set(ctx.hotKey, cache, timed: false, spoil: true)
        nextPlant = n &+ WorkerTiming.plantEvery
      }
      // A run of gets, or of sets, from the stream.
      let writing = ops[pos & mask] & OpStream.writeBit != 0
      let count = takeRun(writing: writing, limit: writing ? mset : mget, from: &pos, mask: mask)
      let timed = n % WorkerTiming.sampleEvery < UInt64(count)
      if timed {
        let t = Clock.nanoseconds()
        if t >= end { break }
        if t &- lastPublish >= WorkerTiming.publishNs {
          publish()
          lastPublish = t
        }
      }
      if writing {
        if mset > 1 {
          setBatch(count, cache, timed: timed)
        } else {
          set(batchIndices[0], cache, timed: timed, spoil: false)
        }
      } else {
        getBatch(
          count, cache, timed: timed, n: n, batched: mget > 1, readThrough: readThrough, keys: keys, values: values)
      }
      n &+= UInt64(count)
    }
    publish()
  }

  /// Takes up to `limit` consecutive operations of one kind (sets when `writing`) from
  /// the stream at `pos`, their keys into `batch` and `batchIndices`; returns how many.
  @inline(__always)
  mutating func takeRun(writing: Bool, limit: Int, from pos: inout Int, mask: Int) -> Int {
    var count = 0
    while count < limit {
      let op = ops[pos & mask]
      if (op & OpStream.writeBit != 0) != writing { break }
      pos &+= 1
      let k = Int(op & ~OpStream.writeBit)
      batchIndices[count] = k
      batch.setKey(count, k, of: ctx.keys)
      count &+= 1
    }
    return count
  }

  /// The `count` gets whose keys are in `batch`: one batch read (or, unless `batched`,
  /// one single read), each value judged in the stream's order (`n` is the first's
  /// number); a timed batch's latency sample is its time divided by its size.
  @inline(__always)
  mutating func getBatch(
    _ count: Int, _ cache: SharedCache<[UInt8]>, timed: Bool, n: UInt64, batched: Bool, readThrough: Bool,
    keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, values: UnsafeBufferPointer<UnsafeMutableRawBufferPointer>
  ) {
    let t0 = timed ? Clock.nanoseconds() : 0
    var failed = false
    do {
      if batched {
        _ = try cache.copyBytes(
          forKeys: UnsafeBufferPointer(rebasing: keys[..<count]),
          into: UnsafeBufferPointer(rebasing: values[..<count]),
          lengths: UnsafeMutableBufferPointer(rebasing: batchLengths[..<count]))
      } else {
        batchLengths[0] = try cache.copyBytes(forKey: keys[0], into: batchValues[0]) ?? -1
      }
    } catch {
      noteError(batchIndices[0], error)
      failed = true
    }
    if timed { getHist.record((Clock.nanoseconds() &- t0) / UInt64(count)) }
    for j in 0..<count {
      let k = batchIndices[j]
      if !judge(k, failed ? -2 : batchLengths[j], n: n &+ UInt64(j), in: batchValues[j]) && readThrough {
        set(k, cache, timed: false, spoil: false)
      }
    }
  }

  /// The batch of `count` sets whose keys are in `batch` (`batchIndices`): a fresh
  /// value for each, as `set` writes one, all stored by one batch write.
  mutating func setBatch(_ count: Int, _ cache: SharedCache<[UInt8]>, timed: Bool) {
    let o = ctx.options
    for j in 0..<count {
      let size = o.valueMin == o.valueMax ? o.valueMin : o.valueMin + rng.next(below: o.valueMax - o.valueMin + 1)
      seq &+= 1
      ValueFormat.write(
        into: batch.value(j, size: size), key: UInt32(batchIndices[j]), writer: writerID, seq: seqBase | seq)
    }
    let t0 = timed ? Clock.nanoseconds() : 0
    do {
      try cache.setBytes(batch.values(count), forKeys: batch.keys(count), expires: ctx.expiry)
    } catch {
      counters.errors += 1
      if noting { note("set batch from \(ctx.keys[batchIndices[0]]): \(error)") }
    }
    if timed { setHist.record((Clock.nanoseconds() &- t0) / UInt64(count)) }
    counters.setOps &+= UInt64(count)
  }

  func publish() { ctx.board.publish(thread, counters, getHist, setHist) }

  /// After a corrupt or wrong read is counted: the thread's 1st, 2nd, 4th, 8th...
  /// (`FleetMember.flushesFinding`) are published and flushed at once
  /// (`StatsBoard.urgent`), so that a run with any reports one even when the worker is
  /// SIGKILLed within the flush interval.
  @inline(never)
  mutating func flagFinding() {
    guard FleetMember.flushesFinding(Int(truncatingIfNeeded: counters.corruptReads &+ counters.wrongValues)) else {
      return
    }
    publish()
    ctx.board.urgent.signal()
  }

  /// Whether this thread still passes messages on: only its first few (formatting allocates).
  var noting: Bool { notes < 10 }

  @inline(never)  // off the hot path: inlined, it made every get retain and release the board
  mutating func note(_ message: String) {
    notes += 1
    ctx.board.note(message)
  }

  @inline(never)
  mutating func noteError(_ k: Int, _ error: any Error) {
    counters.errors += 1
    if noting { note("get \(ctx.keys[k]): \(error)") }
  }

  /// Counts and checks one get's outcome: `len` is the value's length (in `scratch`, the
  /// buffer it was read into),
  /// -1 for a miss, -2 after an error. The value's key, length and writer are always
  /// checked, its tag and every byte when `n`, the operation's number, is a
  /// multiple of `--check-every`. Returns whether the get hit.
  ///
  /// The common outcome (a hit, whole, of a key not tracked or from the prefill) is
  /// judged inline; the rest out of line, so that the loop around stays small: a get's
  /// misses overlap the next get's only as far as the CPU can look ahead.
  @inline(__always)
  mutating func judge(_ k: Int, _ len: Int, n: UInt64, in scratch: UnsafeMutableRawBufferPointer) -> Bool {
    counters.getOps &+= 1
    guard len >= 0, len <= scratch.count else { return judgeUnusual(k, len) }
    counters.hits &+= 1
    let verdict = ValueFormat.check(
      UnsafeRawBufferPointer(start: scratch.baseAddress, count: len), key: UInt32(k),
      writers: writers, whole: n & checkMask == 0)
    if case .whole(let w, _) = verdict, w == ValueFormat.prefillWriter || k & trackMask != 0 { return true }
    judge(k, len, verdict)
    return true
  }

  /// `judge` of a miss, an error or a value longer than any written.
  @inline(never)
  mutating func judgeUnusual(_ k: Int, _ len: Int) -> Bool {
    if len == -1 {
      counters.misses &+= 1
      return false
    }
    if len < 0 { return false }
    counters.hits &+= 1
    counters.corruptReads &+= 1
    if noting { note("corrupt read of \(ctx.keys[k]): longer than any value written") }
    flagFinding()
    return true
  }

  /// `judge` of a hit's verdict: corrupt, untracked, or whole and tracked.
  @inline(never)
  mutating func judge(_ k: Int, _ len: Int, _ verdict: ValueFormat.Verdict) {
    switch verdict {
    case .corrupt:
      counters.corruptReads += 1
      if noting { note("corrupt read of \(ctx.keys[k]): \(len) bytes that are not a whole value for this key") }
      flagFinding()
    case .untracked:
      break  // whole; too short to carry a sequence number (`ValueFormat.trackedMinimumSize`)
    case .whole(let w, let s):
      if w != ValueFormat.prefillWriter && k & trackMask == 0
        && !tracker.observe(key: k >> trackShift, writer: Int(w), seq: s)
      {
        counters.wrongValues += 1
        if noting { note("wrong value for \(ctx.keys[k]): writer \(w) sequence \(s) after a later one") }
        flagFinding()
      }
    }
  }

  /// `set` as a call, for the loop's rare sets (a planted corruption, a read-through):
  /// with a second inlined copy in `run`, the compiler kept the common set's a call.
  @inline(never)
  mutating func setOutOfLine(_ k: Int, _ cache: SharedCache<[UInt8]>, timed: Bool, spoil: Bool) {
    set(k, cache, timed: timed, spoil: spoil)
  }

  /// One set of a fresh value (with `spoil`, one whose last byte is wrong).
  @inline(__always)
  mutating func set(_ k: Int, _ cache: SharedCache<[UInt8]>, timed: Bool, spoil: Bool) {
    let o = ctx.options
    let size = o.valueMin == o.valueMax ? o.valueMin : o.valueMin + rng.next(below: o.valueMax - o.valueMin + 1)
    seq &+= 1
    let value = UnsafeMutableRawBufferPointer(rebasing: valueBuffer[0..<size])
    ValueFormat.write(into: value, key: UInt32(k), writer: writerID, seq: seqBase | seq)
    if spoil { ValueFormat.spoil(value) }
    let t0 = timed ? Clock.nanoseconds() : 0
    do {
      let key = key(k)
      let expiry = ctx.expiry
      try cache.setBytes(UnsafeRawBufferPointer(value), forKey: key, expires: expiry)
    } catch {
      counters.errors += 1
      if noting { note("set \(ctx.keys[k]): \(error)") }
    }
    if timed { setHist.record(Clock.nanoseconds() &- t0) }
    counters.setOps += 1
  }
}

/// A worker process: opens the cache, prepares its threads' op streams, says it is
/// ready, waits for the go file, runs its threads in the window it names, and keeps
/// its result file current (`FleetMember`).
enum Worker {
  static func run(_ o: StressOptions) -> Int32 {
    guard let id = o.workerID, let dirPath = o.controlDir, let path = o.path, o.seed != nil else {
      FileHandle.standardError.write(Data("cache-stress worker: missing internal arguments\n".utf8))
      return 64
    }
    let dir = ControlDirectory(path: dirPath)
    do {
      let cache = try SharedCache<[UInt8]>(
        path: path, capacity: o.capacity, options: o.cacheOptions, lockMode: o.lockMode)
      let (ctx, streams) = prepare(o, cache: cache, worker: id)
      try dir.markReady(id, o.incarnation)
      // Wait for the go file (a restarted worker finds it at once).
      guard let (start, end) = FleetMember.awaitGo(dir, coordinator: o.coordinatorPID) else { return 2 }
      let group = FleetMember.startThreads(o.threads, at: start, precise: true) { t in
        let seed = SplitMix64.derive(o.seed!, UInt64(id), UInt64(o.incarnation), UInt64(t), 1)
        var loop = ThreadLoop(ctx: ctx, thread: t, ops: streams[t], seed: seed)
        return {
          loop.run(start: start, end: end)
          loop.release()
        }
      }
      // Flush until the threads are done; each flush adds what was done since the last
      // one to the timeline's bucket of this moment.
      var flusher = ResultFlusher(duration: o.duration, start: start)
      let done = FleetMember.flushUntilDone(group, coordinator: o.coordinatorPID, wake: ctx.board.urgent) {
        try? dir.writeResult(flusher.result(ctx.board, worker: id, incarnation: o.incarnation, final: false))
      }
      guard done else { return 2 }  // the coordinator is gone: stop
      try dir.writeResult(flusher.result(ctx.board, worker: id, incarnation: o.incarnation, final: true))
      return 0
    } catch {
      FileHandle.standardError.write(Data("cache-stress worker \(id).\(o.incarnation): \(error)\n".utf8))
      return 1
    }
  }

  /// The worker's context and each thread's op stream (made in parallel: a stream of a
  /// large run takes a while).
  static func prepare(_ o: StressOptions, cache: SharedCache<[UInt8]>, worker id: Int) -> (WorkerContext, [[UInt32]]) {
    let keys = KeySet(count: o.keys, size: o.keySize)
    let scrambler = RankScrambler(n: o.keys)
    let zipf = o.dist == .zipf ? ZipfGenerator(n: o.keys, theta: o.zipfTheta) : nil
    // Keep every reader's table within ~256 MiB in total.
    let budget = min(max((256 << 20) / 16 / max(1, o.writers), 1 << 14), 1 << 22)
    let ctx = WorkerContext(
      cache: cache, keys: keys, options: o, board: StatsBoard(threads: o.threads), worker: id,
      incarnation: o.incarnation, expiry: o.ttl.map { .seconds($0) } ?? .never,
      hotKey: scrambler.key(forRank: 0), trackerBudget: budget)
    final class Streams: @unchecked Sendable { var ops: [[UInt32]] = [] }
    let streams = Streams()
    streams.ops = Array(repeating: [], count: o.threads)
    let lock = NSLock()
    DispatchQueue.concurrentPerform(iterations: o.threads) { t in
      let s = OpStream(
        keys: o.keys, zipf: zipf, scrambler: scrambler, readPct: o.readPct,
        seed: SplitMix64.derive(o.seed!, UInt64(id), UInt64(o.incarnation), UInt64(t))
      ).ops
      lock.lock()
      streams.ops[t] = s
      lock.unlock()
    }
    return (ctx, streams.ops)
  }
}

/// A worker's result as it flushes it: the board's counters, and the timeline, to which
/// each flush adds what was done since the last one, in the bucket of its moment.
struct ResultFlusher {
  var timeline: Timeline
  var flushed = Counters()
  /// The histograms as of the last flush (the next interval's are the difference).
  var flushedGet = LatencyHistogram()
  var flushedSet = LatencyHistogram()
  let start: UInt64

  init(duration: Double, start: UInt64) {
    timeline = Timeline(duration: duration)
    self.start = start
  }

  mutating func result(_ board: StatsBoard, worker: Int, incarnation: Int, final: Bool) -> WorkerResult {
    var r = board.snapshot(worker: worker, incarnation: incarnation, final: final)
    let at = Int64(bitPattern: Clock.nanoseconds() &- start)
    timeline.add(r.counters.since(flushed), atNanosecondsSinceStart: at)
    flushed = r.counters
    let get = LatencyHistogram(sparse: r.getHist)
    let set = LatencyHistogram(sparse: r.setHist)
    timeline.addLatency(get: get.minus(flushedGet), set: set.minus(flushedSet), atNanosecondsSinceStart: at)
    flushedGet = get
    flushedSet = set
    r.timeline = timeline
    return r
  }
}
