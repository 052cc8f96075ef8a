import Glibc
import Synchronization

extension CacheEngine {
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

  /// How long a reader waits on one slot that a writer is changing (or that a stopped
  /// or dead writer left odd) before answering "miss". Bounded: never a hang.
  ///
  /// First 2,048 pauses (tens of microseconds: a running writer finishes a slot in far
  /// less). Then the reader asks whether the lock's holder is a dead process (its
  /// witness, as a waiting writer does): a dead writer never finishes the slot, which
  /// stays odd until the next write repairs it, so the reader looks once more and
  /// answers "miss" (a few tens of microseconds per read, not milliseconds). A live
  /// writer descheduled mid-write (an oversubscribed CPU) needs the reader to give up
  /// its CPU: then up to 64 `sched_yield`s and 20 sleeps of 50 µs, about 2 ms in all;
  /// a stopped (SIGSTOP) one costs each read of its slot that bound. Only this slow
  /// path makes system calls.
  static let readSpins = 2048
  static let readYields = 64
  static let readSleeps = 20

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
    if attempts == Self.readSpins + 1 && writerIsDead() {
      // One more look (a writer that took over may have repaired the slot by now),
      // and the next call gives up.
      attempts = Self.readSpins + Self.readYields + Self.readSleeps
      return true
    }
    if attempts <= Self.readSpins + Self.readYields {
      sched_yield()
    } else if attempts <= Self.readSpins + Self.readYields + Self.readSleeps {
      usleep(50)
    } else {
      return false
    }
    return true
  }

  /// Whether the last writer died mid-change and nobody has repaired yet (see `backoff`).
  func writerIsDead() -> Bool {
    WriteLock.lastHolderDiedMidChange(memory: memory, fd: file.fd, procCount: layout.procCount,
                                      asker: lock?.asker ?? .none)
  }

  /// The read protocol (a seqlock per slot, no lock, no system call):
  ///
  /// 1. probe from the key's home slot; for each slot: load `seq` (acquire); if odd,
  ///    pause and reload (bounded);
  /// 2. read `hash`, `loc`, `meta`; on a hash match, check the record's bounds and
  ///    lengths (`recordHeader(at:)`), compare the key, copy the value out;
  /// 3. acquire fence, reload `seq`: unchanged means the copy is whole and belongs to
  ///    this key; changed means start the slot again;
  /// 4. only then check expiry and checksum, and set the reference bit if clear.
  /// An empty slot ends the probe: a miss. Misses are confirmed against the shift
  /// sequence (`lookup`), since removals move entries backwards.
  @inline(__always)
  func probe(_ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt64, allowExpired: Bool,
             into buffer: UnsafeMutableRawBufferPointer) -> Probe {
    let m = memory
    var i = m.home(hash)
    var probes = 0
    var retries = 0
    while probes < m.slotCount {
      let seq = m.slot(i, Format.S.seq)
      let s1 = seq.pointee.load(ordering: .acquiring)
      if s1 & 1 != 0 {
        if !backoff(&retries) { return .busy }
        continue
      }
      let h = m.slot(i, Format.S.hash).pointee.load(ordering: .relaxed)
      if h != hash {
        atomicMemoryFence(ordering: .acquiring)
        if seq.pointee.load(ordering: .relaxed) != s1 {
          if !backoff(&retries) { return .busy }
          continue
        }
        if h == 0 { return .miss }
        i = m.next(i); probes += 1
        continue
      }
      let meta = m.slot(i, Format.S.meta).pointee.load(ordering: .relaxed)
      var matched = false
      var vlen = 0, sum: UInt32 = 0, cas: UInt64 = 0
      if meta & Format.inlineBit != 0 {
        // Inline: key and value in this slot's own lines: one memory access.
        if let l = m.inlineLengths(i), l.klen == key.count, m.inlineKeyEquals(i, key) {
          matched = true
          vlen = l.vlen
          sum = m.inlineSum(i)
          cas = m.inlineVersion(i)
          if vlen <= buffer.count, let out = buffer.baseAddress { m.copyInlineValue(i, klen: l.klen, vlen: vlen, to: out) }
        }
      } else {
        let loc = Int(truncatingIfNeeded: m.slot(i, Format.S.loc).pointee.load(ordering: .relaxed))
        if let rh = m.recordHeader(at: loc), rh.kind == Format.kindEntry, rh.klen == key.count,
           m.keyEquals(record: loc, key) {
          matched = true
          vlen = rh.vlen
          sum = rh.sum
          cas = rh.cas
          if vlen <= buffer.count, let out = buffer.baseAddress { m.copyValue(record: loc, rh, to: out) }
        }
      }
      atomicMemoryFence(ordering: .acquiring)
      if seq.pointee.load(ordering: .relaxed) != s1 {
        if !backoff(&retries) { return .busy }
        continue
      }
      guard matched else { i = m.next(i); probes += 1; continue }
      // The copy is whole and is this key's. Now judge it.
      let expiry = meta & Format.expiryMask
      // The clock is read only for entries that can expire (`now` 0: not read yet).
      let expired = expiry != 0 && expiry <= (now != 0 ? now : Sys.expiryClockMilliseconds())
      if expired && !allowExpired { return .miss }
      if vlen > buffer.count { return .needs(vlen) }
      if checksumOnRead,
         KeyHash.checksum(UnsafeRawBufferPointer(start: buffer.baseAddress, count: vlen), hash: hash) != sum {
        return .corrupt
      }

      if meta & Format.referencedBit == 0 && writable {
        m.slot(i, Format.S.meta).pointee.bitwiseOr(Format.referencedBit, ordering: .relaxed)
      }
      return .hit(EntryInfo(valueCount: vlen, expiryMilliseconds: expiry == 0 ? nil : expiry,
                            version: cas, isExpired: expired))
    }
    return .miss
  }

  /// `probe`, with misses confirmed: a miss counts only if no removal moved entries
  /// while it probed (the shift sequence was even and unchanged). A probe that gave up
  /// on a busy slot is confirmed the same way (the second probe waits again: a
  /// descheduled writer may have finished), and stays `busy` if that one misses too.
  @inline(__always)
  func lookup(_ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt64, allowExpired: Bool,
              into buffer: UnsafeMutableRawBufferPointer) -> Probe {
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
  /// sequence even and unchanged across the probe).
  @inline(__always)
  func confirmMiss(_ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt64, allowExpired: Bool,
                   into buffer: UnsafeMutableRawBufferPointer) -> Probe {
    let shift = memory.word(Format.H.shiftSeq)
    var waits = 0, tries = 0
    while tries < 16 {
      let s0 = shift.pointee.load(ordering: .acquiring)
      if s0 & 1 != 0 {
        // A removal is moving entries (its writer may be descheduled): wait, bounded.
        if !backoff(&waits) { return .busy }
        continue
      }
      tries += 1
      let again = probe(key, hash: hash, now: now, allowExpired: allowExpired, into: buffer)
      atomicMemoryFence(ordering: .acquiring)
      if shift.pointee.load(ordering: .relaxed) == s0 { return again }
      switch again {
      case .miss, .busy: continue
      case .hit, .needs, .corrupt: return again
      }
    }
    return .miss
  }

  /// The non-generic read used by the public API: copies the value of `key` into a
  /// temporary buffer (stack for values up to 256 bytes, and for larger ones while the
  /// stack has room) and calls `body` with it. Returns false on a miss. Being
  /// non-generic, it costs no generic-metadata lookups per call.
  /// Precondition: `checkKey(key)` passed (every public entry point checks it first).
  @usableFromInline
  func read(_ key: UnsafeRawBufferPointer, allowExpired: Bool, countStats: Bool,
            _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> Void) rethrows -> Bool {
    let hash = KeyHash.key(key)
    let now: UInt64 = 0  // read lazily by `probe`, only for an entry with an expiry
    // Most values fit 256 bytes: a constant size lets the compiler place the buffer on
    // the stack with no size check.
    var found = false
    var want = try withUnsafeTemporaryAllocation(byteCount: 256, alignment: 16) { buffer in
      try attempt(key, hash, now, allowExpired, countStats, buffer, &found, body)
    }
    // A larger value: size the buffer from the entry (it may grow again meanwhile).
    for _ in 0..<8 where want > 0 {
      want = try withUnsafeTemporaryAllocation(byteCount: want, alignment: 16) { buffer in
        try attempt(key, hash, now, allowExpired, countStats, buffer, &found, body)
      }
    }
    return found
  }

  /// One lookup into `buffer`, calling `body` on a hit (and setting `found`). Returns the
  /// size to try again with when the value is larger than the buffer, else 0.
  @inline(__always)
  private func attempt(_ key: UnsafeRawBufferPointer, _ hash: UInt64, _ now: UInt64, _ allowExpired: Bool,
                       _ countStats: Bool, _ buffer: UnsafeMutableRawBufferPointer, _ found: inout Bool,
                       _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> Void) rethrows -> Int {
    // The common case first: an inline entry, by the straight-line path.
    if !allowExpired {
      var expiry: UInt64 = 0, version: UInt64 = 0
      let n = probeInline(key, hash: hash, into: buffer, expiry: &expiry, version: &version)
      if n >= 0 {
        let info = EntryInfo(valueCount: n, expiryMilliseconds: expiry == 0 ? nil : expiry, version: version, isExpired: false)
        return try finish(.hit(info), countStats, buffer, &found, body)
      }
      if n == Self.fastMiss {
        // An empty slot before the key: only the miss's confirmation is left to do.
        return try finish(confirmMiss(key, hash: hash, now: now, allowExpired: false, into: buffer),
                          countStats, buffer, &found, body)
      }
    }
    return try finish(lookup(key, hash: hash, now: now, allowExpired: allowExpired, into: buffer),
                      countStats, buffer, &found, body)
  }

  @inline(__always)
  private func finish(_ outcome: Probe, _ countStats: Bool, _ buffer: UnsafeMutableRawBufferPointer,
                      _ found: inout Bool, _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> Void) rethrows -> Int {
    switch outcome {
    case .hit(let info):
      if countStats { countHit() }
      try body(UnsafeRawBufferPointer(start: buffer.baseAddress, count: info.valueCount), info)
      found = true
      return 0
    case .miss, .corrupt:
      if countStats { countMiss() }
      return 0
    case .busy:
      if countStats { countBusyMiss() }
      return 0
    case .needs(let n):
      return n
    }
  }

  /// The copy-out read, the shortest path from the file to the caller: `key`'s value
  /// is copied straight from its slot (or record) into `buffer`, with no temporary
  /// buffer and no closure. Returns the value's length, or -1 on a miss; the bytes were
  /// copied only when the length is at most `buffer.count` (call again with a buffer
  /// that large otherwise, like `snprintf`).
  /// Precondition: `checkKey(key)` passed.
  @usableFromInline
  func copyValue(_ key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    let hash = KeyHash.key(key)
    let fast = probeInline(key, hash: hash, into: buffer)
    if fast >= 0 {
      countHit()
      return fast
    }
    return copyValueSlowly(key, hash: hash, fast: fast, into: buffer)
  }

  /// `copyValue` past its fast path: kept out of line so that the fast path stays small.
  @inline(never)
  func copyValueSlowly(_ key: UnsafeRawBufferPointer, hash: UInt64, fast: Int,
                       into buffer: UnsafeMutableRawBufferPointer) -> Int {
    let outcome = fast == Self.fastMiss
      ? confirmMiss(key, hash: hash, now: 0, allowExpired: false, into: buffer)
      : lookup(key, hash: hash, now: 0, allowExpired: false, into: buffer)
    switch outcome {
    case .hit(let info):
      countHit()
      return info.valueCount
    case .needs(let n):
      return n
    case .miss, .corrupt:
      countMiss()
      return -1
    case .busy:
      countBusyMiss()
      return -1
    }
  }

  /// `probeInline` found an empty slot before the key (a miss, to be confirmed).
  static let fastMiss = -1
  /// `probeInline` met anything unusual: the general `lookup` decides.
  static let fastUnsure = -2

  /// The common case of `probe`, straight-line and short: an inline entry, found within
  /// a few slots of home, stable, fitting `buffer`. Returns its length (copied into
  /// `buffer`), `fastMiss` at an empty slot, or `fastUnsure` for everything else (a
  /// writer in the slot, a record in a log, a value larger than `buffer`, a long probe
  /// run, a checksum mismatch), which the caller hands to `lookup`.
  ///
  /// Slots whose hash differs are skipped without a seqlock check: skipping a slot that
  /// is just then receiving this key can only lead to a miss (confirmed by the general
  /// path against the shift sequence) or to this key's entry in a later slot, itself
  /// checked by its own sequence: a whole value of this key either way.
  @inline(__always)
  func probeInline(_ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    var expiry: UInt64 = 0, version: UInt64 = 0
    return probeInline(key, hash: hash, into: buffer, expiry: &expiry, version: &version)
  }

  /// `probeInline`, also handing back a hit's expiry (0: never) and version.
  ///
  /// Two steps: a short loop that only compares hashes finds the slot, then one
  /// straight-line seqlock read of it. Keeping the copy (a call) out of the loop keeps
  /// the loop's values in registers: fewer instructions and stack stores per read,
  /// which lets the CPU start the next read's cache miss before this one's is served.
  /// A slot with the same hash but another key (a 64-bit hash collision) is left to
  /// the general path.
  @inline(__always)
  func probeInline(_ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
                   expiry: inout UInt64, version: inout UInt64) -> Int {
    let m = memory
    var i = m.home(hash)
    var probes = 0
    while true {
      let h = m.slot(i, Format.S.hash).pointee.load(ordering: .relaxed)
      if h == hash { break }
      if h == 0 { return Self.fastMiss }
      probes &+= 1
      if probes == 8 { return Self.fastUnsure }
      i = m.next(i)
    }
    let seq = m.slot(i, Format.S.seq)
    let s1 = seq.pointee.load(ordering: .acquiring)
    let meta = m.slot(i, Format.S.meta).pointee.load(ordering: .relaxed)
    guard s1 & 1 == 0, meta & Format.inlineBit != 0, let l = m.inlineLengths(i),
          l.vlen <= buffer.count, let out = buffer.baseAddress,
          l.klen == key.count, m.inlineKeyEquals(i, key) else { return Self.fastUnsure }
    m.copyInlineValue(i, klen: l.klen, vlen: l.vlen, to: out)
    let sum = m.inlineSum(i)
    let cas = m.inlineVersion(i)
    atomicMemoryFence(ordering: .acquiring)
    guard seq.pointee.load(ordering: .relaxed) == s1 else { return Self.fastUnsure }
    // The copy is whole and is this key's. Now judge it.
    let e = meta & Format.expiryMask
    if e != 0 && e <= Sys.expiryClockMilliseconds() { return Self.fastUnsure }
    if checksumOnRead,
       KeyHash.checksum(UnsafeRawBufferPointer(start: out, count: l.vlen), hash: hash) != sum {
      return Self.fastUnsure
    }
    if meta & Format.referencedBit == 0 && writable {
      m.slot(i, Format.S.meta).pointee.bitwiseOr(Format.referencedBit, ordering: .relaxed)
    }
    expiry = e
    version = cas
    return l.vlen
  }

  /// `read` returning what `body` returns (nil on a miss). Same costs as `read`.
  @inline(__always)
  func withValue<R>(forKey key: UnsafeRawBufferPointer, allowExpired: Bool = false, countStats: Bool = true,
                    _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> R) rethrows -> R? {
    var result: R? = nil
    _ = try read(key, allowExpired: allowExpired, countStats: countStats) { bytes, info in
      result = try body(bytes, info)
    }
    return result
  }
}


extension CacheEngine {
  /// Hit and miss counters are bumped with a plain load and store, not an atomic
  /// read-modify-write: on x86 a locked instruction is a full barrier, which would stop
  /// the CPU from overlapping one read's cache miss with the next read's. The price:
  /// threads sharing one handle may lose an occasional increment (counters are
  /// statistics, never used for decisions). Each handle has its own counter words.
  @inline(__always)
  func countHit() {
    hitsWord.pointee.store(hitsWord.pointee.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
  }

  @inline(__always)
  func countMiss() {
    missesWord.pointee.store(missesWord.pointee.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
  }

  /// A miss that gave up on a busy slot: counted as a miss and as a busy one.
  func countBusyMiss() {
    countMiss()
    busyWord.pointee.store(busyWord.pointee.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
  }
}
