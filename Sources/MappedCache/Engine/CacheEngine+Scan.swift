import Synchronization

extension CacheEngine {
  /// One entry seen by `forEachEntry`.
  struct ScannedEntry {
    var key: [UInt8]
    var value: [UInt8]?
    var info: EntryInfo
    var inMainLog: Bool
  }

  /// Visits live entries without the write lock (each copied under its slot's seqlock,
  /// so each is whole). Entries written or moved during the scan may be missed or seen
  /// twice; writers are never blocked. Return false from `body` to stop.
  func forEachEntry(values: Bool, includeExpired: Bool = false, _ body: (ScannedEntry) throws -> Bool) rethrows {
    let m = memory
    let now = Sys.expiryClockMilliseconds()
    for i in 0..<m.slotCount {
      var attempt = 0
      while attempt < 64 {
        attempt += 1
        let seq = m.slot(i, Format.S.seq)
        let s1 = seq.pointee.load(ordering: .acquiring)
        if s1 & 1 != 0 { spinPause(); continue }
        let h = m.slot(i, Format.S.hash).pointee.load(ordering: .relaxed)
        if h == 0 { break }
        let loc = Int(truncatingIfNeeded: m.slot(i, Format.S.loc).pointee.load(ordering: .relaxed))
        let meta = m.slot(i, Format.S.meta).pointee.load(ordering: .relaxed)
        let inline = meta & Format.inlineBit != 0
        let lengths = inline ? m.inlineLengths(i) : nil
        guard let rh = m.recordHeader(at: loc), rh.kind != Format.kindPad,
              rh.kind == (inline ? Format.kindHeaderOnly : Format.kindEntry), !inline || lengths != nil else {
          atomicMemoryFence(ordering: .acquiring)
          if seq.pointee.load(ordering: .relaxed) != s1 { continue }
          break
        }
        let bytes = inline ? m.inlineBytes(i, klen: lengths!.klen, vlen: lengths!.vlen) : m.recordBytes(loc, rh)
        let key = Array(bytes.key)
        let value = values ? Array(bytes.value) : nil
        let sum = inline ? m.inlineSum(i) : rh.sum
        atomicMemoryFence(ordering: .acquiring)
        if seq.pointee.load(ordering: .relaxed) != s1 { continue }
        // Whole, but intact? As on the read path: the key must hash to the slot's hash
        // and the value match its checksum; a damaged entry is skipped, never handed out.
        guard key.withUnsafeBytes({ KeyHash.key($0) }) == h,
              value.map({ v in v.withUnsafeBytes { KeyHash.checksum($0, hash: h) } == sum }) ?? true else { break }
        let expiry = meta & Format.expiryMask
        let expired = expiry != 0 && expiry <= now
        if expired && !includeExpired { break }
        let info = EntryInfo(valueCount: bytes.value.count, expiryMilliseconds: expiry == 0 ? nil : expiry,
                             version: inline ? m.inlineVersion(i) : rh.cas, isExpired: expired)
        if try !body(ScannedEntry(key: key, value: value, info: info, inMainLog: loc >= layout.mainBase)) { return }
        break
      }
    }
  }
}
