import Synchronization
import SystemCalls

/// The lock-free read side: no lock, no system call (but the bounded wait's slow end),
/// no allocation. Every read follows the read protocol (a seqlock per slot):
///
/// 1. probe from the key's home slot; for each slot: load `seq` (acquire); if odd,
///    wait and reload (bounded: `backoff`);
/// 2. read `hash`, `loc`, `meta`; on a hash match, check the entry's bounds and
///    lengths (`SlotIndex.entry(at:meta:matching:)`), compare the key, copy the value out;
/// 3. acquire fence, reload `seq`: unchanged means the copy is whole and belongs to
///    this key; changed means start the slot again (`SlotIndex.seqlockRead` is steps 1–3);
/// 4. only then check expiry and checksum, and set the reference bit if clear.
/// An empty slot ends the probe: a miss. Misses are confirmed against the shift
/// sequence (`lookup`), since removals move entries backwards.
struct Reader {
  let index: SlotIndex
  let counters: HandleCounters
  /// Check each value's checksum on read (`OpenPolicy.verifyChecksumsOnRead`).
  let checksumOnRead: Bool
  /// Whether the mapping is writable (only then are reference bits set).
  let writable: Bool
  /// Writable, and reading without checksums: the common handle, whose short path
  /// (`probeInline(plain: true)`) reads neither flag again.
  @inline(__always) var isPlain: Bool { writable && !checksumOnRead }

  /// Asked when a slot stays odd past the spins: is its writer dead?
  let liveness: Liveness

  enum Probe {
    case hit(EntryInfo)
    case miss
    /// The value is larger than the buffer offered: call again with this many bytes.
    case needs(Int)
    /// Found, but its checksum does not match: counted as a miss, reported to verify.
    case corrupt
    /// A slot (or the shift sequence) stayed mid-write past the bounded wait: answered
    /// as a miss, and counted apart (`busyMisses`).
    case busy
  }

  // MARK: The bounded wait

  /// How long a reader waits on one slot that a writer is changing (or that a stopped
  /// or dead writer left odd) before answering "miss". Bounded: never a hang.
  ///
  /// First 2,048 pauses (tens of microseconds: a running writer finishes a slot in far
  /// less). Then the reader asks whether any live writer can finish it (`Liveness`: the
  /// lock's holder is alive, by its witness, as a waiting writer asks): a dead writer
  /// never finishes the slot, nor does anyone when the lock is free (damage), and it
  /// stays odd until the next write repairs it, so the reader looks once more and
  /// answers "miss" (a few tens of microseconds per read, not milliseconds). A live
  /// writer descheduled mid-write (an oversubscribed CPU) needs the reader to give up
  /// its CPU: then up to 64 `sched_yield`s and 20 sleeps of 50 µs, about 2 ms per wait.
  /// A stopped (SIGSTOP) writer costs each read of its slot two such waits (the probe's
  /// and its miss confirmation's), about 5 ms. Only this slow path makes system calls.
  static let readSpins = 2048
  static let readYields = 64
  static let readSleeps = 20
  static let readSleepMicroseconds: UInt32 = 50
  /// Probes of one miss's confirmation against the shift sequence before it stands.
  static let confirmTries = 16

  /// One wait step on a busy slot; false once the reader should give up.
  @inline(__always)
  func backoff(_ attempts: inout Int) -> Bool {
    attempts += 1
    if attempts <= Self.readSpins {
      spinPause()
      return true
    }
    return backoffSlowly(&attempts)
  }

  /// `backoff` past its spins: off the read path's straight line.
  @inline(never)
  func backoffSlowly(_ attempts: inout Int) -> Bool {
    if attempts == Self.readSpins + 1 && liveness.noWriterCanFinish() {
      // One more look (a writer that took over may have repaired the slot by now),
      // and the next call gives up.
      attempts = Self.readSpins + Self.readYields + Self.readSleeps
      return true
    }
    if attempts <= Self.readSpins + Self.readYields {
      Sys.yield()
    } else if attempts <= Self.readSpins + Self.readYields + Self.readSleeps {
      Sys.sleep(microseconds: Self.readSleepMicroseconds)
    } else {
      return false
    }
    return true
  }

  // MARK: The general probe

  /// What step 2 found in one slot.
  private enum SlotLook {
    /// Another key's slot (or an empty one: hash 0).
    case otherHash(UInt64)
    /// This key's hash but not its entry (another key, or bounds that do not check out).
    case notThisKey
    case found(SlotIndex.Entry, meta: UInt64)
  }

  /// The read protocol, steps 1–4, for any entry (inline or in a record, fitting the
  /// buffer or not, expired or not).
  @inline(__always)
  func probe(
    _ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt64, allowExpired: Bool,
    into buffer: UnsafeMutableRawBufferPointer
  ) -> Probe {
    var i = index.home(hash)
    var probes = 0
    var retries = 0
    while probes < index.slotCount {
      let read = index.seqlockRead(i) { () -> SlotLook in
        let h = index.hash(at: i)
        guard h == hash else { return .otherHash(h) }
        let meta = index.meta(at: i)
        guard let e = index.entry(at: i, meta: meta, matching: key) else { return .notThisKey }
        if e.vlen <= buffer.count, let out = buffer.baseAddress { index.copyValue(of: e, slot: i, to: out) }
        return .found(e, meta: meta)
      }
      switch read {
      case .busy, .changed:
        if !backoff(&retries) { return .busy }
      case .stable(.otherHash(0)):
        return .miss
      case .stable(.otherHash), .stable(.notThisKey):
        i = index.next(i)
        probes += 1
      case .stable(.found(let e, let meta)):
        // The copy is whole and is this key's (step 4: now judge it).
        return judge(e, slot: i, meta: meta, hash: hash, now: now, allowExpired: allowExpired, buffer: buffer)
      }
    }
    return .miss
  }

  /// Step 4 for a whole copy of this key's entry.
  @inline(__always)
  private func judge(
    _ e: SlotIndex.Entry, slot i: Int, meta: UInt64, hash: UInt64, now: UInt64, allowExpired: Bool,
    buffer: UnsafeMutableRawBufferPointer
  ) -> Probe {
    let expiry = meta & Format.expiryMask
    // The clock is read only for entries that can expire (`now` 0: not read yet).
    let expired = expiry != 0 && Expiry.isExpired(meta, now: now != 0 ? now : Sys.expiryClockMilliseconds())
    if expired && !allowExpired { return .miss }
    if e.vlen > buffer.count { return .needs(e.vlen) }
    if checksumOnRead,
      KeyHash.checksum(UnsafeRawBufferPointer(start: buffer.baseAddress, count: e.vlen), hash: hash) != e.sum
    {
      return .corrupt
    }
    if meta & Format.hotBit == 0 && writable { index.markHit(i, meta: meta) }
    return .hit(
      EntryInfo(
        valueCount: e.vlen, expiryMilliseconds: expiry == 0 ? nil : expiry,
        version: e.cas, isExpired: expired))
  }

  /// `probe`, with misses confirmed: a miss counts only if no removal moved entries
  /// while it probed (the shift sequence was even and unchanged). A probe that gave up
  /// on a busy slot is confirmed the same way (the second probe waits again: a
  /// descheduled writer may have finished), and stays `busy` if that one misses too.
  @inline(__always)
  func lookup(
    _ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt64, allowExpired: Bool,
    into buffer: UnsafeMutableRawBufferPointer
  ) -> Probe {
    let first = probe(key, hash: hash, now: now, allowExpired: allowExpired, into: buffer)
    switch first {
    case .miss, .busy: break
    case .hit, .needs, .corrupt: return first
    }
    let again = confirmMiss(key, hash: hash, now: now, allowExpired: allowExpired, into: buffer)
    if case .busy = first, case .miss = again { return .busy }
    return again
  }

  /// Confirms a miss: probes again until no removal moved entries meanwhile (the shift
  /// sequence even and unchanged across the probe: a seqlock read of the whole index).
  @inline(__always)
  func confirmMiss(
    _ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt64, allowExpired: Bool,
    into buffer: UnsafeMutableRawBufferPointer
  ) -> Probe {
    let shift = index.memory.header(.shiftSeq)
    var waits = 0
    var tries = 0
    while tries < Self.confirmTries {
      let s0 = shift.load(.acquiring)
      if s0 & 1 != 0 {
        // A removal is moving entries (its writer may be descheduled): wait, bounded.
        if !backoff(&waits) { return .busy }
        continue
      }
      tries += 1
      let again = probe(key, hash: hash, now: now, allowExpired: allowExpired, into: buffer)
      atomicMemoryFence(ordering: .acquiring)
      if shift.load(.relaxed) == s0 { return again }
      switch again {
      case .miss, .busy: continue
      case .hit, .needs, .corrupt: return again
      }
    }
    return .miss
  }

  // MARK: The short path

  /// `probeInline` found an empty slot before the key (a miss, to be confirmed).
  static let fastMiss = -1
  /// `probeInline` met anything unusual: the general `lookup` decides.
  static let fastUnsure = -2

  /// The common case of `probe`, straight-line and short: an inline entry, found within
  /// `SlotIndex.shortProbe` slots of home, stable, fitting `buffer`. Returns its length
  /// (copied into `buffer`), `fastMiss` at an empty slot, or `fastUnsure` for everything
  /// else (a writer in the slot, a record in a log, a value larger than `buffer`, a long
  /// probe run, a checksum mismatch), which the caller hands to `lookup`. Also hands
  /// back a hit's expiry (0: never) and version.
  ///
  /// Two steps: a short loop that only compares hashes finds the slot, then one
  /// straight-line seqlock read of it. Keeping the copy (a call) out of the loop keeps
  /// the loop's values in registers: fewer instructions and stack stores per read,
  /// which lets the CPU start the next read's cache miss before this one's is served.
  /// Slots whose hash differs are skipped without a seqlock check: skipping a slot that
  /// is just then receiving this key can only lead to a miss (confirmed by the general
  /// path against the shift sequence) or to this key's entry in a later slot, itself
  /// checked by its own sequence: a whole value of this key either way. A slot with the
  /// same hash but another key (a 64-bit hash collision) is left to the general path.
  ///
  /// With `plain` (a constant at its call site) the caller has checked that this handle
  /// is writable and reads without checksums (`isPlain`), and the flags are not read again.
  /// The short paths' scan: from the home slot, the first slot whose hash is `hash`
  /// (comparing hashes only), within `SlotIndex.shortProbe` slots; `fastMiss` at an empty
  /// slot first, `fastUnsure` past the limit.
  @inline(__always)
  func shortScan(_ hash: UInt64) -> Int {
    var i = index.home(hash)
    var probes = 0
    while true {
      let h = index.hash(at: i)
      if h == hash { return i }
      if h == 0 { return Self.fastMiss }
      probes &+= 1
      if probes == SlotIndex.shortProbe { return Self.fastUnsure }
      i = index.next(i)
    }
  }

  @inline(__always)
  func probeInline(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
    expiry: inout UInt64, version: inout UInt64, plain: Bool = false
  ) -> Int {
    let i = shortScan(hash)
    guard i >= 0 else { return i }
    return readInline(at: i, key, hash: hash, into: buffer, expiry: &expiry, version: &version, plain: plain)
  }

  /// `probeInline`'s read of slot `i`, the first slot of its run whose hash is `hash`
  /// (found by `shortScan`, or by the batch read's step 2 at the home slot): the same
  /// answers, with `fastUnsure` for everything the general path must settle.
  @inline(__always)
  func readInline(
    at i: Int, _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
    expiry: inout UInt64, version: inout UInt64, plain: Bool
  ) -> Int {
    let read = index.seqlockRead(i) { () -> (SlotIndex.Entry, meta: UInt64)? in
      let meta = index.meta(at: i)
      guard meta & Format.inlineBit != 0, let out = buffer.baseAddress,
        let e = index.entry(at: i, meta: meta, matching: key), e.vlen <= buffer.count
      else { return nil }
      index.copyValue(of: e, slot: i, to: out)
      return (e, meta)
    }
    guard case .stable(let found?) = read else { return Self.fastUnsure }
    // The copy is whole and is this key's. Now judge it.
    let e = found.0
    let meta = found.meta
    let exp = meta & Format.expiryMask
    if exp != 0 && Expiry.isExpired(meta, now: Sys.expiryClockMilliseconds()) { return Self.fastUnsure }
    if !plain && checksumOnRead,
      KeyHash.checksum(UnsafeRawBufferPointer(start: buffer.baseAddress, count: e.vlen), hash: hash) != e.sum
    {
      return Self.fastUnsure
    }
    if meta & Format.hotBit == 0 && (plain || writable) { index.markHit(i, meta: meta) }
    expiry = exp
    version = e.cas
    return e.vlen
  }

  // MARK: Counters

  /// Hit and miss counters are bumped with a plain load and store, not an atomic
  /// read-modify-write: on x86 a locked instruction is a full barrier, which would stop
  /// the CPU from overlapping one read's cache miss with the next read's. The price:
  /// threads sharing one handle may lose an occasional increment (counters are
  /// statistics, never used for decisions). Each handle has its own counter words.
  @inline(__always) func countHit() { counters.hits.increment() }
  @inline(__always) func countMiss() { counters.misses.increment() }

  /// A miss that gave up on a busy slot: counted as a miss and as a busy one.
  func countBusyMiss() {
    countMiss()
    counters.busy.increment()
  }

  // MARK: Scans

  /// One entry seen by `forEachEntry`.
  struct ScannedEntry {
    var key: [UInt8]
    var value: [UInt8]?
    var info: EntryInfo
    var inMainLog: Bool
  }

  /// Tries per slot before a scan passes a slot that keeps changing.
  static let scanTries = 64

  /// Visits live entries without the write lock (each copied under its slot's seqlock,
  /// so each is whole). Entries written or moved during the scan may be missed or seen
  /// twice; writers are never blocked. Return false from `body` to stop.
  func forEachEntry(values: Bool, includeExpired: Bool = false, _ body: (ScannedEntry) throws -> Bool) rethrows {
    let m = index.memory
    let now = Sys.expiryClockMilliseconds()
    for i in 0..<index.slotCount {
      var attempt = 0
      while attempt < Self.scanTries {
        attempt += 1
        let read = index.seqlockRead(i) { () -> (entry: ScannedEntry, sum: UInt32, hash: UInt64)?? in
          let h = index.hash(at: i)
          if h == 0 { return .some(nil) }
          let meta = index.meta(at: i)
          let loc = index.loc(at: i)
          // An inline entry's record must be its header alone; an entry's, a whole entry.
          guard let e = index.entry(at: i, meta: meta),
            let rh = m.recordHeader(at: loc), rh.kind == (e.inline ? Format.kindHeaderOnly : Format.kindEntry)
          else { return .some(nil) }
          let bytes = index.bytes(of: e, slot: i)
          let expiry = meta & Format.expiryMask
          let info = EntryInfo(
            valueCount: e.vlen, expiryMilliseconds: expiry == 0 ? nil : expiry, version: e.cas,
            isExpired: Expiry.isExpired(meta, now: now))
          let scanned = ScannedEntry(
            key: Array(bytes.key), value: values ? Array(bytes.value) : nil, info: info,
            inMainLog: loc >= m.mainBase)
          return .some((scanned, e.sum, h))
        }
        guard case .stable(let result) = read else {
          if case .busy = read { spinPause() }
          continue
        }
        // Whole, but intact? As on the read path: the key must hash to the slot's hash
        // and the value match its checksum; a damaged entry is skipped, never handed out.
        guard let found = result, let (entry, sum, h) = found,
          entry.key.withUnsafeBytes({ KeyHash.key($0) }) == h,
          entry.value.map({ v in v.withUnsafeBytes { KeyHash.checksum($0, hash: h) } == sum }) ?? true
        else { break }
        if entry.info.isExpired && !includeExpired { break }
        if try !body(entry) { return }
        break
      }
    }
  }
}
